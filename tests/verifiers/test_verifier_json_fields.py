"""The structured-output verifier (templates/verifiers/json_fields.py)."""

import pytest

PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "city": {"type": "string"},
        "role": {"type": "string", "enum": ["engineer", "teacher", "doctor"]},
    },
    "required": ["name", "age", "city"],
}
PERSON_EXPECTED = {"name": "Ada", "age": 36, "city": "London"}
PERSON = {"schema": PERSON_SCHEMA, "expected": PERSON_EXPECTED}
# 1 parsed + 1 schema + 3 required-field checks + 3 expected-field checks
PERSON_CHECKS = 8


def test_valid_json_scores_one(json_verify):
    scores = json_verify('{"name": "Ada", "age": 36, "city": "London"}', PERSON)
    assert scores == {
        "reward": 1.0,
        "correct": 1.0,
        "parsed": 1.0,
        "fields_matched": 3.0,
        "fields_total": 3.0,
        "metadata_ok": 1.0,
    }


@pytest.mark.parametrize(
    "completion",
    [
        '```json\n{"name": "Ada", "age": 36, "city": "London"}\n```',
        'Sure! Here it is:\n```\n{"name": "Ada", "age": 36, "city": "London"}\n```\nAnything else?',
        'The record is {"name": "Ada", "age": 36, "city": "London"} as requested.',
        '<think>{"name": "Bob"}</think>{"name": "Ada", "age": 36.0, "city": "London", "role": "engineer"}',
        '```json\n{"name": "Bob"\n```\n```json\n{"name": "Ada", "age": 36, "city": "London"}\n```',
    ],
    ids=["fenced-json", "fenced-plain", "object-in-prose", "after-think", "last-valid-fence"],
)
def test_embedded_json_is_found(json_verify, completion):
    assert json_verify(completion, PERSON)["correct"] == 1.0


@pytest.mark.parametrize(
    "completion",
    ["", "not json at all", '{"name": "Ada", "age": 36', "{'name': 'Ada'}", '{"age": NaN}', "[" * 100_000],
    ids=["empty", "prose", "truncated", "python-dict", "nan", "deep-nesting"],
)
def test_invalid_json_scores_zero(json_verify, completion):
    scores = json_verify(completion, PERSON)
    assert scores["reward"] == 0.0
    assert scores["parsed"] == 0.0
    assert scores["fields_matched"] == 0.0
    assert scores["fields_total"] == 3.0


def test_partial_output_gets_partial_credit(json_verify):
    scores = json_verify('{"name": "Ada", "city": "Paris"}', PERSON)
    # parsed, name present, name equal, city present: 4 of 8 (schema fails: age is required)
    assert scores["reward"] == pytest.approx(4 / PERSON_CHECKS)
    assert (scores["fields_matched"], scores["fields_total"], scores["correct"]) == (1.0, 3.0, 0.0)


def test_wrong_types_fail_their_checks(json_verify):
    scores = json_verify('{"name": "Ada", "age": "36", "city": "London"}', PERSON)
    # schema, age valid and age equal fail
    assert scores["reward"] == pytest.approx(5 / PERSON_CHECKS)
    assert scores["fields_matched"] == 2.0


def test_boolean_is_not_a_number_and_float_integer_is_an_integer(json_verify):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert json_verify('{"n": true}', {"schema": schema})["correct"] == 0.0
    assert json_verify('{"n": 3.0}', {"schema": schema})["correct"] == 1.0
    assert json_verify('{"n": 3.5}', {"schema": schema})["correct"] == 0.0
    assert json_verify('{"n": 1}', {"expected": {"n": True}})["correct"] == 0.0


def test_enum(json_verify):
    base = '{"name": "Ada", "age": 36, "city": "London", "role": "%s"}'
    assert json_verify(base % "engineer", PERSON)["correct"] == 1.0
    wrong = json_verify(base % "pilot", PERSON)  # an optional field outside its enum fails the schema check
    assert wrong["reward"] == pytest.approx(7 / PERSON_CHECKS)
    assert wrong["fields_matched"] == 3.0


def test_nested_objects_and_arrays(json_verify):
    schema = {
        "type": "object",
        "properties": {
            "order": {
                "type": "object",
                "properties": {
                    "id": {"type": "integer"},
                    "items": {"type": "array", "items": {"type": "object", "required": ["sku", "qty"]}},
                },
                "required": ["id", "items"],
            },
            "status": {"type": "string", "enum": ["open", "closed"]},
        },
        "required": ["order", "status"],
    }
    good = '{"order": {"id": 7, "items": [{"sku": "A1", "qty": 2}]}, "status": "open"}'
    assert json_verify(good, {"schema": schema})["correct"] == 1.0
    bad_item = '{"order": {"id": 7, "items": [{"sku": "A1"}]}, "status": "open"}'
    scores = json_verify(bad_item, {"schema": schema})
    assert scores["reward"] == pytest.approx(2 / 4)  # parsed and status pass; schema and order fail
    assert (scores["fields_matched"], scores["fields_total"]) == (1.0, 2.0)
    expected = {"order": {"id": 7, "items": [{"sku": "A1", "qty": 2}]}}
    assert json_verify(good, {"expected": expected})["correct"] == 1.0
    assert json_verify(bad_item, {"expected": expected})["correct"] == 0.0


def test_expected_only_and_schema_only(json_verify):
    assert json_verify('{"a": 1, "b": "x"}', {"expected": {"a": 1.0, "b": "x"}})["reward"] == 1.0
    assert json_verify('{"a": 1, "b": "y"}', {"expected": {"a": 1, "b": "x"}})["reward"] == pytest.approx(
        2 / 3
    )
    assert (
        json_verify("[1, 2, 3]", {"schema": {"type": "array", "items": {"type": "integer"}}})["correct"]
        == 1.0
    )
    assert (
        json_verify('[1, "2"]', {"schema": {"type": "array", "items": {"type": "integer"}}})["reward"] == 0.5
    )


def test_top_level_array_where_object_expected(json_verify):
    scores = json_verify('[{"name": "Ada"}]', PERSON)
    assert scores["reward"] == pytest.approx(1 / PERSON_CHECKS)


@pytest.mark.parametrize("metadata", [{}, None, {"schema": "object"}, {"expected": ["a"]}, "x"])
def test_missing_schema_and_expected_scores_zero(json_verify, metadata):
    scores = json_verify('{"a": 1}', metadata)
    assert scores["reward"] == 0.0
    assert scores["metadata_ok"] == 0.0


@pytest.mark.parametrize("completion", [None, 5, "{" * 10_000, '{"a": ' * 5000, "```json\n" * 1000])
def test_never_raises(json_verify, completion):
    scores = json_verify(completion, PERSON)
    assert all(isinstance(value, float) for value in scores.values())
    assert 0.0 <= scores["reward"] <= 1.0
