"""Math task verifier: extract the final answer of a completion and compare it with metadata.answer.

The answer is the content of the last ``\\boxed{...}`` (nested braces allowed) or, when nothing is boxed,
the last "answer: X" / "the answer is X" phrase. Both sides are normalised (LaTeX wrappers, thousands
separators, units, anything up to a final ``=``) and compared exactly as rationals with
``fractions.Fraction`` when both are numbers, otherwise as normalised strings. Standard library only:
this file is inlined into the generated training loop.
"""

import re
import unicodedata
from fractions import Fraction

# Thinking models write drafts before "</think>"; only the text after the last one is graded.
_MATH_THINK_END = "</think>"

# "\boxed{...}" or "\fbox{...}"; the brace group is matched by _math_match_braces, not by the regex.
_MATH_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*")

# "Answer: 42", "Final answer: 42", "**Answer:** 42", "**Final Answer**: 42", "The answer is: 42".
_MATH_ANSWER_PHRASE_RE = re.compile(
    r"\banswer\**(?:\s+is\b\s*[:：]?|\s*[:：=])\s*(?:\*\*|__)?", re.IGNORECASE
)

# The answer phrase runs to the end of its sentence: ".", ";", "!" or "?" before a space or the end.
_MATH_SENTENCE_END_RE = re.compile(r"[.;!?](?:\s|$)")

# LaTeX commands whose braced argument is plain text ("\text{ cm}" -> " cm").
_MATH_TEXT_COMMAND_RE = re.compile(
    r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|mbox|operatorname)\s*\{([^{}]*)\}"
)

# Spacing commands and sizing wrappers that never change a value.
_MATH_SPACING_RE = re.compile(r"\\[,;:! ]|\\(?:quad|qquad)\b|~")
_MATH_LEFT_RIGHT_RE = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])")

# Degrees: "90^\circ", "90^{\circ}", "90°", "90\degree".
_MATH_DEGREE_RE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree\b")

# An equals sign (not part of <=, >=, != or ==): the value is what follows the last one, so that
# "x = 5", "y_1 = 5" and "17 + 25 = 42" all answer with their right-hand side.
_MATH_EQUALS_RE = re.compile(r"(?<![<>!=])=(?!=)")

# Thousands separators, only in the strict 1,234,567 shape so that a pair such as "3,5" is left alone.
_MATH_THOUSANDS_RE = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,])")

# A number, optionally in parentheses or braces, optionally over another one: "-(1)/(2)", "{3}", ".5", "1e3".
_MATH_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_MATH_OPERAND = rf"(?:[+-]?{_MATH_NUMBER}|\([+-]?{_MATH_NUMBER}\)|\{{[+-]?{_MATH_NUMBER}\}})"
_MATH_RATIONAL_RE = re.compile(rf"([+-]?)({_MATH_OPERAND})(?:/({_MATH_OPERAND}))?")

# A number followed by unit words ("12 apples", "5 cm", "3 dollars"). Words that are values in their own
# right ("2 pi", "3 i") are not units.
_MATH_TRAILING_UNIT_RE = re.compile(r"(.*?\d)\s*([A-Za-z]+(?:\s+[A-Za-z]+){0,3})(?:\^\d)?")
_MATH_NOT_UNITS = frozenset({"pi", "i", "e", "j", "inf", "infty", "infinity", "sqrt"})

# Numbers longer than this, or exponents beyond this, are compared as strings: building a Fraction for
# "1e999999999" would take minutes and gigabytes.
_MATH_MAX_NUMBER_CHARS = 1000
_MATH_MAX_EXPONENT = 1000


def _math_match_braces(text: str) -> dict[int, int]:
    """Map the index of every "{" to the index of its matching "}" in one linear pass."""
    matches: dict[int, int] = {}
    open_at: list[int] = []
    for index, char in enumerate(text):
        if char == "{":
            open_at.append(index)
        elif char == "}" and open_at:
            matches[open_at.pop()] = index
    return matches


def _math_extract_boxed(text: str) -> str | None:
    """Content of the last complete \\boxed{...} (or "\\boxed 5"); None when nothing is boxed."""
    starts = [m.end() for m in _MATH_BOXED_RE.finditer(text)]
    if not starts:
        return None
    braces = _math_match_braces(text)
    for start in reversed(starts):
        if start < len(text) and text[start] == "{":
            end = braces.get(start)
            if end is not None:  # an unclosed box (truncated output) does not count
                return text[start + 1 : end]
        else:
            token = re.match(r"[^\s$]+", text[start:])
            if token:
                return token.group(0)
    return None


def _math_extract_answer_phrase(text: str) -> str | None:
    """The value after the last "answer:" / "answer is", up to the end of its sentence."""
    phrases = list(_MATH_ANSWER_PHRASE_RE.finditer(text))
    if not phrases:
        return None
    last = phrases[-1]
    tail = text[last.end() :].split("\n", 1)[0].strip()
    if tail.startswith("$"):  # "The answer is $\frac{1}{2}$." -> the math span only
        closing = tail.find("$", 1)
        if closing > 0:
            return tail[: closing + 1]
    end = _MATH_SENTENCE_END_RE.search(tail)
    if end:
        tail = tail[: end.start()]
    tail = tail.strip().strip("*_`").strip()
    return tail or None


def _math_replace_fracs(text: str) -> str:
    r"""Rewrite "\frac{a}{b}" and "\frac12" as "(a)/(b)", innermost arguments included."""
    for _ in range(50):  # each pass removes one \frac; the bound keeps pathological input cheap
        position = text.find("\\frac")
        if position < 0:
            return text
        cursor = position + len("\\frac")
        arguments = []
        for _argument in range(2):
            while cursor < len(text) and text[cursor] == " ":
                cursor += 1
            if cursor >= len(text):
                return text
            if text[cursor] == "{":
                end = _math_match_braces(text[cursor:]).get(0)
                if end is None:
                    return text
                arguments.append(text[cursor + 1 : cursor + end])
                cursor += end + 1
            else:  # "\frac12": single-character arguments
                arguments.append(text[cursor])
                cursor += 1
        text = f"{text[:position]}({arguments[0]})/({arguments[1]}){text[cursor:]}"
    return text


def _math_normalize(answer: str) -> str:
    """Strip notation that does not change the value; the result is compared or parsed as a number."""
    text = unicodedata.normalize("NFKC", answer)
    text = text.replace("\u2212", "-").replace("\u2013", "-").replace("\u2044", "/")
    text = text.replace("\\$", "").replace("$", "")
    text = re.sub(r"\\[()\[\]]", "", text)
    for _ in range(5):  # nested \text{\textbf{...}}
        text, count = _MATH_TEXT_COMMAND_RE.subn(r"\1", text)
        if not count:
            break
    text = re.sub(r"\\[dt]frac", r"\\frac", text)
    text = _MATH_LEFT_RIGHT_RE.sub("", text)
    text = _MATH_SPACING_RE.sub(" ", text)
    text = _MATH_DEGREE_RE.sub("", text)
    text = text.replace("\\%", "").replace("%", "")
    text = text.replace("{,}", ",")
    text = _math_replace_fracs(text)
    text = re.sub(r"\\sqrt\s*([0-9A-Za-z])", r"\\sqrt{\1}", text)
    text = re.sub(r"\s+", " ", text).strip()
    right_hand_sides = _MATH_EQUALS_RE.split(text)
    if len(right_hand_sides) > 1 and right_hand_sides[-1].strip():
        text = right_hand_sides[-1].strip()
    text = text.rstrip(".").strip()
    text = _MATH_THOUSANDS_RE.sub(lambda m: m.group(0).replace(",", ""), text)
    return text


def _math_operand_value(operand: str) -> Fraction | None:
    operand = operand.strip("(){}")
    exponent = re.search(r"[eE]([+-]?\d+)$", operand)
    if exponent and abs(int(exponent.group(1))) > _MATH_MAX_EXPONENT:
        return None
    try:
        return Fraction(operand)
    except (ValueError, ZeroDivisionError):  # also Python's limit on digits in int("...")
        return None


def _math_parse_number(text: str) -> Fraction | None:
    """The exact value of an integer, decimal, "a/b" or "12 units" string; None for anything else."""
    for candidate in (text, _math_strip_units(text)):
        if candidate is None:
            continue
        compact = candidate.replace(" ", "")
        if len(compact) > _MATH_MAX_NUMBER_CHARS:
            return None
        match = _MATH_RATIONAL_RE.fullmatch(compact)
        if not match:
            continue
        sign, numerator, denominator = match.groups()
        value = _math_operand_value(numerator)
        if value is None:
            return None
        if denominator is not None:
            divisor = _math_operand_value(denominator)
            if not divisor:  # None or zero: "1/0" is not a number
                return None
            value /= divisor
        return -value if sign == "-" else value
    return None


def _math_strip_units(text: str) -> str | None:
    match = _MATH_TRAILING_UNIT_RE.fullmatch(text)
    if not match or any(word.lower() in _MATH_NOT_UNITS for word in match.group(2).split()):
        return None
    return match.group(1)


def _math_answers_equal(predicted: str, reference: str) -> bool:
    predicted_norm, reference_norm = _math_normalize(predicted), _math_normalize(reference)
    predicted_value = _math_parse_number(predicted_norm)
    reference_value = _math_parse_number(reference_norm)
    if predicted_value is not None and reference_value is not None:
        return predicted_value == reference_value

    def canonical(text: str) -> str:
        return text.replace(" ", "").replace("{", "").replace("}", "").lower()

    return bool(reference_norm) and canonical(predicted_norm) == canonical(reference_norm)


def _math_reference(metadata: object) -> str | None:
    """metadata["answer"] as text; None when it is missing or not a string/number."""
    if not isinstance(metadata, dict):
        return None
    answer = metadata.get("answer")
    if isinstance(answer, bool):  # True is an int in Python, but never a math answer
        return None
    if isinstance(answer, int | float | Fraction):
        return repr(answer) if isinstance(answer, float) else str(answer)
    if isinstance(answer, str) and answer.strip():
        return answer
    return None


def metadata_problem(metadata: dict) -> str | None:
    """Why a row's metadata cannot be graded (checked on every row before training), or None."""
    if _math_reference(metadata) is None:
        return 'needs "answer": a number or a non-empty string'
    return None


def verify(completion: str, metadata: dict) -> dict[str, float]:
    """Score a math completion against metadata["answer"] (a string or a number).

    Returns reward (1.0 when the extracted final answer equals the reference, else 0.0), correct (the
    same), format (1.0 when a final answer could be extracted) and metadata_ok (0.0 when the row has no
    usable answer, which scores 0). Never raises.
    """
    text = completion if isinstance(completion, str) else ""
    if _MATH_THINK_END in text:
        text = text.rsplit(_MATH_THINK_END, 1)[1]
    predicted = _math_extract_boxed(text)
    if predicted is None:
        predicted = _math_extract_answer_phrase(text)
    reference = _math_reference(metadata)
    correct = predicted is not None and reference is not None and _math_answers_equal(predicted, reference)
    return {
        "reward": 1.0 if correct else 0.0,
        "correct": 1.0 if correct else 0.0,
        "format": 0.0 if predicted is None else 1.0,
        "metadata_ok": 0.0 if reference is None else 1.0,
    }
