"""The catalog: models, signals, methods, losses, tasks and card fields, as data (the YAML files beside this).

Loaded once, on first use, into frozen dataclasses. Defaults that depend on the model (the LoRA
learning rate by family) are computed here, with a note that says where the number came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

_HERE = Path(__file__).parent


@dataclass(frozen=True)
class Model:
    name: str
    family: str
    renderer: str  # key of renderers.yaml: how its chat format is rendered and parsed
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
class RendererMode:
    name: str  # the card's `thinking` value: "on", "off"; "none" or "always" where there is no switch
    trained: str  # what a one-turn demonstration with answer ANSWER trains, as text
    constructor: str | None = None  # tml_renderers.renderers class, or Class.factory
    args: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Renderer:
    """How a model's chat format becomes tokens (renderers.yaml)."""

    name: str
    kind: str  # "tml" | "template" | "base"
    modes: dict[str, RendererMode]
    default: str
    tools: bool = True  # the format can declare tools to the model (tool-agents cards with `tools:`)

    @property
    def switchable(self) -> bool:
        """Whether a card may pick the thinking mode (`thinking: on|off`)."""
        return set(self.modes) >= {"on", "off"}


@dataclass(frozen=True)
class RowKey:
    name: str
    kind: str  # "messages" (str or chat messages) | "text" | "object"
    shown: str  # how the loop's header shows it
    when: str | None = None  # "verifier": a key of the row only for tasks with a verifier


@dataclass(frozen=True)
class Signal:
    name: str
    summary: str
    row: tuple[RowKey, ...]


@dataclass(frozen=True)
class Field:
    """A card field (fields.yaml): its schema, meaning, default, and the loop setting it becomes."""

    name: str
    doc: str
    schema: dict
    required: bool = False
    enum: str | None = None  # catalog part whose names are the allowed values
    default: object = None
    per_method: bool = False  # only the methods that list it read it
    constant: str | None = None
    flag: str | None = None
    type: str | None = None  # argparse type of the flag
    positive: bool = False
    choices: tuple[str, ...] | None = None
    starter: str | bool | None = None
    tasks: tuple[str, ...] | None = None  # only cards of these tasks may set it (None: any task)
    methods: tuple[str, ...] | None = None  # only cards of these methods may set it (None: any method)


@dataclass(frozen=True)
class MethodField:
    """A per-method field as one method uses it: the help of its flag, the comment of its constant."""

    name: str
    help: str
    comment: str


@dataclass(frozen=True)
class Method:
    name: str
    signal: str
    summary: str
    template: str
    losses: tuple[str, ...]
    default_loss: str
    defaults: dict
    fields: tuple[MethodField, ...]
    rows_per_step: str
    imports: tuple[str, ...]
    primitives: tuple[str, ...]
    loss_line: str
    max_tokens_help: str
    # family (or "default") -> (learning rate, the tinker-cookbook recipe it comes from)
    lr_recipes: dict[str, tuple[float, str]] | None = None

    @property
    def default_lr(self) -> float:
        return float(self.defaults["lr"])

    @property
    def uses(self) -> tuple[str, ...]:
        """The per-method fields this method reads."""
        return tuple(f.name for f in self.fields)


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
    ratio: bool = False  # reads the sampler's logprobs: an importance ratio against the trainer's


@dataclass(frozen=True)
class Task:
    name: str
    summary: str
    signals: tuple[str, ...]
    verifier: str | None
    accuracy: bool
    system_prompt: str | None
    judge: bool = False  # graded by a judge model against a rubric (task rubric), not by a verifier
    templates: dict[str, str] = field(default_factory=dict)  # method -> its template for this task


@dataclass(frozen=True)
class Tool:
    """A tool a tool-agents card may list (tools.yaml): its signature and the code that runs it."""

    name: str
    description: str
    parameters: dict  # JSON Schema of the arguments (an object of string properties)
    timeout: float  # default time limit in seconds
    module: str  # templates/tools/<module>.py, inlined into the loop
    corpus: bool = False  # reads the card's corpus (--corpus)
    sandbox: bool = False  # runs model-written code in the code task's sandbox

    @property
    def spec(self) -> dict:
        """The OpenAI-style declaration a chat format renders: {"type": "function", "function": {...}}."""
        function = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class Catalog:
    models: dict[str, Model]
    signals: dict[str, Signal]
    methods: dict[str, Method]
    losses: dict[str, Loss]
    tasks: dict[str, Task]
    fields: dict[str, Field]
    renderers: dict[str, Renderer]
    tools: dict[str, Tool] = field(default_factory=dict)


def _read(name: str) -> dict:
    with open(_HERE / name, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _method(name: str, d: dict) -> Method:
    fields = tuple(
        MethodField(name=field, help=spec["help"], comment=spec.get("comment", spec["help"]))
        for field, spec in d["fields"].items()
    )
    return Method(
        name=name,
        signal=d["signal"],
        summary=d["summary"],
        template=d["template"],
        losses=tuple(d["losses"]),
        default_loss=d["default_loss"],
        defaults=dict(d["defaults"]),
        fields=fields,
        rows_per_step=d["rows_per_step"],
        imports=tuple(d["imports"]),
        primitives=tuple(d["primitives"]),
        loss_line=d["loss_line"],
        max_tokens_help=d["max_tokens_help"],
        lr_recipes={k: (float(v["lr"]), v["recipe"]) for k, v in d["lr_recipes"].items()}
        if "lr_recipes" in d
        else None,
    )


@cache
def load_catalog() -> Catalog:
    models_doc = _read("models.yaml")
    methods_doc = _read("methods.yaml")
    tasks_doc = _read("tasks.yaml")
    fields_doc = _read("fields.yaml")
    renderers_doc = _read("renderers.yaml")
    tools_doc = _read("tools.yaml")
    models = {}
    for entry in models_doc["models"]:
        entry = dict(entry)
        entry.setdefault("active_b", None)
        entry["end_of_turn"] = tuple(entry["end_of_turn"])
        models[entry["name"]] = Model(**entry)
    signals = {
        name: Signal(
            name=name,
            summary=d["summary"],
            row=tuple(
                RowKey(name=key, kind=k["kind"], shown=k["shown"], when=k.get("when"))
                for key, k in d["row"].items()
            ),
        )
        for name, d in methods_doc["signals"].items()
    }
    methods = {name: _method(name, d) for name, d in methods_doc["methods"].items()}
    losses = {
        name: Loss(
            name=name,
            summary=d["summary"],
            config=tuple(
                LossOption(name=k, default=float(v["default"]), summary=v["summary"])
                for k, v in d["config"].items()
            ),
            ratio=bool(d.get("ratio", False)),
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
            judge=bool(d.get("judge", False)),
            templates=dict(d.get("templates", {})),
        )
        for name, d in tasks_doc["tasks"].items()
    }
    fields = {}
    for name, d in fields_doc["fields"].items():
        for key in ("tasks", "methods"):
            if key in d:
                d[key] = tuple(d[key])
        fields[name] = Field(name=name, schema=d.pop("schema", {}), **d)
    renderers = {
        name: Renderer(
            name=name,
            kind=d["kind"],
            modes={mode: RendererMode(name=mode, **spec) for mode, spec in d["modes"].items()},
            default=d["default"],
            tools=bool(d.get("tools", True)),
        )
        for name, d in renderers_doc["renderers"].items()
    }
    tools = {name: Tool(name=name, **d) for name, d in tools_doc["tools"].items()}
    catalog = Catalog(
        models=models,
        signals=signals,
        methods=methods,
        losses=losses,
        tasks=tasks,
        fields=fields,
        renderers=renderers,
        tools=tools,
    )
    _check(catalog)
    return catalog


def _check(catalog: Catalog) -> None:
    """Refuse a catalog whose parts do not fit together (a mistake in the YAML, not in a card)."""
    problems = []
    for method in catalog.methods.values():
        where = f"methods.yaml: {method.name}"
        if method.signal not in catalog.signals:
            problems.append(f"{where}: unknown signal {method.signal!r}")
        for loss in (*method.losses, method.default_loss):
            if loss not in catalog.losses:
                problems.append(f"{where}: unknown loss {loss!r}")
        for name in method.uses:
            field = catalog.fields.get(name)
            if field is None or not field.per_method:
                problems.append(f"{where}: {name!r} is not a per-method field in fields.yaml")
        for name in method.defaults:
            if name not in catalog.fields:
                problems.append(f"{where}: default for unknown field {name!r}")
        if method.rows_per_step not in method.uses:
            problems.append(f"{where}: rows_per_step {method.rows_per_step!r} is not one of its fields")
        missing = [name for name in ("steps", "lr", "sampling", *method.uses) if name not in method.defaults]
        if missing:
            problems.append(f"{where}: no default for {', '.join(missing)}")
    for signal in catalog.signals.values():
        for key in signal.row:
            if key.when not in (None, "verifier"):
                problems.append(f"methods.yaml: signal {signal.name}: {key.name}: unknown when {key.when!r}")
    for model in catalog.models.values():
        if model.renderer not in catalog.renderers:
            problems.append(f"models.yaml: {model.name}: unknown renderer {model.renderer!r}")
    for renderer in catalog.renderers.values():
        if renderer.default not in renderer.modes:
            problems.append(f"renderers.yaml: {renderer.name}: default {renderer.default!r} is not a mode")
        for mode in renderer.modes.values():
            if (mode.constructor is None) != (renderer.kind != "tml"):
                problems.append(f"renderers.yaml: {renderer.name}: a constructor is for tml renderers only")
    for task in catalog.tasks.values():
        for method in task.templates:
            if method not in catalog.methods:
                problems.append(f"tasks.yaml: {task.name}: a template for unknown method {method!r}")
    for f in catalog.fields.values():
        for task in f.tasks or ():
            if task not in catalog.tasks:
                problems.append(f"fields.yaml: {f.name}: unknown task {task!r}")
        for method in f.methods or ():
            if method not in catalog.methods:
                problems.append(f"fields.yaml: {f.name}: unknown method {method!r}")
    if problems:
        raise ValueError("rtc catalog is inconsistent:\n  " + "\n  ".join(problems))


# tinker-cookbook's LoRA learning-rate rule: lr = 5e-4 * (2000 / hidden_size) ** exponent.
_LR_EXPONENT = {"llama": 0.781, "qwen": 0.0775}


def default_lr(model: Model, method: Method) -> tuple[float, str]:
    """The learning rate a card gets when it names none, and a note saying where it came from.

    A method with `lr_recipes` (methods.yaml) takes the rate tinker-cookbook's recipes use for the
    model's family, else its own default. Otherwise the family LoRA rule applies where it is
    published; it was fitted for supervised fine-tuning, so for DPO it is scaled by the ratio of the
    method defaults (dpo 1e-5 against sft 2e-4).
    """
    if method.lr_recipes is not None:
        if model.family in method.lr_recipes:
            value, source = method.lr_recipes[model.family]
            return float(value), f"tinker-cookbook {source}"
        value, source = method.lr_recipes["default"]
        return float(value), f"tinker-cookbook {source}"
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


@dataclass(frozen=True)
class Price:
    """Tinker's price of a model, USD per million tokens (prices.yaml)."""

    prefill: float
    sample: float
    train: float


@dataclass(frozen=True)
class PriceTable:
    source: str  # where the prices are published
    effective: str  # the date they took effect
    read: str  # the date rtc read them
    prices: dict[str, Price]

    def describe(self) -> str:
        return f"Tinker's, in effect from {self.effective} (read {self.read}), {self.source}"


@cache
def load_prices() -> PriceTable:
    """The dated price table (prices.yaml); every model in it must be one of models.yaml."""
    doc = _read("prices.yaml")
    prices = {name: Price(**{k: float(v) for k, v in p.items()}) for name, p in doc["prices"].items()}
    unknown = sorted(set(prices) - set(load_catalog().models))
    if unknown:
        raise ValueError(f"rtc catalog is inconsistent:\n  prices.yaml: unknown models {', '.join(unknown)}")
    dates = {"effective": str(doc["effective"]), "read": str(doc["read"])}
    return PriceTable(source=doc["source"], prices=prices, **dates)


def same_tokenizer(model: Model) -> list[str]:
    """The catalog models that read `model`'s tokens (its tml-renderers tokenizer, or for a family
    without one there, its family): the models that can teach it, since a teacher scores the
    student's own tokens. The biggest first."""
    catalog = load_catalog()
    if model.tokenizer is not None:
        fits = [m for m in catalog.models.values() if m.tokenizer == model.tokenizer]
    else:
        fits = [m for m in catalog.models.values() if m.tokenizer is None and m.family == model.family]
    return [m.name for m in sorted(fits, key=lambda m: -(m.params_b or 0))]
