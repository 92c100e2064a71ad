"""Short-answer verifier: the completion's final line must equal metadata.answer or match metadata.pattern.

The final line is the last non-empty line of the completion (after any "</think>"), cleaned of markdown
emphasis, surrounding quotes, a leading "Answer:" label and trailing sentence punctuation. Then

- answer (a string, a number, or a list of acceptable strings): equal after collapsing whitespace and,
  unless metadata.case_sensitive is true, case folding;
- pattern (a regular expression): must fullmatch the cleaned final line (re.IGNORECASE unless
  case_sensitive). Fullmatch, not search, so that a pattern such as "Paris" does not reward
  "Not Paris"; write ".*Paris.*" to accept it anywhere in the line.

When both are given, either one makes the completion correct (a pattern usually lists the accepted
variants of the answer). Standard library only: this file is inlined into the generated training loop.
"""

import re

_MATCH_THINK_END = "</think>"
_MATCH_MAX_LINE_CHARS = 1000  # the final line is cut to this before a (dataset-supplied) regex sees it
_MATCH_LABEL_RE = re.compile(r"^(?:final\s+)?answer\s*[:：]\s*", re.IGNORECASE)
_MATCH_WRAPPERS = "*_`\"'“”‘’ \t"


def _match_final_line(completion: str) -> str:
    """The last non-empty line, without markdown emphasis, quotes, an "Answer:" label or a final period."""
    if _MATCH_THINK_END in completion:
        completion = completion.rsplit(_MATCH_THINK_END, 1)[1]
    lines = [line.strip() for line in completion.splitlines() if line.strip()]
    line = lines[-1][:_MATCH_MAX_LINE_CHARS] if lines else ""
    line = line.strip(_MATCH_WRAPPERS)
    line = _MATCH_LABEL_RE.sub("", line).strip(_MATCH_WRAPPERS)
    return line.rstrip(".!。").strip(_MATCH_WRAPPERS)


def _match_normalize(text: str, case_sensitive: bool) -> str:
    """Collapse whitespace, drop wrappers and a final period (from both sides: "D.C." == "D.C")."""
    text = " ".join(text.split()).strip(_MATCH_WRAPPERS).rstrip(".!。").strip(_MATCH_WRAPPERS)
    return text if case_sensitive else text.casefold()


def _match_answers(metadata: dict) -> list[str]:
    answer = metadata.get("answer")
    if isinstance(answer, bool):
        return []
    if isinstance(answer, int | float):
        return [str(answer)]
    if isinstance(answer, str):
        return [answer] if answer.strip() else []
    if isinstance(answer, list):
        return [item for item in answer if isinstance(item, str) and item.strip()]
    return []


def metadata_problem(metadata: dict) -> str | None:
    """Why a row's metadata cannot be graded (checked on every row before training), or None."""
    if not isinstance(metadata, dict):
        return "must be an object"
    pattern = metadata.get("pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern:
            return '"pattern" must be a non-empty string (a regular expression)'
        try:
            re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as exc:
            return f'"pattern" is not a regular expression: {exc}'
    if not _match_answers(metadata) and pattern is None:
        return 'needs "answer" (a string, a number or a list of strings) or "pattern" (a regular expression)'
    return None


def verify(completion: str, metadata: dict) -> dict[str, float]:
    """Score a short answer against metadata["answer"] and/or metadata["pattern"].

    Returns reward and correct (1.0 when the answer or the pattern matches, else 0.0), answer_match and
    pattern_match (which one did), and metadata_ok (0.0 when there is neither a usable answer nor a
    valid pattern, which scores 0). Never raises.
    """
    scores = {"reward": 0.0, "correct": 0.0, "answer_match": 0.0, "pattern_match": 0.0, "metadata_ok": 0.0}
    if not isinstance(metadata, dict):
        return scores
    case_sensitive = metadata.get("case_sensitive") is True
    answers = _match_answers(metadata)
    pattern = None
    if isinstance(metadata.get("pattern"), str) and metadata["pattern"]:
        try:
            pattern = re.compile(metadata["pattern"], 0 if case_sensitive else re.IGNORECASE)
        except (re.error, RecursionError, OverflowError):
            pattern = None
    if not answers and pattern is None:
        return scores
    scores["metadata_ok"] = 1.0
    line = _match_final_line(completion if isinstance(completion, str) else "")
    normalized = _match_normalize(line, case_sensitive)
    if line and any(normalized == _match_normalize(answer, case_sensitive) for answer in answers):
        scores["answer_match"] = 1.0
    if pattern is not None and pattern.fullmatch(line):
        scores["pattern_match"] = 1.0
    if scores["answer_match"] or scores["pattern_match"]:
        scores["reward"] = scores["correct"] = 1.0
    return scores
