"""The compiler pipeline: card file -> loop source -> file on disk.

`compile_card` is a straight line: load -> validate -> resolve -> render (which checks that the
output parses and binds every name it reads). `write_atomic` replaces a file only once the new
content is complete, so a failed compile never touches the previous output.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .card import load_card
from .errors import CardError, RtcError, UsageError
from .render import render
from .resolve import ResolvedCard, resolve
from .schema import SCHEMA_FILE, schema_text
from .validate import validate

RECIPES = Path("recipes")
GENERATED = Path("generated")


def load_resolved(card_path: str | Path, source: str | None = None) -> ResolvedCard:
    """Load, validate and resolve a card. `source` is the path the loop's header shows."""
    raw = load_card(card_path)
    validate(raw)
    return resolve(raw, source=source or Path(card_path).as_posix())


def compile_card(
    card_path: str | Path, output_name: str | None = None, source: str | None = None
) -> tuple[ResolvedCard, str]:
    """Compile one card; returns the resolved card and the loop's source."""
    card = load_resolved(card_path, source)
    filename = output_name or f"{card.name}.py"
    return card, render(card, filename)


def write_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same directory and a rename."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{path}: is a directory; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class BuildResult:
    written: list[Path]
    stale: list[Path]
    errors: list[str]


def build_all(root: Path = Path("."), check: bool = False) -> BuildResult:
    """Compile every card in recipes/ into generated/<name>.py (and refresh the schema file).

    With `check`, nothing is written: the files that would change are returned as `stale`.
    """
    recipes = root / RECIPES
    cards = sorted(recipes.glob("*.yaml"))
    if not cards:
        raise RtcError(f"no cards in {recipes}/; run `rtc build` from the project root")
    outputs: dict[Path, str] = {}
    errors: list[str] = []
    for card_path in cards:
        try:
            card, source = compile_card(card_path, source=card_path.relative_to(root).as_posix())
        except CardError as exc:
            errors.append(str(exc))
            continue
        target = root / GENERATED / f"{card.name}.py"
        if target in outputs:
            errors.append(f"{card_path}: name: {card.name!r} is also the name of another card")
            continue
        outputs[target] = source
    # Only rtc's own checkout carries the schema file; a user's project with recipes/ does not.
    schema_file = root / "compiler" / "schema" / SCHEMA_FILE.name
    if schema_file.resolve() == SCHEMA_FILE.resolve():
        outputs[schema_file] = schema_text()
    expected = set(outputs)
    leftovers = [p for p in sorted((root / GENERATED).glob("*.py")) if p not in expected]

    result = BuildResult(written=[], stale=[], errors=errors)
    for path, text in outputs.items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if check:
            result.stale.append(path)
        elif not errors:
            write_atomic(path, text)
            result.written.append(path)
    for path in leftovers:
        if check:
            result.stale.append(path)
        elif not errors:
            path.unlink()
            result.written.append(path)
    return result
