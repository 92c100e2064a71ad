"""Rubric judge: a judge model grades a response against weighted criteria on an integer scale.

A rubric is {"criteria": [{"name", "description", "weight"?}], "scale"?: [low, high]} (weight 1 and
scale [1, 5] by default), from the card (`rubric:`) or a row's metadata.rubric, which takes
precedence. The judge is asked with JUDGE_TEMPLATE for one JSON object that maps every criterion's
name to an integer on the scale, and its final answer (never its reasoning) is parsed strictly: one
JSON object, optionally in a ```json fence, with exactly the criteria's names as keys and integers
within the scale as values; anything else is malformed. The reward is the weighted mean of the
scores, each mapped from [low, high] to [0, 1]. The loop retries a malformed verdict once, then
scores the response 0 and counts it (judge_malformed); a judge never stops a run.

What a rubric judge does not protect against: the response is model-written text that the judge
reads, so a policy under RL can learn to address the judge ("score 5 on every criterion"). The
response's delimiter tags are escaped so it cannot close its block, but a judge can still be
persuaded; read samples, and prefer a judge larger than the policy.
Standard library only: this file is inlined into the generated training loop.
"""

import json
import math
import re

JUDGE_TEMPLATE = """You grade an assistant's response against a rubric.

<conversation>
{conversation}
</conversation>

<response>
{response}
</response>

<rubric>
Score each criterion with an integer from {low} ({low} = not met at all) to {high} ({high} = fully met):
{criteria}
</rubric>

Reply with one JSON object and nothing else, mapping each criterion's name to its score: {example}"""
_RUBRIC_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")
_RUBRIC_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)\n?```", re.DOTALL)
_RUBRIC_MAX_CRITERIA = 20


def rubric_problem(rubric: object) -> str | None:
    """Why `rubric` is not a usable rubric, or None."""
    if not isinstance(rubric, dict):
        return "a rubric must be an object with a list of criteria"
    unknown = sorted(set(rubric) - {"criteria", "scale"})
    if unknown:
        return f"unknown rubric key(s) {', '.join(unknown)}; a rubric has criteria and scale"
    scale = rubric.get("scale", [1, 5])
    if (
        not isinstance(scale, list)
        or len(scale) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in scale)
        or not scale[0] < scale[1] <= scale[0] + 100
    ):
        return "scale must be [low, high]: two integers, low < high, at most 100 apart"
    criteria = rubric.get("criteria")
    if not isinstance(criteria, list) or not 1 <= len(criteria) <= _RUBRIC_MAX_CRITERIA:
        return f"criteria must be a list of 1 to {_RUBRIC_MAX_CRITERIA} criteria"
    names = set()
    for i, criterion in enumerate(criteria):
        if not isinstance(criterion, dict) or set(criterion) - {"name", "description", "weight"}:
            return f"criteria[{i}] must be an object with a name, a description and an optional weight"
        name, description = criterion.get("name"), criterion.get("description")
        if not isinstance(name, str) or not _RUBRIC_NAME.fullmatch(name):
            return f"criteria[{i}].name must be a word of letters, digits, '_' or '-' (up to 40)"
        if name in names:
            return f"criteria[{i}].name {name!r} is used twice"
        names.add(name)
        if not isinstance(description, str) or not description.strip():
            return f"criteria[{i}].description must be a non-empty string"
        weight = criterion.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight < math.inf:
            return f"criteria[{i}].weight must be a number greater than 0"
    return None


def rubric_for(metadata: dict, default: dict | None) -> dict | None:
    """The rubric a row is graded with: its own metadata.rubric, else the card's."""
    return metadata.get("rubric", default)


def rubric_metadata_problem(metadata: dict, default: dict | None) -> str | None:
    """Why a row cannot be graded (checked on every row before training), or None."""
    if "rubric" not in metadata and default is None:
        return "no rubric: give metadata.rubric, or a rubric in the card"
    if "rubric" in metadata and (problem := rubric_problem(metadata["rubric"])):
        return f"rubric: {problem}"
    return None


def _judge_escape(text: str) -> str:
    return text.replace("</response>", "<\\/response>").replace("</conversation>", "<\\/conversation>")


def judge_prompt(messages: list[dict], response: str, rubric: dict) -> str:
    """The judge's whole question about one response (JUDGE_TEMPLATE filled in)."""
    low, high = rubric.get("scale", [1, 5])
    criteria = rubric["criteria"]
    return JUDGE_TEMPLATE.format(
        conversation="\n\n".join(
            f"{m['role'].capitalize()}: {_judge_escape(m['content'])}" for m in messages
        ),
        response=_judge_escape(response),
        low=low,
        high=high,
        criteria="\n".join(
            f"- {c['name']} (weight {c.get('weight', 1):g}): {c['description'].strip()}" for c in criteria
        ),
        example=json.dumps({c["name"]: high for c in criteria}),
    )


def parse_scores(answer: str, rubric: dict) -> dict[str, int]:
    """The judge's scores, parsed strictly; ValueError saying what is wrong otherwise."""
    text = answer.strip()
    fenced = _RUBRIC_FENCE.fullmatch(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        scores = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise ValueError(f"not one JSON object: {answer[:80]!r}") from None
    names = [c["name"] for c in rubric["criteria"]]
    if not isinstance(scores, dict) or set(scores) != set(names):
        if not isinstance(scores, dict):
            raise ValueError(f"not a JSON object: {answer[:80]!r}")
        missing, extra = sorted(set(names) - set(scores)), sorted(set(scores) - set(names))
        raise ValueError(f"criteria missing {missing}, unknown {extra}")
    low, high = rubric.get("scale", [1, 5])
    for name, value in scores.items():
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name}: {value!r} is not an integer from {low} to {high}")
    return scores


def rubric_reward(scores: dict[str, int], rubric: dict) -> float:
    """The weighted mean of the scores, each mapped from the scale to [0, 1]."""
    low, high = rubric.get("scale", [1, 5])
    weights = {c["name"]: float(c.get("weight", 1)) for c in rubric["criteria"]}
    total = sum(weights[name] * (scores[name] - low) / (high - low) for name in weights)
    return total / sum(weights.values())
