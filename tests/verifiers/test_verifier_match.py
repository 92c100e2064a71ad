"""The short-answer verifier (templates/verifiers/match.py)."""

import pytest


@pytest.mark.parametrize(
    ("completion", "metadata", "expected"),
    [
        # exact, after whitespace and case normalisation
        ("Paris", {"answer": "Paris"}, True),
        ("paris", {"answer": "Paris"}, True),
        ("  PARIS  \n", {"answer": "Paris"}, True),
        ("Paris.", {"answer": "Paris"}, True),
        ("**Paris**", {"answer": "Paris"}, True),
        ('"Paris"', {"answer": "Paris"}, True),
        ("Answer: Paris", {"answer": "Paris"}, True),
        ("Let me think.\nThe capital is in the north.\n\nParis\n", {"answer": "Paris"}, True),
        ("New   York", {"answer": "new york"}, True),
        ("Washington, D.C.", {"answer": "Washington, D.C."}, True),
        ("London", {"answer": "Paris"}, False),
        ("Paris is the capital", {"answer": "Paris"}, False),
        ("Paris\nor maybe Lyon", {"answer": "Paris"}, False),
        ("<think>Lyon?</think>Paris", {"answer": "Paris"}, True),
        ("42", {"answer": 42}, True),
        ("Lisbon", {"answer": ["Lisboa", "Lisbon"]}, True),
        # case sensitivity
        ("paris", {"answer": "Paris", "case_sensitive": True}, False),
        ("Paris", {"answer": "Paris", "case_sensitive": True}, True),
        ("paris", {"answer": "Paris", "case_sensitive": "yes"}, True),  # only a real true turns it on
        # regex: fullmatch of the cleaned final line
        ("blue", {"pattern": r"blue|azure"}, True),
        ("Azure.", {"pattern": r"blue|azure"}, True),
        ("light blue", {"pattern": r"blue|azure"}, False),
        ("light blue", {"pattern": r".*\bblue\b.*"}, True),
        ("Azure", {"pattern": r"blue|azure", "case_sensitive": True}, False),
        ("1969", {"pattern": r"\d{4}"}, True),
        ("in 1969", {"pattern": r"\d{4}"}, False),
        # answer or pattern
        ("Washington DC", {"answer": "Washington, D.C.", "pattern": r"washington,? d\.?c\.?"}, True),
        ("Washington, D.C.", {"answer": "Washington, D.C.", "pattern": r"nothing"}, True),
        # nothing to compare
        ("", {"answer": "Paris"}, False),
        ("   \n\n", {"answer": "Paris"}, False),
    ],
)
def test_match_table(match_verify, completion, metadata, expected):
    scores = match_verify(completion, metadata)
    assert scores["correct"] == (1.0 if expected else 0.0)
    assert scores["reward"] == scores["correct"]
    assert scores["metadata_ok"] == 1.0


def test_subscores_say_which_rule_matched(match_verify):
    scores = match_verify(
        "Washington DC", {"answer": "Washington, D.C.", "pattern": r"washington,? d\.?c\.?"}
    )
    assert (scores["answer_match"], scores["pattern_match"]) == (0.0, 1.0)


@pytest.mark.parametrize(
    "metadata",
    [{}, {"answer": ""}, {"answer": None}, {"answer": True}, {"pattern": "("}, {"answer": []}, None, "Paris"],
)
def test_missing_answer_scores_zero(match_verify, metadata):
    scores = match_verify("Paris", metadata)
    assert scores["reward"] == 0.0
    assert scores["metadata_ok"] == 0.0


def test_invalid_pattern_falls_back_to_answer(match_verify):
    assert match_verify("Paris", {"answer": "Paris", "pattern": "("})["correct"] == 1.0


@pytest.mark.parametrize("completion", [None, 3, "x" * 1_000_000, "\x00"])
def test_never_raises(match_verify, completion):
    scores = match_verify(completion, {"answer": "Paris", "pattern": "(a+)+$"})
    assert scores["reward"] == 0.0
