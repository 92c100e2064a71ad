"""Property tests: the text-only verifiers never raise, and equal values in other notations still match."""

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

ANY_METADATA = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["answer", "pattern", "schema", "expected", "case_sensitive"]),
        st.one_of(
            st.none(), st.booleans(), st.integers(), st.text(max_size=20), st.lists(st.text(max_size=5))
        ),
    ),
)
SETTINGS = settings(max_examples=150, deadline=None)


@SETTINGS
@given(completion=st.text(max_size=300), metadata=ANY_METADATA)
def test_text_verifiers_never_raise(math_verify, json_verify, match_verify, completion, metadata):
    for verify in (math_verify, json_verify, match_verify):
        scores = verify(completion, metadata)
        assert all(isinstance(value, float) for value in scores.values())
        assert 0.0 <= scores["reward"] <= 1.0
        assert scores["correct"] in (0.0, 1.0)


@SETTINGS
@given(value=st.integers(min_value=-(10**30), max_value=10**30))
def test_integers_match_in_several_notations(math_verify, value):
    reference = {"answer": str(value)}
    assert math_verify(f"\\boxed{{{value}}}", reference)["correct"] == 1.0
    assert math_verify(f"Answer: {value:,}", reference)["correct"] == 1.0
    assert math_verify(f"\\boxed{{{value}.0}}", reference)["correct"] == 1.0
    assert math_verify(f"\\boxed{{{value + 1}}}", reference)["correct"] == 0.0


@SETTINGS
@given(numerator=st.integers(-999, 999), denominator=st.integers(1, 999))
def test_fractions_match_their_latex_and_slash_forms(math_verify, numerator, denominator):
    value = Fraction(numerator, denominator)
    reference = {"answer": f"{value.numerator}/{value.denominator}"}
    assert math_verify(f"\\boxed{{\\frac{{{numerator}}}{{{denominator}}}}}", reference)["correct"] == 1.0
    assert math_verify(f"The answer is {numerator}/{denominator}.", reference)["correct"] == 1.0


@SETTINGS
@given(word=st.text(alphabet=st.characters(categories=["L"]), min_size=1, max_size=12))
def test_match_accepts_its_own_answer_in_any_case(match_verify, word):
    assert match_verify(word.upper(), {"answer": word})["correct"] == (
        1.0 if word.upper().casefold() == word.casefold() else 0.0
    )
    assert match_verify(f"  {word}  \n", {"answer": word, "case_sensitive": True})["correct"] == 1.0
