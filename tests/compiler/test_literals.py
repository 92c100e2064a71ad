"""User text reaches generated code only as inert literals: it parses and round-trips unchanged."""

from __future__ import annotations

import ast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtc.build import compile_card
from rtc.literals import py_docstring, py_literal, py_str_block

# Any text at all but lone surrogates (which no YAML or UTF-8 file can hold).
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=300).filter(
    str.strip
)


@given(st.one_of(TEXT, st.text(max_size=200)))
def test_py_literal_round_trips(text):
    assert ast.literal_eval(py_literal(text)) == text


@given(st.text(max_size=400), st.integers(min_value=0, max_value=12))
def test_py_str_block_round_trips(text, indent):
    source = "x = " + py_str_block(text, indent=indent)
    tree = ast.parse(source)
    assert ast.literal_eval(tree.body[0].value) == text


@given(st.text(max_size=300))
def test_py_docstring_round_trips(text):
    source = f'"""{py_docstring(text)}\nend"""'
    assert ast.literal_eval(source) == text + "\nend"


def _yaml_quote(text: str) -> str:
    """A double-quoted YAML scalar for any text (YAML escapes for what it cannot hold raw)."""
    out = []
    for ch in text:
        code = ord(ch)
        printable = (
            code in (0x09, 0x0A)
            or 0x20 <= code <= 0x7E
            or (0xA0 <= code <= 0xD7FF and code not in (0x2028, 0x2029))
            or (0xE000 <= code <= 0xFFFD or code >= 0x10000)
        )
        if ch in '"\\' or ch in "\t\n" or not printable:
            out.append(f"\\U{code:08x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(title=TEXT, description=TEXT, system_prompt=TEXT)
def test_any_text_in_every_string_field_compiles_and_is_carried_unchanged(
    tmp_path, title, description, system_prompt
):
    card = tmp_path / "card.yaml"
    card.write_text(
        "name: prop\n"
        f"title: {_yaml_quote(title)}\n"
        f"description: {_yaml_quote(description)}\n"
        f"system_prompt: {_yaml_quote(system_prompt)}\n"
        "signal: demonstrations\nmethod: sft\ntask: chat\nmodel: Qwen/Qwen3-8B\n",
        encoding="utf-8",
    )
    _, source = compile_card(card)
    tree = ast.parse(source)
    docstring = ast.get_docstring(tree, clean=False)
    assert docstring.startswith(title + "\n")
    assert " ".join(description.split()) in " ".join(docstring.split())
    constants = {
        node.targets[0].id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }
    assert ast.literal_eval(constants["SYSTEM_PROMPT"]) == system_prompt


def test_injection_attempts_stay_text(tmp_path):
    attack = '"""; import os; os.system("echo pwned"); """'
    card = tmp_path / "card.yaml"
    card.write_text(
        f"name: inject\ntitle: {_yaml_quote(attack)}\nsystem_prompt: {_yaml_quote(attack + chr(92))}\n"
        "signal: demonstrations\nmethod: sft\ntask: chat\nmodel: Qwen/Qwen3-8B\n",
        encoding="utf-8",
    )
    _, source = compile_card(card)
    tree = ast.parse(source)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "system"]
    assert calls == []  # os.system never became code
    assert ast.get_docstring(tree, clean=False).startswith(attack)
