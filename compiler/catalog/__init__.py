"""The catalog: models, signals, methods, losses and tasks, as data (the YAML files beside this).

Loaded once, on first use, into frozen dataclasses. Defaults that depend on the model (the LoRA
learning rate by family) are computed here, with a note that says where the number came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

_HERE = Path(__file__).parent


@dataclass(frozen=True)
class Model:
    name: str
    family: str
    tokenizer: str | None  # tml_renderers.tokenizers class of the family, None where it has none
    arch: str | None  # "dense" | "moe" | None (not published)
    params_b: float | None
    active_b: float | None
    context: int | None
    thinking: str  # "none" | "hybrid" | "always"
    chat: str  # "base" | "instruct"
    end_of_turn: tuple[str, ...]
    hidden_size: int | None = None
    vision: bool = False

    @property
    def size(self) -> str:
        """Human-readable size: `MoE, 30B total / 3B active`, `dense, 8.2B`, or `size not published`."""
        if self.params_b is None:
            return f"{self.arch or 'architecture'} (size not published)"
        if self.arch == "moe":
            active = f" / {_billions(self.active_b)} active" if self.active_b is not None else ""
            return f"MoE, {_billions(self.params_b)} total{active}"
        return f"{self.arch}, {_billions(self.params_b)}"


def _billions(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:g}B" if value < 1000 else f"{value / 1000:g}T"


@dataclass(frozen=True)
class Signal:
    name: str
    summary: str
    row: dict[str, str]
    required_keys: tuple[str, ...]


@dataclass(frozen=True)
class Method:
    name: str
    signal: str
    summary: str
    losses: tuple[str, ...]
    default_loss: str
    default_lr: float
    uses: tuple[str, ...]
    primitives: tuple[str, ...]


@dataclass(frozen=True)
class LossOption:
    name: str
    default: float
    summary: str


@dataclass(frozen=True)
class Loss:
    name: str
    summary: str
    config: tuple[LossOption, ...]


@dataclass(frozen=True)
class Task:
    name: str
    summary: str
    signals: tuple[str, ...]
    verifier: str | None
    accuracy: bool
    system_prompt: str | None


@dataclass(frozen=True)
class Catalog:
    models: dict[str, Model]
    signals: dict[str, Signal]
    methods: dict[str, Method]
    losses: dict[str, Loss]
    tasks: dict[str, Task]


def _read(name: str) -> dict:
    with open(_HERE / name, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@cache
def load_catalog() -> Catalog:
    models_doc = _read("models.yaml")
    methods_doc = _read("methods.yaml")
    tasks_doc = _read("tasks.yaml")
    models = {}
    for entry in models_doc["models"]:
        entry = dict(entry)
        entry.setdefault("active_b", None)
        entry["end_of_turn"] = tuple(entry["end_of_turn"])
        models[entry["name"]] = Model(**entry)
    signals = {
        name: Signal(name=name, summary=d["summary"], row=d["row"], required_keys=tuple(d["required_keys"]))
        for name, d in methods_doc["signals"].items()
    }
    methods = {
        name: Method(
            name=name,
            signal=d["signal"],
            summary=d["summary"],
            losses=tuple(d["losses"]),
            default_loss=d["default_loss"],
            default_lr=float(d["default_lr"]),
            uses=tuple(d["uses"]),
            primitives=tuple(d["primitives"]),
        )
        for name, d in methods_doc["methods"].items()
    }
    losses = {
        name: Loss(
            name=name,
            summary=d["summary"],
            config=tuple(
                LossOption(name=k, default=float(v["default"]), summary=v["summary"])
                for k, v in d["config"].items()
            ),
        )
        for name, d in methods_doc["losses"].items()
    }
    tasks = {
        name: Task(
            name=name,
            summary=d["summary"],
            signals=tuple(d["signals"]),
            verifier=d["verifier"],
            accuracy=bool(d["accuracy"]),
            system_prompt=d["system_prompt"],
        )
        for name, d in tasks_doc["tasks"].items()
    }
    return Catalog(models=models, signals=signals, methods=methods, losses=losses, tasks=tasks)


# tinker-cookbook's LoRA learning-rate rule: lr = 5e-4 * (2000 / hidden_size) ** exponent.
_LR_EXPONENT = {"llama": 0.781, "qwen": 0.0775}


def default_lr(model: Model, method: Method) -> tuple[float, str]:
    """The learning rate a card gets when it names none, and a note saying where it came from.

    The family rule was fitted for supervised LoRA fine-tuning; RL and DPO use smaller rates, so for
    those methods the rule's value is scaled by the ratio of the method defaults (grpo 4e-5 and
    dpo 1e-5 against sft 2e-4).
    """
    exponent = _LR_EXPONENT.get(model.family)
    if exponent is None or model.hidden_size is None:
        return method.default_lr, f"method {method.name} default (no published rule for {model.family})"
    rule = 5e-4 * (2000 / model.hidden_size) ** exponent
    scale = method.default_lr / 2.0e-4
    value = float(f"{rule * scale:.3g}")
    note = f"{model.family} LoRA rule 5e-4*(2000/{model.hidden_size})**{exponent}"
    if scale != 1:
        note += f" x {scale:g} for {method.name}"
    return value, note
