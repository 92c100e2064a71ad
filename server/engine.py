"""The training engine: one base model, one LoRA adapter per training client, AdamW, losses.

All adapters hang off a single peft ``PeftModel`` (peft's multi-adapter support): a training
client is a named adapter with its own AdamW optimizer. Selecting an adapter also makes only its
weights require gradients, so one client's ``forward_backward`` can never touch another
client's weights or gradients.

Samplers are frozen: a sampler of the base model runs a second module tree that shares every
base tensor but is never wrapped by peft (no LoRA branches, no copy). A sampler of trained
weights (``save_weights_for_sampler``, ``save_weights_and_get_sampling_client``, or a sampling
client made from a saved path) keeps a frozen peft adapter and, memory permitting, a **merged**
copy: the base tree with ``W + scale * B @ A`` in place of every adapted weight, which samples
without peft's extra matmuls. Merged copies share the unadapted tensors (embeddings, norms) with
the base and are kept least-recently-used within :data:`MERGED_BUDGET_BYTES`; a sampler whose
copy was dropped is merged again when it next samples, and a model whose single copy exceeds the
budget samples through peft (the same numbers up to float rounding, slower).

``dtype`` is the compute dtype of the base weights (float32, or bfloat16 to halve memory and, on
CPUs with native bf16 matmuls, time). LoRA weights, their gradients and AdamW state stay float32,
and so does the output head, so logits, logprobs and losses are computed in float32 either way.

The engine is not thread-safe by design: the server calls it from exactly one thread (the
:class:`~rtc.server.scheduler.Scheduler`'s), which keeps torch work off the event loop and makes
the ordering of operations obvious.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import json
import logging
import math
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .family_tokenizers import load_served_tokenizer
from .losses import LossSpec, check_inputs, datum_loss
from .sampling import batchable

log = logging.getLogger("rtc.serve")

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
OPTIMIZER_STATE = "optimizer.pt"
TRAINING_INFO = "rtc_training_state.json"
# Tinker's LoRA scale does not depend on the rank; a fixed alpha gives scale = alpha / rank.
LORA_ALPHA = 32
# Tokens per forward/backward micro-batch (padding included): bounds activation memory (about
# 3 GB for SmolLM2-135M at 2048 tokens) and the tokens x vocabulary logits, further for large
# vocabularies (LOGITS_BUDGET floats, 1 GB, per copy). Matmuls of 2048 rows already run at the
# CPU's matmul peak, so larger micro-batches would only cost memory.
MICRO_BATCH_TOKENS = 2048
LOGITS_BUDGET = 1 << 28
# Memory for merged sampler copies (each about the size of the adapted weights: 0.54 GB for
# SmolLM2-135M in float32, all linear layers adapted, so two copies fit). Beyond it the least
# recently used copy is dropped; its sampler keeps working through peft and is merged again when
# it next samples.
MERGED_BUDGET_BYTES = 3 << 29
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def default_threads() -> int:
    """Half the cores: the client loop (tokenizing, rewards) runs on the same machine, and
    torch's thread pool slows down badly (10x seen here) when its threads compete for cores."""
    return max(1, (os.cpu_count() or 2) // 2)


class _FusedLora:
    """The LoRA forward of our adapters, given to peft as a LoRA "variant" (its extension hook).

    peft's vanilla forward is ``result + lora_B(lora_A(x)) * scaling``: the product, the scale
    and the sum each write a tokens x out_features tensor (tokens x vocabulary for the output
    head, the largest tensors of a training step), forward and backward. This applies the scale
    to the rank-r tensor and adds the product to the base output in the matmul itself (one
    ``addmm``). Measured on the SmolLM2 head, forward + backward: 15-20% less time than peft's.
    """

    @staticmethod
    def forward(module, active_adapter: str, x: torch.Tensor, result: torch.Tensor, **kwargs) -> torch.Tensor:
        low = module.lora_A[active_adapter](module.lora_dropout[active_adapter](x))
        scaling = module.scaling[active_adapter]
        if scaling != 1:
            low = low * scaling
        up = module.lora_B[active_adapter].weight
        if result.dtype != up.dtype:
            return result + torch.nn.functional.linear(low, up).to(result.dtype)
        flat = torch.addmm(result.reshape(-1, result.shape[-1]), low.reshape(-1, low.shape[-1]), up.t())
        return flat.view(result.shape)


class _TargetLogprobs(torch.autograd.Function):
    """``logits.gather(targets) - logsumexp(logits)`` with a one-pass backward.

    Autograd's own backward of that expression makes several tokens x vocabulary tensors (a
    zero-filled scatter for the gather, ``exp(x - lse)`` and its product, and their sum); this
    one writes the gradient once: ``-softmax * sum(grad)`` plus ``grad`` at the targets.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        lse = torch.logsumexp(logits, dim=-1, keepdim=True)
        ctx.save_for_backward(logits, lse, index)
        return logits.gather(-1, index) - lse

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        logits, lse, index = ctx.saved_tensors
        out = torch.sub(logits, lse).exp_()
        out.mul_(-grad.sum(-1, keepdim=True))
        out.scatter_add_(-1, index, grad)
        return out, None


def _shared_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A second module tree whose parameters and buffers are the same tensors as ``model``'s."""
    memo = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    return copy.deepcopy(model, memo)


def _cast_input_to_weight(module: torch.nn.Module, args: tuple) -> tuple:
    return (args[0].to(module.weight.dtype), *args[1:])


class EngineUserError(ValueError):
    """The request is well-formed but cannot run (for example a checkpoint of another model)."""


@dataclass
class Datum:
    """One decoded training example: the model input tokens and dense loss inputs."""

    tokens: list[int]
    inputs: dict[str, torch.Tensor]


@dataclass
class ForwardResult:
    logprobs: list[torch.Tensor]
    elementwise_loss: list[torch.Tensor]
    loss_sum: float


@dataclass
class AdamParams:
    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0


@dataclass
class LoraSettings:
    rank: int
    seed: int | None
    train_mlp: bool
    train_attn: bool
    train_unembed: bool


@dataclass
class TrainingAdapter:
    name: str
    settings: LoraSettings
    optimizer: torch.optim.AdamW | None = None
    steps: int = 0
    params: list[torch.nn.Parameter] = field(default_factory=list)


def micro_batches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Datum indices grouped into micro-batches of at most ``max_tokens`` tokens, padding counted.

    Longest first, so the rows of a micro-batch have similar lengths and little padding (GRPO
    datums of one step differ in length by their completions); a datum longer than
    ``max_tokens`` runs alone.
    """
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
    groups: list[list[int]] = []
    group: list[int] = []
    for index in order:
        if group and (len(group) + 1) * lengths[group[0]] > max_tokens:
            groups.append(group)
            group = []
        group.append(index)
    if group:
        groups.append(group)
    return groups


class Engine:
    """Owns the model; every method runs on the engine thread."""

    def __init__(self, model_dir: Path, threads: int | None = None, dtype: str = "float32"):
        from transformers import AutoModelForCausalLM

        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        torch.set_num_threads(threads or default_threads())
        self.model_dir = model_dir
        self.dtype = DTYPES[dtype]
        # Hugging Face or a family's native tml tokenizer: decode() and stop_token_ids either way.
        self.tokenizer = load_served_tokenizer(model_dir)
        self.base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=self.dtype)
        self.base.eval()
        for param in self.base.parameters():
            param.requires_grad_(False)
        if self.dtype != torch.float32:
            self._float32_head()
        self.config = self.base.config
        self.vocab_size = int(self.base.get_output_embeddings().weight.shape[0])
        self.max_length = int(getattr(self.config, "max_position_embeddings", 2048) or 2048)
        self.arch = (getattr(self.config, "architectures", None) or [type(self.base).__name__])[0]
        self.batchable = batchable(self.config)
        self.kv_bytes_per_token = self._kv_bytes_per_token()
        # The base tree without peft: samples the base model and is the template of merged copies.
        self._plain = _shared_copy(self.base)
        self._peft = None
        self._adapters: dict[str, TrainingAdapter] = {}
        self._module_groups = self._classify_linear_modules()
        self._merged: collections.OrderedDict[str, torch.nn.Module] = collections.OrderedDict()
        self.merged_budget_bytes = MERGED_BUDGET_BYTES

    def _float32_head(self) -> None:
        """Keep the output head (and so the logits) in float32 under a lower compute dtype."""
        head = self.base.get_output_embeddings()
        head.weight = torch.nn.Parameter(head.weight.detach().float(), requires_grad=False)
        if head.bias is not None:
            head.bias = torch.nn.Parameter(head.bias.detach().float(), requires_grad=False)
        head.register_forward_pre_hook(_cast_input_to_weight)

    def _kv_bytes_per_token(self) -> int:
        text = self.config.get_text_config(decoder=True)
        heads = getattr(text, "num_attention_heads", 1) or 1
        kv_heads = getattr(text, "num_key_value_heads", None) or heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
        layers = getattr(text, "num_hidden_layers", 1) or 1
        return int(layers * 2 * kv_heads * head_dim * torch.finfo(self.dtype).bits // 8)

    # ----- adapters -----------------------------------------------------------------------

    def _classify_linear_modules(self) -> dict[str, list[str]]:
        """Group the base model's linear layers into attention, MLP and unembedding."""
        groups: dict[str, list[str]] = {"attn": [], "mlp": [], "unembed": []}
        output = self.base.get_output_embeddings()
        for name, module in self.base.named_modules():
            if not isinstance(module, torch.nn.Linear):
                continue
            if module is output:
                groups["unembed"].append(name)
            elif any(part in name for part in ("attn", "attention")):
                groups["attn"].append(name)
            elif any(part in name for part in ("mlp", "feed_forward", "ffn")):
                groups["mlp"].append(name)
        return groups

    def _lora_config(self, settings: LoraSettings):
        from peft import LoraConfig

        targets: list[str] = []
        if settings.train_attn:
            targets += self._module_groups["attn"]
        if settings.train_mlp:
            targets += self._module_groups["mlp"]
        if settings.train_unembed:
            targets += self._module_groups["unembed"]
        if not targets:
            raise EngineUserError("LoRA needs at least one of train_attn, train_mlp, train_unembed")
        return LoraConfig(
            r=settings.rank, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=targets, bias="none"
        )

    def _add_adapter(self, name: str, lora_config, seed: int | None) -> None:
        from peft import get_peft_model

        seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
        with torch.random.fork_rng(), warnings.catch_warnings():
            # peft 0.21 calls an attribute transformers 5 renamed; the warning says nothing to users.
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            torch.manual_seed(seed)
            if self._peft is None:
                self._peft = get_peft_model(self.base, lora_config, adapter_name=name)
                self._peft.eval()
            else:
                self._peft.add_adapter(name, lora_config)
        for module in self.base.modules():
            if name in getattr(module, "lora_A", {}) and hasattr(module, "lora_variant"):
                module.lora_variant[name] = _FusedLora()

    def _adapter_params(self, name: str) -> list[torch.nn.Parameter]:
        """The adapter's weights in a fixed order (by name without the adapter suffix)."""
        marker = f".{name}."
        named = [
            (key.replace(marker, "."), param)
            for key, param in self._peft.named_parameters()
            if marker in key and "lora_" in key
        ]
        return [param for _, param in sorted(named, key=lambda item: item[0])]

    def _select(self, name: str) -> None:
        self._peft.set_adapter(name)

    def create_training_adapter(self, name: str, settings: LoraSettings) -> None:
        self._add_adapter(name, self._lora_config(settings), settings.seed)
        self._adapters[name] = TrainingAdapter(name, settings, params=self._adapter_params(name))

    def adapter_rank(self, name: str) -> int:
        return self._adapters[name].settings.rank

    def delete_adapter(self, name: str) -> None:
        self._merged.pop(name, None)
        for module in self.base.modules():
            getattr(module, "lora_variant", {}).pop(name, None)
        if self._peft is not None and name in self._peft.peft_config:
            if len(self._peft.peft_config) > 1:
                self._peft.delete_adapter(name)
        self._adapters.pop(name, None)

    def adapter_state(self, name: str) -> dict[str, torch.Tensor]:
        from peft import get_peft_model_state_dict

        # save_embedding_layers=False: with a LoRA on the unembedding, peft would otherwise add
        # the frozen base lm_head (vocabulary x hidden) to every checkpoint and sampler snapshot.
        state = get_peft_model_state_dict(self._peft, adapter_name=name, save_embedding_layers=False)
        return {k: v.detach().clone() for k, v in state.items()}

    def snapshot_for_sampling(self, source: str, name: str) -> None:
        """Copy a training adapter into a frozen sampler adapter (current weights)."""
        from peft import set_peft_model_state_dict

        adapter = self._adapters[source]
        self._add_adapter(name, self._lora_config(adapter.settings), 0)
        set_peft_model_state_dict(self._peft, self.adapter_state(source), adapter_name=name)
        self._merge(name)

    def load_sampler_adapter(self, directory: Path, name: str) -> None:
        """Load a saved adapter for sampling only (no optimizer)."""
        self._load_adapter_files(directory, name)
        self._merge(name)

    def _load_adapter_files(self, directory: Path, name: str) -> LoraSettings:
        from peft import set_peft_model_state_dict

        info = self.checkpoint_info(directory)
        settings = LoraSettings(**info["lora"])
        if info.get("vocab_size") != self.vocab_size or info.get("arch") != self.arch:
            raise EngineUserError(
                f"checkpoint {directory.name} was saved from another model ({info.get('arch')}, "
                f"vocab {info.get('vocab_size')}); this server runs {self.arch}, vocab {self.vocab_size}"
            )
        self._add_adapter(name, self._lora_config(settings), 0)
        weights = load_file(str(directory / ADAPTER_WEIGHTS))
        result = set_peft_model_state_dict(self._peft, weights, adapter_name=name)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            self._peft.delete_adapter(name)
            raise EngineUserError(f"checkpoint {directory.name} does not match the model: {unexpected[:3]}")
        return settings

    def load_training_adapter(self, directory: Path, name: str, with_optimizer: bool) -> None:
        settings = self._load_adapter_files(directory, name)
        adapter = TrainingAdapter(name, settings, params=self._adapter_params(name))
        info = self.checkpoint_info(directory)
        if with_optimizer:
            optimizer_file = directory / OPTIMIZER_STATE
            if not optimizer_file.is_file():
                raise EngineUserError(
                    f"checkpoint {directory.name} has no optimizer state (a sampler checkpoint?)"
                )
            state = torch.load(optimizer_file, weights_only=True)
            if state is not None:
                adapter.optimizer = self._new_optimizer(adapter.params)
                adapter.optimizer.load_state_dict(state)
            adapter.steps = int(info.get("steps", 0))
        self._adapters[name] = adapter

    @staticmethod
    def checkpoint_info(directory: Path) -> dict[str, object]:
        """The settings a checkpoint was saved with (LoRA config, steps, base model name)."""
        try:
            return json.loads((directory / TRAINING_INFO).read_text())
        except (OSError, ValueError) as error:
            raise EngineUserError(f"{directory.name} is not a checkpoint of this server: {error}") from None

    def save_adapter(self, name: str, directory: Path, with_optimizer: bool, base_model: str) -> None:
        """Write adapter weights (peft layout), settings and optionally the AdamW state."""
        adapter = self._adapters[name]
        save_file(self.adapter_state(name), str(directory / ADAPTER_WEIGHTS))
        self._peft.peft_config[name].save_pretrained(str(directory))
        info = {
            "lora": adapter.settings.__dict__,
            "steps": adapter.steps,
            "arch": self.arch,
            "vocab_size": self.vocab_size,
            "base_model": base_model,
            "base_model_dir": str(self.model_dir),
        }
        (directory / TRAINING_INFO).write_text(json.dumps(info, indent=2) + "\n")
        if with_optimizer:
            state = adapter.optimizer.state_dict() if adapter.optimizer is not None else None
            torch.save(state, directory / OPTIMIZER_STATE)

    # ----- samplers -------------------------------------------------------------------------

    def _adapted_modules(self, name: str) -> list[tuple[str, torch.nn.Module]]:
        """(module name, peft LoRA layer) of every base module that adapter ``name`` adapts."""
        return [
            (module_name, module)
            for module_name, module in self.base.named_modules()
            if name in getattr(module, "lora_A", {}) and hasattr(module, "get_delta_weight")
        ]

    def merged_bytes(self, name: str) -> int:
        """Memory of a merged copy of sampler ``name``: its adapted weights in the compute dtype."""
        total = 0
        for module_name, _ in self._adapted_modules(name):
            weight = self._plain.get_submodule(module_name).weight
            total += weight.numel() * weight.element_size()
        return total

    def _merge(self, name: str) -> torch.nn.Module | None:
        """A frozen copy of the base with adapter ``name`` merged in, if the budget allows."""
        if name in self._merged:
            self._merged.move_to_end(name)
            return self._merged[name]
        size = self.merged_bytes(name)
        if size > self.merged_budget_bytes:
            return None
        used = sum(self.merged_bytes(other) for other in self._merged)
        while self._merged and used + size > self.merged_budget_bytes:
            dropped, _ = self._merged.popitem(last=False)
            used -= self.merged_bytes(dropped)
            log.info(
                "dropped the merged copy of sampler %s (over %d MB)", dropped, self.merged_budget_bytes >> 20
            )
        merged = _shared_copy(self._plain)
        with torch.no_grad():
            for module_name, lora in self._adapted_modules(name):
                target = merged.get_submodule(module_name)
                base = lora.get_base_layer().weight
                weight = base.float() + lora.get_delta_weight(name).float()
                target.weight = torch.nn.Parameter(weight.to(target.weight.dtype), requires_grad=False)
        self._merged[name] = merged
        return merged

    def sampling_weights(self, adapter: str | None) -> Callable[[], torch.nn.Module]:
        """How to get the model that samples for ``adapter`` (None: the base model).

        The returned callable gives the module ready to run; call it again before each use,
        because a peft adapter must be selected again after training work selected another.
        """
        if adapter is None:
            plain = self._plain
            return lambda: plain
        if self._peft is None or adapter not in self._peft.peft_config:
            raise EngineUserError(f"sampler weights {adapter} are gone")
        merged = self._merge(adapter)
        if merged is not None:
            return lambda: merged

        def select() -> torch.nn.Module:
            if adapter not in self._peft.peft_config:
                raise EngineUserError(f"sampler weights {adapter} are gone")
            self._select(adapter)
            return self._peft

        return select

    # ----- forward / backward -------------------------------------------------------------

    @contextlib.contextmanager
    def use(self, adapter: str) -> Iterator[torch.nn.Module]:
        """The peft model with ``adapter`` active (and the only one requiring gradients)."""
        self._select(adapter)
        yield self._peft

    def token_logprobs(self, model: torch.nn.Module, batch: list[list[int]], targets: list[torch.Tensor]):
        """Logprobs of each datum's targets ([N] or [N, K]) under ``model``, one padded batch.

        Rows are right-padded and run without an attention mask: under causal attention a
        real token never sees the padding after it, and SDPA takes its faster causal path.
        ``logit - logsumexp`` is taken on the whole padded batch at once (:class:`_TargetLogprobs`)
        and only then split into datums: slicing a datum's rows out of the [rows, length,
        vocabulary] logits would make autograd build a full-size zero gradient for every datum.
        """
        longest = max(len(tokens) for tokens in batch)
        width = max([1] + [t.shape[1] for t in targets if t.dim() == 2])
        input_ids = torch.zeros((len(batch), longest), dtype=torch.long)
        index = torch.zeros((len(batch), longest, width), dtype=torch.long)
        for row, (tokens, target) in enumerate(zip(batch, targets, strict=True)):
            input_ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            columns = target.reshape(len(tokens), -1)
            index[row, : len(tokens), : columns.shape[1]] = columns
        logits = model(input_ids=input_ids).logits.float()
        picked = _TargetLogprobs.apply(logits, index)
        return [
            picked[row, : len(tokens), : (target.shape[1] if target.dim() == 2 else 1)].reshape(target.shape)
            for row, (tokens, target) in enumerate(zip(batch, targets, strict=True))
        ]

    def forward_backward(
        self, name: str, data: list[Datum], spec: LossSpec, forward_only: bool
    ) -> ForwardResult:
        """Run the loss on every datum and (unless ``forward_only``) accumulate its gradient.

        Datums go through the model in micro-batches of at most :data:`MICRO_BATCH_TOKENS`
        tokens (padding counted, datums of similar length together), each followed by its own
        backward pass: the loss is a sum, so the accumulated gradient is that of the whole
        request, while memory (the logits are tokens x vocabulary) stays bounded whatever the
        request size. Results come back in the order of ``data``.
        """
        adapter = self._adapters.get(name)
        if adapter is None:
            raise EngineUserError(f"training client {name} is gone")
        for index, datum in enumerate(data):
            check_inputs(spec, datum.inputs, len(datum.tokens), index)
        logprobs: list[torch.Tensor] = [torch.empty(0)] * len(data)
        losses: list[torch.Tensor] = [torch.empty(0)] * len(data)
        grad = contextlib.nullcontext() if not forward_only else torch.no_grad()
        with self.use(name) as model, grad:
            budget = max(64, min(MICRO_BATCH_TOKENS, LOGITS_BUDGET // self.vocab_size))
            for indices in micro_batches([len(d.tokens) for d in data], budget):
                group = [data[i] for i in indices]
                group_logprobs = self.token_logprobs(
                    model, [d.tokens for d in group], [d.inputs["target_tokens"] for d in group]
                )
                group_losses = [
                    datum_loss(spec, lp, d.inputs) for lp, d in zip(group_logprobs, group, strict=True)
                ]
                if not forward_only:
                    torch.stack([loss.sum() for loss in group_losses]).sum().backward()
                for index, lp, loss in zip(indices, group_logprobs, group_losses, strict=True):
                    logprobs[index] = lp.detach()
                    losses[index] = loss.detach()
        return ForwardResult(
            logprobs=logprobs,
            elementwise_loss=losses,
            loss_sum=float(sum(loss.sum() for loss in losses)),
        )

    # ----- optimizer ----------------------------------------------------------------------

    @staticmethod
    def _new_optimizer(params: list[torch.nn.Parameter]) -> torch.optim.AdamW:
        return torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0)

    def optim_step(self, name: str, hp: AdamParams) -> dict[str, float]:
        """One AdamW step (torch semantics, decoupled weight decay) on the adapter's gradients."""
        adapter = self._adapters.get(name)
        if adapter is None:
            raise EngineUserError(f"training client {name} is gone")
        if adapter.optimizer is None:
            adapter.optimizer = self._new_optimizer(adapter.params)
        grads = [p.grad for p in adapter.params if p.grad is not None]
        grad_norm = (
            float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
            if grads
            else 0.0
        )
        if hp.grad_clip_norm > 0 and grads and math.isfinite(grad_norm) and grad_norm > hp.grad_clip_norm:
            scale = hp.grad_clip_norm / (grad_norm + 1e-6)
            for g in grads:
                g.mul_(scale)
        for group in adapter.optimizer.param_groups:
            group["lr"] = hp.learning_rate
            group["betas"] = (hp.beta1, hp.beta2)
            group["eps"] = hp.eps
            group["weight_decay"] = hp.weight_decay
        adapter.optimizer.step()
        adapter.optimizer.zero_grad(set_to_none=True)
        adapter.steps += 1
        return {
            "grad_norm:mean": grad_norm,
            "learning_rate:mean": hp.learning_rate,
            "step:max": float(adapter.steps),
        }

    def eos_token_ids(self) -> set[int]:
        """Where a sample ends when the client names no stop: the served tokenizer's stop ids
        (the generation config's and the tokenizer's eos; a tml family's renderer stop ids)."""
        return set(self.tokenizer.stop_token_ids)
