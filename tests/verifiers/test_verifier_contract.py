"""The layout the inliner relies on, checked on every file in templates/verifiers/.

A verifier is a module docstring, top-level imports of the standard library only, private constants and
helpers whose names carry the verifier's prefix (so they cannot collide with the loop's own names), and
two public functions: verify(completion: str, metadata: dict) -> dict[str, float], and
metadata_problem(metadata: dict) -> str | None, which the loop asks about every row before training.
"""

import ast
import sys
from pathlib import Path

import pytest

VERIFIERS_DIR = Path(__file__).resolve().parents[2] / "templates" / "verifiers"

# verifier file -> prefix of its private names
PREFIXES = {
    "math": "_MATH_|_math_",
    "code": "_CODE_|_code_",
    "json_fields": "_JSON_|_json_",
    "match": "_MATCH_|_match_",
}


def test_every_verifier_file_is_covered():
    assert {path.stem for path in VERIFIERS_DIR.glob("*.py")} == set(PREFIXES)


def defined_names(node):
    if isinstance(node, ast.Assign):
        return [target.id for target in node.targets if isinstance(target, ast.Name)]
    if isinstance(node, ast.AnnAssign | ast.FunctionDef):
        return [node.target.id if isinstance(node, ast.AnnAssign) else node.name]
    return []


@pytest.mark.parametrize("name", sorted(PREFIXES))
def test_layout(name):
    tree = ast.parse((VERIFIERS_DIR / f"{name}.py").read_text(encoding="utf-8"))
    assert ast.get_docstring(tree), "module docstring first"
    body = tree.body[1:]
    imports = [node for node in body if isinstance(node, ast.Import | ast.ImportFrom)]
    for node in imports:
        modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module]
        assert all(module.split(".")[0] in sys.stdlib_module_names for module in modules), modules
    first_other = next(
        index for index, node in enumerate(body) if not isinstance(node, ast.Import | ast.ImportFrom)
    )
    assert all(not isinstance(node, ast.Import | ast.ImportFrom) for node in body[first_other:]), (
        "imports on top"
    )
    public = []
    for node in body[first_other:]:
        assert isinstance(node, ast.Assign | ast.AnnAssign | ast.FunctionDef), ast.dump(node)[:80]
        for defined in defined_names(node):
            if defined in ("verify", "metadata_problem"):
                public.append(node)
            else:
                assert defined.startswith(tuple(PREFIXES[name].split("|"))), defined
    assert [node.name for node in public] == ["metadata_problem", "verify"]
    check, verify = public
    assert [arg.arg for arg in check.args.args] == ["metadata"]
    assert ast.unparse(check.returns) == "str | None" and ast.get_docstring(check)
    assert [arg.arg for arg in verify.args.args] == ["completion", "metadata"]
    assert [ast.unparse(arg.annotation) for arg in verify.args.args] == ["str", "dict"]
    assert ast.unparse(verify.returns) == "dict[str, float]"
    assert ast.get_docstring(verify)
    for node in ast.walk(tree):
        assert not isinstance(node, ast.Global | ast.Nonlocal)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id != "print"


@pytest.mark.parametrize("name", sorted(PREFIXES))
@pytest.mark.parametrize("metadata", [{}, None])
def test_scores_are_floats_with_reward_and_correct(verifier_module, name, metadata):
    scores = verifier_module(name).verify("", metadata)
    assert {"reward", "correct"} <= set(scores)
    assert all(isinstance(value, float) for value in scores.values())
    assert scores["reward"] == 0.0


# metadata a verifier cannot grade: each is named before training by metadata_problem, and verify
# agrees (metadata_ok 0); usable metadata passes both.
BAD_METADATA = {
    "math": [{}, {"answer": ""}, {"answer": True}, {"answer": [1]}],
    "match": [{}, {"answer": ""}, {"pattern": "("}, {"pattern": 3}],
    "json_fields": [{}, {"schema": "object"}, {"expected": []}],
    "code": [{}, {"tests": []}, {"tests": "assert f(1) =="}, {"tests": ["assert f(1)"], "timeout_s": 0}],
}
GOOD_METADATA = {
    "math": {"answer": "42"},
    "match": {"answer": ["Paris", "paris"], "pattern": "Paris.*"},
    "json_fields": {"expected": {"name": "Kenji"}},
    "code": {"tests": ["assert f(1) == 2"], "entry_point": "f", "timeout_s": 5},
}


@pytest.mark.parametrize(
    ("name", "metadata"), [(name, m) for name, cases in BAD_METADATA.items() for m in cases]
)
def test_metadata_problem_names_what_verify_cannot_grade(verifier_module, name, metadata):
    module = verifier_module(name)
    problem = module.metadata_problem(metadata)
    assert isinstance(problem, str) and problem
    if name != "code" or "timeout_s" not in metadata:  # a bad timeout falls back to the default
        assert module.verify("x", metadata)["metadata_ok"] == 0.0


@pytest.mark.parametrize("name", sorted(GOOD_METADATA))
def test_metadata_problem_passes_usable_metadata(verifier_module, name):
    assert verifier_module(name).metadata_problem(GOOD_METADATA[name]) is None
