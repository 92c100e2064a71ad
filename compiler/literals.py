"""The only way values from a card enter generated code.

SECURITY: every user-controlled string (titles, prompts, paths, model names) reaches a generated
loop through one of these functions. Changing them has security implications: a recipe must never
be able to inject code. Templates never hand-quote a value (`"{{ x }}"` is a bug); they use the
`py_literal`, `py_str_block`, `py_docstring`, `py_comment` and `py_name` filters, which call these functions.
"""

from __future__ import annotations

import keyword
import math
import re
import textwrap


def py_literal(value: object) -> str:
    """Return Python source that evaluates to `value`.

    Supports None, bool, int, float (including nan and inf), str, and lists, tuples and dicts of
    those. Strings go through `repr`, which always produces a valid, inert literal for any text:
    quotes, backslashes, newlines, triple quotes and any Unicode are escaped as needed.
    """
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else '-float("inf")'
        return repr(value)
    if isinstance(value, str):
        return _str_literal(value)
    if isinstance(value, tuple):
        items = ", ".join(py_literal(v) for v in value)
        return f"({items},)" if len(value) == 1 else f"({items})"
    if isinstance(value, list):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{py_literal(k)}: {py_literal(v)}" for k, v in value.items())
        return "{" + items + "}"
    raise TypeError(f"cannot write a {type(value).__name__} as a Python literal")


def _str_literal(text: str) -> str:
    # repr() escapes every character that could end the literal or start code. Prefer double
    # quotes (ruff's style) when the text has none, so generated files read naturally.
    literal = repr(text)
    if literal.startswith("'") and "'" not in text and '"' not in text:
        literal = '"' + literal[1:-1] + '"'
    return literal


def py_name(name: str) -> str:
    """Return `name` unchanged if it is a plain Python identifier (a constant, a type), else raise.

    Names come from rtc's own catalog, never from a card; this check keeps a catalog mistake from
    becoming code.
    """
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"not a Python identifier: {name!r}")
    return name


def py_docstring(text: str) -> str:
    """Return `text` made safe to place inside a triple-double-quoted docstring.

    Backslashes are doubled (so `\\N{...}` or a trailing backslash cannot break the literal), every
    double quote next to another or at the end is escaped (so no three can close the docstring), and
    control characters other than newline and tab are written as escapes.
    """
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            # A quote next to another quote, or last, could help close the docstring.
            near = text[i - 1 : i] == '"' or text[i + 1 : i + 2] in ('"', "")
            out.append('\\"' if near else '"')
        elif ch in "\n\t" or ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def py_str_block(text: str | None, used: int = 0, indent: int = 0, width: int = 110) -> str:
    """Like `py_literal`, laid out the way ruff formats an assignment of a long string.

    `used` columns precede the literal on its line. It stays there if it fits; else it goes in
    parentheses on a line of its own, split into pieces at spaces (kept at the end of each piece)
    when even that line is too long. Every piece is written with `py_literal`, so the safety of
    `py_literal` holds for each.
    """
    literal = py_literal(text)
    pad = " " * (indent + 4)
    if text is None or used + len(literal) <= width:
        return literal
    if len(pad) + len(literal) <= width:
        return "(\n" + pad + literal + "\n" + " " * indent + ")"
    pieces: list[str] = []
    current = ""
    budget = max(width - len(pad) - 10, 20)
    for word in re.findall(r"\S+\s*|\s+", text):
        while len(word) > budget:  # a very long word is cut where it must be
            if current:
                pieces.append(current)
                current = ""
            pieces.append(word[:budget])
            word = word[budget:]
        if current and len(py_literal(current + word)) > budget:
            pieces.append(current)
            current = ""
        current += word
    if current:
        pieces.append(current)
    return "(\n" + "".join(f"{pad}{py_literal(piece)}\n" for piece in pieces) + " " * indent + ")"


def py_literal_block(value: object, used: int, width: int = 110) -> str:
    """Like `py_literal`, but a list, tuple or dict too long for the rest of the line (`used` columns
    are taken before it) is written one item per line with a trailing comma, as ruff formats it."""
    literal = py_literal(value)
    if used + len(literal) <= width or not isinstance(value, list | tuple | dict) or not value:
        return literal
    if isinstance(value, dict):
        items = [f"{py_literal(k)}: {py_literal(v)}" for k, v in value.items()]
        opening, closing = "{", "}"
    else:
        items = [py_literal(v) for v in value]
        opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
    return opening + "\n" + "".join(f"    {item},\n" for item in items) + closing


def py_literal_nested(value: object, used: int, indent: int = 0, width: int = 110) -> str:
    """Like `py_literal_block`, at every depth: a list, tuple or dict that does not fit on its line is
    written one item per line (with a trailing comma), and so is each item that does not fit on its
    own line, as ruff formats nested literals. Every leaf is written with `py_literal`."""
    literal = py_literal(value)
    if used + len(literal) <= width or not isinstance(value, list | tuple | dict) or not value:
        return literal
    pad = " " * (indent + 4)
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            head = f"{py_literal(key)}: "
            items.append(head + py_literal_nested(item, len(pad) + len(head) + 1, indent + 4, width))
        opening, closing = "{", "}"
    else:
        items = [py_literal_nested(item, len(pad) + 1, indent + 4, width) for item in value]
        opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
    return opening + "\n" + "".join(f"{pad}{item},\n" for item in items) + " " * indent + closing


def wrap_text(text: str, width: int = 100, indent: int = 0, subsequent: int | None = None) -> str:
    """Wrap prose for a docstring; `indent` spaces before the first line, `subsequent` after."""
    first = " " * indent
    rest = " " * (indent if subsequent is None else subsequent)
    out = []
    for paragraph in text.split("\n"):
        out.append(
            textwrap.fill(
                paragraph,
                width=width,
                initial_indent=first,
                subsequent_indent=rest,
                break_long_words=False,
                break_on_hyphens=False,
            )
            or ""
        )
    return "\n".join(out)


def py_comment_block(text: str, indent: int = 0, width: int = 110) -> str:
    """Return `text` as `# ` comment lines of at most `width` columns, each safe (see `py_comment`)."""
    pad = " " * indent
    lines = textwrap.wrap(py_comment(text), width=width - indent - 2, break_long_words=False)
    return "\n".join(f"{pad}# {line}" for line in lines or [""])


def py_comment(text: str) -> str:
    """Return `text` as one line that is safe after a `#` (newlines folded to spaces)."""
    return " ".join(py_docstring(text).split())
