"""Resolve a valid card into a frozen, fully-defaulted `ResolvedCard`.

Templates only ever see a `ResolvedCard`: every field has a value, so no template needs
`| default` or `is defined`. `origins` records where each value came from (the card, a default,
or the catalog), which `rtc explain` prints.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path

from .card import RawCard
from .catalog import Loss, Method, Model, Renderer, Signal, Task, Tool, default_lr, load_catalog
from .rewards import RewardSpec, resolve_reward

# When the catalog does not know a model's context length.
FALLBACK_MAX_LENGTH = 32768


@dataclass(frozen=True)
class Sampling:
    max_tokens: int
    temperature: float
    top_p: float


@dataclass(frozen=True)
class ResolvedCard:
    name: str
    title: str
    description: str
    signal: Signal
    method: Method
    task: Task
    model: Model
    renderer: Renderer
    thinking: str  # the renderer mode: "on"/"off" for hybrid models, else "none" or "always"
    loss: Loss
    loss_config: dict[str, float]
    rank: int
    steps: int
    lr: float
    sampling: Sampling
    settings: dict[str, object]  # the per-method fields the method reads (fields.yaml), by name
    eval_every: int
    save_every: int
    seed: int
    max_length: int
    init_from: str | None  # a tinker:// checkpoint to start from (weights only), or None
    overlong: str  # "refuse" | "cut": what a row longer than the context does
    system_prompt: str | None
    data_train: str | None
    data_eval: str | None
    source: str
    card_sha256: str
    origins: dict[str, str] = field(default_factory=dict)
    reward: RewardSpec | None = None  # rewards from a reward model or a rubric judge (grpo), else None
    # tool-agents: the tools declared to the model (and run, with grpo), in the card's order
    tools: tuple[Tool, ...] = ()
    # grpo on tool-agents (the episode loop); None / empty for every other card
    verifier: str | None = None  # the verifier module: the task's, or the card's `verifier` for tool-agents
    corpus: str | None = None  # the corpus file, relative to the card
    max_turns: int | None = None
    max_tool_calls: int | None = None
    tool_timeouts: dict[str, float] = field(default_factory=dict)  # seconds, for every listed tool
    shaping: dict[str, float] = field(default_factory=dict)  # malformed_call, tool_call penalties


def resolve(card: RawCard, source: str | None = None) -> ResolvedCard:
    """Fill every default of a card that passed `validate`. `source` is the path shown in headers."""
    catalog = load_catalog()
    data = card.data
    method = catalog.methods[data["method"]]
    model = catalog.models[data["model"]]
    task = catalog.tasks[data["task"]]
    origins: dict[str, str] = {}
    defaults = {f.name: f.default for f in catalog.fields.values() if f.default is not None}
    defaults.update(method.defaults)

    def pick(name: str, default: object, origin: str = "default") -> object:
        if name in data:
            origins[name] = "card"
            return data[name]
        origins[name] = origin
        return default

    loss = catalog.losses[pick("loss", method.default_loss, f"default of method {method.name}")]
    loss_config = {}
    for option in loss.config:
        if option.name in data.get("loss_config", {}):
            loss_config[option.name] = float(data["loss_config"][option.name])
            origins[f"loss_config.{option.name}"] = "card"
        else:
            loss_config[option.name] = option.default
            origins[f"loss_config.{option.name}"] = f"default of loss {loss.name}"

    lr_default, lr_note = default_lr(model, method)
    sampling_default = defaults["sampling"]
    sampling_card = data.get("sampling", {})
    sampling_values = {}
    for key, value in sampling_default.items():
        if key in sampling_card:
            sampling_values[key] = sampling_card[key]
            origins[f"sampling.{key}"] = "card"
        else:
            sampling_values[key] = value
            origins[f"sampling.{key}"] = f"default of method {method.name}"
    if model.context is not None:
        max_length = pick("max_length", model.context, f"catalog: {model.name} context")
    else:
        max_length = pick("max_length", FALLBACK_MAX_LENGTH, "default (context not in catalog)")

    data_section = data.get("data", {})
    for split in ("train", "eval"):
        origins[f"data.{split}"] = "card" if split in data_section else "none"
    origins["system_prompt"] = "card" if "system_prompt" in data else f"task {task.name}"

    resolved = ResolvedCard(
        name=pick("name", None),
        title=pick("title", None),
        description=pick("description", ""),
        signal=catalog.signals[pick("signal", None)],
        method=catalog.methods[pick("method", None)],
        task=catalog.tasks[pick("task", None)],
        model=catalog.models[pick("model", None)],
        renderer=catalog.renderers[model.renderer],
        thinking=pick(
            "thinking", catalog.renderers[model.renderer].default, f"renderer {model.renderer} default"
        ),
        loss=loss,
        loss_config=loss_config,
        rank=int(pick("rank", defaults["rank"])),
        steps=int(pick("steps", defaults["steps"], f"default of method {method.name}")),
        lr=float(pick("lr", lr_default, lr_note)),
        sampling=Sampling(
            max_tokens=int(sampling_values["max_tokens"]),
            temperature=float(sampling_values["temperature"]),
            top_p=float(sampling_values["top_p"]),
        ),
        settings={
            name: pick(name, defaults[name], f"default of method {method.name}") for name in method.uses
        },
        eval_every=int(pick("eval_every", defaults["eval_every"])),
        save_every=int(pick("save_every", defaults["save_every"])),
        seed=int(pick("seed", defaults["seed"])),
        max_length=int(max_length),
        overlong=str(pick("overlong", defaults["overlong"])),
        init_from=pick("init_from", None),
        system_prompt=data["system_prompt"] if "system_prompt" in data else task.system_prompt,
        data_train=data_section.get("train"),
        data_eval=data_section.get("eval"),
        source=source if source is not None else card.file,
        card_sha256=hashlib.sha256(card.text.encode("utf-8")).hexdigest(),
        origins=origins,
        reward=resolve_reward(data, origins),
        verifier=task.verifier,
    )
    if task.name == "tool-agents" and "tools" in data:
        resolved = _with_tools(resolved, data, defaults, pick)
    return resolved


def _with_tools(resolved: ResolvedCard, data: dict, defaults: dict, pick) -> ResolvedCard:
    """A tool-agents card's tools, and for grpo the settings of its episode loop."""
    catalog = load_catalog()
    tools = tuple(catalog.tools[name] for name in data["tools"])
    resolved.origins["tools"] = "card"
    if resolved.method.name != "grpo":
        return replace(resolved, tools=tools)
    timeouts = {}
    for tool in tools:
        card_value = data.get("tool_timeouts", {}).get(tool.name)
        timeouts[tool.name] = float(card_value if card_value is not None else tool.timeout)
        resolved.origins[f"tool_timeouts.{tool.name}"] = (
            "card" if card_value is not None else "catalog: tools.yaml"
        )
    shaping = {}
    for key in ("malformed_call", "tool_call"):
        card_value = data.get("shaping", {}).get(key)
        shaping[key] = float(card_value if card_value is not None else 0.0)
        resolved.origins[f"shaping.{key}"] = "card" if card_value is not None else "default"
    return replace(
        resolved,
        tools=tools,
        verifier=str(pick("verifier", defaults["verifier"])),
        corpus=pick("corpus", None, "none (the loop's --corpus)"),
        max_turns=int(pick("max_turns", defaults["max_turns"])),
        max_tool_calls=int(pick("max_tool_calls", defaults["max_tool_calls"])),
        tool_timeouts=timeouts,
        shaping=shaping,
    )


def data_path(card: ResolvedCard, rel: str | None) -> str | None:
    """A card's data path as seen from the directory the card's source path is relative to."""
    if rel is None:
        return None
    return (Path(card.source).parent / rel).as_posix()
