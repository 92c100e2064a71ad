"""The math verifier: answer extraction and normalised comparison (templates/verifiers/math.py)."""

import pytest

# (completion, reference answer, expected correct)
CASES = [
    # integers, boxed and answer lines
    (r"17 + 25 = 42, so \boxed{42}", "42", True),
    (r"\boxed{41}", "42", False),
    ("Answer: 42", "42", True),
    ("answer: 42", 42, True),
    ("ANSWER:43", "42", False),
    ("Final answer: 7.", "7", True),
    ("**Answer:** 12", "12", True),
    ("The answer is 9.", "9", True),
    ("The answer is: 9", "9", True),
    ("**Final Answer**: 10", "10", True),
    ("The answer is $\\frac{3}{4}$. I hope it is correct.", "0.75", True),
    ("So the answer is 144 apples.", "144", True),
    # decimals and fractions
    (r"\boxed{0.50}", "1/2", True),
    (r"\boxed{.5}", "0.5", True),
    (r"\boxed{\frac{1}{2}}", "0.5", True),
    (r"\boxed{\dfrac{3}{4}}", "3/4", True),
    (r"\boxed{\tfrac12}", ".5", True),
    (r"\boxed{\frac{2}{3}}", "0.66", False),
    (r"\boxed{-\frac{1}{2}}", "-0.5", True),
    (r"\boxed{\frac{-1}{2}}", "-1/2", True),
    (r"\boxed{\frac{1}{2}}", "1/3", False),
    (r"\boxed{2.000}", "2", True),
    # LaTeX wrappers and decorations
    (r"$\boxed{5}$", "5", True),
    (r"\boxed{\text{5 cm}}", "5", True),
    (r"\boxed{90^\circ}", "90", True),
    (r"\boxed{90^{\circ}}", "90°", True),
    (r"\boxed{\left( 1, 2 \right)}", "(1,2)", True),
    (r"\boxed{\$12}", "12", True),
    (r"\boxed{50\%}", "50", True),
    (r"\boxed{x = 3}", "3", True),
    (r"\boxed{y_1 = -4}", "-4", True),
    (r"\boxed{17 + 25 = 42}", "42", True),
    ("Answer: 6 \\times 7 = 41", "42", False),
    ("Answer: x >= 3", "x <= 3", False),
    ("Answer: x <= 3", "x<=3", True),
    (r"\boxed{2\sqrt{2}}", r"2\sqrt2", True),
    (r"\boxed{2\pi}", "2", False),
    # separators, units, periods
    (r"\boxed{1,000}", "1000", True),
    ("Answer: 1,234,567", "1234567", True),
    ("Answer: 3,5", "35", False),
    (r"\boxed{12 \text{ apples}}", "12", True),
    ("Answer: 8 dollars.", "8", True),
    # nested braces, several boxes, unclosed box
    (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt{3}}{2}", True),
    (r"first \boxed{3}, corrected: \boxed{4}", "4", True),
    (r"first \boxed{3}, corrected: \boxed{4}", "3", False),
    (r"\boxed{7} then \boxed{8", "7", True),
    (r"\boxed{6} and later Answer: 9", "6", True),
    ("<think>maybe \\boxed{1}</think> the answer is 2", "2", True),
    # no answer, empty, malformed
    ("I think it is 42", "42", False),
    ("", "42", False),
    (r"\boxed{}", "0", False),
    # huge numbers, unicode minus, other forms
    (r"\boxed{" + str(2**200) + "}", str(2**200), True),
    (r"\boxed{" + str(2**200 + 1) + "}", str(2**200), False),
    (r"\boxed{1e999999999}", "1", False),
    (r"\boxed{" + "9" * 5000 + "}", "9" * 5000, True),
    (r"\boxed{−7}", "-7", True),
    ("Answer: \u22127", "-7", True),  # U+2212 MINUS SIGN, then 7
    ("Answer: \u22127", "7", False),
    (r"\boxed{½}", "0.5", True),
    (r"\boxed{１２}", "12", True),
    (r"\boxed{1/0}", "1/0", True),
    (r"\boxed{0.1}", 0.1, True),
    (r"\boxed{B}", "b", True),
]


@pytest.mark.parametrize(("completion", "answer", "expected"), CASES)
def test_math_table(math_verify, completion, answer, expected):
    scores = math_verify(completion, {"answer": answer})
    assert scores["correct"] == (1.0 if expected else 0.0)
    assert scores["reward"] == scores["correct"]


def test_at_least_thirty_cases():
    assert len(CASES) >= 30


@pytest.mark.parametrize(
    ("completion", "expected_format"),
    [(r"\boxed{3}", 1.0), ("Answer: 3", 1.0), ("three, I guess", 0.0), ("", 0.0), (r"\boxed{3", 0.0)],
)
def test_format_subscore(math_verify, completion, expected_format):
    assert math_verify(completion, {"answer": "3"})["format"] == expected_format


@pytest.mark.parametrize("metadata", [{}, {"answer": None}, {"answer": ""}, {"answer": True}, None, "42", []])
def test_missing_or_malformed_answer_scores_zero(math_verify, metadata):
    scores = math_verify(r"\boxed{42}", metadata)
    assert scores == {"reward": 0.0, "correct": 0.0, "format": 1.0, "metadata_ok": 0.0}


@pytest.mark.parametrize(
    "completion", [None, 42, b"\\boxed{1}", "\\boxed{" * 20000, "{" * 50000 + "}", "\x00" * 10]
)
def test_never_raises_and_returns_floats(math_verify, completion):
    scores = math_verify(completion, {"answer": "1"})
    assert set(scores) == {"reward", "correct", "format", "metadata_ok"}
    assert all(isinstance(value, float) for value in scores.values())
    assert 0.0 <= scores["reward"] <= 1.0
