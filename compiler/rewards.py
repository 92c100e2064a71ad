"""Rewards from a model: GRPO against a reward model (`reward: model`) or a rubric judge (task rubric).

The card fields `reward`, `reward_model`, `judge`, `rubric` and `length_penalty` (catalog/fields.yaml)
are checked here (`reward_problems`, called by `validate`), resolved into one `RewardSpec` (`resolve`),
and turned into what the GRPO template's reward hook needs (`reward_context`, called by `render`).
The judge's prompt and parser live in `templates/judges/*.py`: plain, tested modules inlined into the
loop like the task verifiers, and read here as data (the rubric check is the loop's own).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from types import ModuleType

from .card import RawCard
from .catalog import Model, load_catalog
from .errors import Problem

REWARD_FIELDS = ("reward", "reward_model", "judge", "rubric", "length_penalty")
SAMPLER_PATH = re.compile(r"tinker://[^/\s]+/sampler_weights/[^/\s]+")
JUDGES = Path(str(resources.files("rtc.templates"))) / "judges"


@dataclass(frozen=True)
class RewardSpec:
    """Where a GRPO loop's rewards come from when no verifier gives them."""

    source: str  # "model": a reward model's Yes/No log-odds; "rubric": a judge grades against a rubric
    scorer: str | None  # tinker:// sampler checkpoint or base model name; None: --reward-model is required
    length_penalty: float  # reward -= length_penalty * completion tokens / max_tokens
    rubric: dict | None  # the card's rubric (task rubric); rows may bring their own


@cache
def judge_module(name: str) -> ModuleType:
    """templates/judges/<name>.py imported by path (it is data the loops inline, not a package)."""
    spec = importlib.util.spec_from_file_location(f"_rtc_judge_{name}", JUDGES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def same_format(a: Model, b: Model) -> bool:
    """Whether two catalog models render with one chat format (the loop has one format built in)."""
    return (a.renderer, a.tokenizer, a.family) == (b.renderer, b.tokenizer, b.family)


def _scorer_problem(value: str, model: Model, field: str) -> str | None:
    catalog = load_catalog()
    if value.startswith("tinker://"):
        if not SAMPLER_PATH.fullmatch(value):
            return (
                f"{value!r} is not a sampler checkpoint: use the tinker://<run>/sampler_weights/<name> path "
                "that a reward-model run lists as sampler_path in its checkpoints.jsonl"
            )
        return None
    other = catalog.models.get(value)
    if other is None:
        return f"{value!r} is neither a tinker:// sampler checkpoint nor a model of `rtc list models`"
    if not same_format(other, model):
        fits = sorted(m.name for m in catalog.models.values() if same_format(m, model))
        return (
            f"{value} renders in another chat format than {model.name}; the {field} must share the "
            f"policy's format: one of {', '.join(fits)}"
        )
    return None


def reward_problems(card: RawCard) -> list[Problem]:
    """The cross-field rules of the reward fields (on a card that passed the schema)."""
    catalog = load_catalog()
    data = card.data
    method, task, model = data["method"], catalog.tasks[data["task"]], catalog.models[data["model"]]
    problems = []
    given = [name for name in REWARD_FIELDS if name in data]
    centering = data.get("loss_config", {}).get("centering")
    if centering is not None and centering < 0:
        problems.append(card.problem(("loss_config", "centering"), "must be 0 or more"))
    if method != "grpo":
        return problems + [
            card.problem((name,), f"does not apply to method {method} (only to grpo); remove it", key=True)
            for name in given
        ]
    reward = data.get("reward", "verifier")
    # A task without a verifier of its own may let the card pick one (tool-agents: the `verifier` field).
    verified = task.verifier is not None or task.name in (catalog.fields["verifier"].tasks or ())
    if task.judge:
        for name in ("reward", "reward_model"):
            if name in data:
                message = f"task {task.name} is graded by its judge (the judge field); remove it"
                problems.append(card.problem((name,), message, key=True))
        if "rubric" in data and (problem := judge_module("rubric").rubric_problem(data["rubric"])):
            problems.append(card.problem(("rubric",), problem))
    elif reward == "model":
        if verified:
            problems.append(
                card.problem(
                    ("reward",),
                    f"task {task.name} has its own verifier; reward: model is for tasks without one (chat)",
                )
            )
    elif not verified and data["signal"] in task.signals:  # else the signal rule says it
        problems.append(
            card.problem(
                ("task",),
                f"task {task.name} has no verifier: set reward: model and a reward_model (or pass "
                "--reward-model), or use task rubric with a judge",
            )
        )
    model_scored = task.judge or reward == "model"
    if not task.judge:
        for name in ("judge", "rubric"):
            if name in data:
                message = f"applies only to task rubric (this card's task is {task.name}); remove it"
                problems.append(card.problem((name,), message, key=True))
    if reward != "model" and not task.judge and data.get("reward_model") is not None:
        problems.append(
            card.problem(("reward_model",), "applies only with reward: model; remove it", key=True)
        )
    if "length_penalty" in data and not model_scored:
        message = "applies only to rewards from a model (reward: model, or task rubric); remove it"
        problems.append(card.problem(("length_penalty",), message, key=True))
    for name in ("reward_model", "judge"):
        value = data.get(name)
        if model_scored and isinstance(value, str) and (problem := _scorer_problem(value, model, name)):
            problems.append(card.problem((name,), problem))
    return problems


def resolve_reward(data: dict, origins: dict[str, str]) -> RewardSpec | None:
    """The RewardSpec of a valid card, or None where its task's verifier gives the rewards."""
    catalog = load_catalog()
    task = catalog.tasks[data["task"]]
    if data["method"] != "grpo" or not (task.judge or data.get("reward") == "model"):
        return None
    for name in REWARD_FIELDS:
        origins[name] = "card" if name in data else "default"
    if task.judge:
        scorer = data.get("judge", data["model"])
        origins["judge"] = "card" if "judge" in data else "default: the card's model"
    else:
        scorer = data.get("reward_model")
    return RewardSpec(
        source="rubric" if task.judge else "model",
        scorer=scorer,
        length_penalty=float(data.get("length_penalty", 0.0)),
        rubric=data.get("rubric"),
    )


def reward_loss_line(card) -> str:
    """The header's "what is trained" phrase: the method's, or where a model gives the rewards."""
    if card.reward is None:
        return card.method.loss_line
    if card.reward.source == "model":
        return "with group-relative advantages from a reward model's scores"
    return "with group-relative advantages from a rubric judge's grades"


def method_imports(card) -> tuple[str, ...]:
    """The method's imports; a GRPO loop scored by a model has no verifier, so no thread pool for it."""
    if card.reward is None:
        return card.method.imports
    return tuple(line for line in card.method.imports if "ThreadPoolExecutor" not in line)


def reward_context(card) -> dict:
    """What the templates need from the judge modules: the module inlined into the loop (its
    imports, docstring and body) and the prompt the header shows. A reward-model run and a GRPO run
    against it inline the same question (templates/judges/preference.py)."""
    spec = card.reward
    if card.method.name == "reward_model":
        name = "preference"
    elif spec is not None:
        name = "rubric" if spec.source == "rubric" else "preference"
    else:
        return {"judge_imports": [], "judge_doc": [], "judge_body": "", "judge_prompt": ""}
    from .render import verifier_source  # render imports this module: import at call time

    imports, doc, body = verifier_source(name, folder="judges")
    module = judge_module(name)
    if name == "rubric":
        prompt = module.JUDGE_TEMPLATE
    else:
        prompt = module.rm_messages([{"role": "user", "content": "{prompt}"}], "{response}")[0]["content"]
    return {"judge_imports": imports, "judge_doc": doc, "judge_body": body, "judge_prompt": prompt}
