"""Load a recipe card from YAML, keeping the line and column of every value.

Plain PyYAML has three traps for cards: it silently keeps the last of two duplicate keys, it reads
`lr: 5e-4` as the string "5e-4" (YAML 1.1 floats need a dot), and `on`/`off`/`yes`/`no` as booleans.
Here a duplicate key is an error, any plain scalar that looks like a number in scientific notation is
read as the float it means, and only true/false are booleans (as in YAML 1.2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .errors import CardError, Problem, UsageError

Path_ = tuple[str | int, ...]

_SCIENTIFIC = re.compile(
    r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$|^[-+]?\.[0-9_]+[eE][-+]?[0-9]+$"
)


class _CardLoader(yaml.SafeLoader):
    """SafeLoader that also resolves `5e-4`-style plain scalars as floats, and reads booleans the way
    YAML 1.2 does: only true/false; `thinking: on` is the word "on", not a boolean."""


_CardLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_CardLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_CardLoader.add_implicit_resolver("tag:yaml.org,2002:float", _SCIENTIFIC, list("-+0123456789."))


@dataclass(frozen=True)
class RawCard:
    """A card as written: plain data plus the position of every value and key."""

    file: str
    data: dict
    text: str
    positions: dict[Path_, tuple[int, int]] = field(default_factory=dict)

    def where(self, path: Path_) -> tuple[int, int]:
        """Line and column of the value at `path`, or of its nearest written ancestor."""
        while path not in self.positions and path:
            path = path[:-1]
        return self.positions.get(path, (1, 1))

    def problem(self, path: Path_, message: str, *, key: bool = False) -> Problem:
        """A `Problem` located at `path` (at the key itself when `key` is true)."""
        line, col = self.where(("key", *path) if key and ("key", *path) in self.positions else path)
        return Problem(self.file, line, col, dotted(path), message)


def dotted(path: Path_) -> str:
    """`("sampling", "top_p")` -> `sampling.top_p`; list indices as `[i]`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def load_card(path: str | Path) -> RawCard:
    """Read and parse a card file. Raises `UsageError` if unreadable, `CardError` if not a mapping."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read card: {exc}") from None
    return parse_card(text, str(path))


# YAML structures whose opening a syntax error can be far from: reported where they opened.
_UNCLOSED = ("flow sequence", "flow mapping", "quoted scalar")


def _line_col(text: str, position: int) -> tuple[int, int]:
    before = text[:position]
    return before.count("\n") + 1, position - (before.rfind("\n") + 1) + 1


def parse_card(text: str, file: str) -> RawCard:
    """Parse card text; every problem is reported as a `CardError` located in `file`."""
    loader = None
    try:
        loader = _CardLoader(text)
        node = loader.get_single_node()
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, other controls)
        line, col = _line_col(text, exc.position)
        character = chr(exc.character) if isinstance(exc.character, int) else exc.character
        message = f"invalid YAML: the character {character!r} is not allowed in a card; remove it"
        raise CardError([Problem(file, line, col, "", message)]) from None
    except yaml.MarkedYAMLError as exc:
        message = " ".join(str(exc.problem or exc).split())
        opened, found = exc.context_mark, exc.problem_mark
        context = " ".join(str(exc.context or "").split())
        unclosed = next((what for what in _UNCLOSED if context.endswith(what)), None)
        if unclosed and opened is not None and found is not None and opened.line != found.line:
            # An unclosed bracket or quote: point at where it opened, say where YAML noticed.
            where = f"line {found.line + 1}, column {found.column + 1}"
            message = f"invalid YAML: the {unclosed} opened here is not closed ({message} at {where})"
            line, col = opened.line + 1, opened.column + 1
        else:
            mark = found or opened
            line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
            message = f"invalid YAML: {message}"
        raise CardError([Problem(file, line, col, "", message)]) from None
    except yaml.YAMLError as exc:
        raise CardError([Problem(file, 1, 1, "", f"invalid YAML: {exc}")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    if node is None:
        raise CardError([Problem(file, 1, 1, "", "the card is empty; start from `rtc new`")])
    if not isinstance(node, yaml.MappingNode):
        line, col = node.start_mark.line + 1, node.start_mark.column + 1
        raise CardError([Problem(file, line, col, "", "a card must be a mapping of fields (key: value)")])

    positions: dict[Path_, tuple[int, int]] = {}
    problems: list[Problem] = []
    constructor = _CardLoader("")

    def build(n: yaml.Node, path: Path_) -> object:
        positions[path] = (n.start_mark.line + 1, n.start_mark.column + 1)
        if isinstance(n, yaml.MappingNode):
            out: dict = {}
            for key_node, value_node in n.value:
                key = constructor.construct_object(key_node)
                if not isinstance(key, str):
                    key = str(key)
                if key in out:
                    first = positions[(*path, key)][0]
                    problems.append(
                        Problem(
                            file,
                            key_node.start_mark.line + 1,
                            key_node.start_mark.column + 1,
                            dotted((*path, key)),
                            f"duplicate key (first set on line {first}); keep one",
                        )
                    )
                    continue
                positions[("key", *path, key)] = (
                    key_node.start_mark.line + 1,
                    key_node.start_mark.column + 1,
                )
                out[key] = build(value_node, (*path, key))
            return out
        if isinstance(n, yaml.SequenceNode):
            return [build(item, (*path, i)) for i, item in enumerate(n.value)]
        return constructor.construct_object(n)

    data = build(node, ())
    if problems:
        raise CardError(problems)
    assert isinstance(data, dict)
    return RawCard(file=file, data=data, text=text, positions=positions)
