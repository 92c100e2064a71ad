"""Tiny family models: random weights, a real model family's vocabulary, special tokens and format.

``rtc serve --model tiny-qwen3`` (and ``tiny-qwen35``, ``tiny-nemotron3``, ``tiny-gpt-oss``,
``tiny-deepseek``, ``tiny-llama3``) serves a Llama-architecture model of about 64 hidden units and
2 layers whose token ids are those of the family's real tokenizer. The weights are random, so
what it says is noise, but every token a client renders in that family's format (special
tokens, channels, think blocks, stop tokens) is a valid id with its true meaning, and a loop
that trains and samples it exercises the family's real format end to end through the SDK.

- The five tml families take their tokenizer from Thinking Machines' ``tml_renderers`` (native
  code, offline). The vocabulary size is one past the largest id that tokenizer can produce,
  ordinary or special (see :meth:`~server.family_tokenizers.TmlTokenizer.vocab_size`), so the
  random model can only sample ids the client's tokenizer and parser can read; the default stop
  ids are the family renderer's ``stop()``.
- ``tiny-llama3``: tml-renderers has no Llama 3 tokenizer and none can be downloaded here, so it
  gets a small byte-level BPE trained offline, laid out like Llama 3's Hugging Face tokenizer
  (its pre-tokenizer regex, ``<|begin_of_text|>`` prepended on encode), carrying all 256 of
  Llama 3.1's special tokens by name (their ids follow the small vocabulary, not 128000+) and
  Llama 3.1 Instruct's chat template, saved as a directory ``AutoTokenizer`` loads offline.

A family model serves any base model of its family in rtc's catalog (the names whose catalog
``tokenizer`` is the model's tml tokenizer; for ``tiny-llama3`` the ``llama`` family) and refuses
every other name, so a loop can never run one family's format against another's vocabulary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# Bump when the recipe below changes, so stale caches are not reused.
FAMILY_VERSION = "v1"
HIDDEN_SIZE = 64
LAYERS = 2
# Room for the cards' longest prompt + completion (thinking models sample up to 2048 tokens).
CONTEXT = 8192


@dataclass(frozen=True)
class FamilyModel:
    """One ``tiny-<family>`` model: which catalog models it serves and with which tokenizer."""

    name: str
    family: str  # the catalog's family
    tokenizer: str | None  # tml_renderers.tokenizers class; None: the Hugging Face tokenizer built here
    renderer: str | None  # tml_renderers.renderers class whose stop() ends a sample by default
    example: str  # a base model it serves (help text, tests)

    @property
    def label(self) -> str:
        return _tokenizer_phrase(self.tokenizer, self.family)

    def serves(self, base_model: str) -> bool:
        model = _catalog_models().get(base_model)
        if model is None:
            return False
        if self.tokenizer is None:
            return model.tokenizer is None and model.family == self.family
        return model.tokenizer == self.tokenizer

    def served_names(self) -> list[str]:
        """Every catalog name this model serves, in catalog order."""
        return [name for name in _catalog_models() if self.serves(name)]

    def refusal(self, base_model: str) -> str | None:
        """Why ``base_model`` cannot be served by this model, with what to do instead; None if it can."""
        if self.serves(base_model):
            return None
        shown = repr(base_model) if len(base_model) <= 200 else repr(base_model[:200]) + "..."
        names = ", ".join(self.served_names())
        head = f"rtc serve --model {self.name} serves only models with {self.label} ({names})"
        model = _catalog_models().get(base_model)
        if model is None:
            return (
                f"{head}; {shown} is not in rtc's model catalog (rtc list models), so its "
                "family is unknown: start rtc serve --model tiny or smollm2 to serve any name"
            )
        other = next((f for f in FAMILY_MODELS.values() if f.serves(base_model)), None)
        fix = (
            f"start rtc serve --model {other.name}"
            if other is not None
            else "no tiny model has its tokenizer; start rtc serve --model tiny or smollm2"
        )
        return f"{head}; {shown} has {_tokenizer_phrase(model.tokenizer, model.family)}: {fix}"


def _tokenizer_phrase(tokenizer: str | None, family: str) -> str:
    return f"the {tokenizer} tokenizer" if tokenizer else f"the {family} family's Hugging Face tokenizer"


FAMILY_MODELS: dict[str, FamilyModel] = {
    spec.name: spec
    for spec in (
        FamilyModel("tiny-qwen3", "qwen", "Qwen3Tokenizer", "Qwen3", "Qwen/Qwen3-8B"),
        FamilyModel("tiny-qwen35", "qwen", "Qwen35Tokenizer", "Qwen35", "Qwen/Qwen3.5-4B"),
        FamilyModel(
            "tiny-nemotron3",
            "nemotron",
            "Nemotron3Tokenizer",
            "Nemotron3",
            "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
        ),
        FamilyModel("tiny-gpt-oss", "gpt-oss", "HarmonyTokenizer", "GptOss", "openai/gpt-oss-20b"),
        FamilyModel(
            "tiny-deepseek", "deepseek", "DeepSeekV31Tokenizer", "DeepSeekV31", "deepseek-ai/DeepSeek-V3.1"
        ),
        FamilyModel("tiny-llama3", "llama", None, None, "meta-llama/Llama-3.1-8B-Instruct"),
    )
}


def _catalog_models():
    from rtc.catalog import load_catalog

    return load_catalog().models


def cache_name(spec: FamilyModel) -> str:
    """The cache directory name; it carries the tml-renderers version the vocabulary came from."""
    if spec.tokenizer is None:
        return f"{spec.name}-{FAMILY_VERSION}"
    from importlib.metadata import version

    return f"{spec.name}-{FAMILY_VERSION}-tml{version('tml-renderers')}"


# ----- building ---------------------------------------------------------------------------------


def build_family_model(spec: FamilyModel, out_dir: Path) -> None:
    """Write the tiny model of ``spec`` (weights, config, tokenizer or its description) to ``out_dir``.

    Deterministic: the same versions build the same weights on every machine.
    """
    if spec.tokenizer is None:
        _build_llama3(spec, out_dir)
    else:
        _build_tml(spec, out_dir)


def _build_tml(spec: FamilyModel, out_dir: Path) -> None:
    from tml_renderers import renderers

    from .family_tokenizers import FAMILY_FILE, TmlTokenizer

    renderer = getattr(renderers, spec.renderer)()
    stop = renderer.stop()
    if not (isinstance(stop, list) and stop and all(isinstance(i, int) for i in stop)):
        raise ValueError(f"{spec.renderer}.stop() is {stop!r}, expected token ids")
    tokenizer = TmlTokenizer(spec.tokenizer, stop)
    vocab_size = tokenizer.vocab_size()
    native = tokenizer.native
    bos = native.encode_special(native.bos_token) if native.bos_token else None
    _save_random_llama(out_dir, vocab_size, bos_token_id=bos, eos_token_ids=sorted(stop))
    family = {
        "name": spec.name,
        "family": spec.family,
        "tokenizer": spec.tokenizer,
        "renderer": spec.renderer,
        "vocab_size": vocab_size,
        "stop_token_ids": sorted(stop),
    }
    (out_dir / FAMILY_FILE).write_text(json.dumps(family, indent=2) + "\n")


def _save_random_llama(
    out_dir: Path, vocab_size: int, bos_token_id: int | None, eos_token_ids: list[int], pad_token_id=None
) -> None:
    """A 2-layer, 64-wide Llama, seeded for reproducibility, stored in bfloat16.

    The embeddings hold nearly all the weights (a 248k-token vocabulary is 16M parameters per
    copy) but stay untied: with tied embeddings, a LoRA adapter on the unembedding makes peft
    save the whole embedding matrix into every checkpoint. bfloat16 halves the files; the
    server loads them as float32, so the weights are exactly the stored bfloat16 values.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=2 * HIDDEN_SIZE,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        tie_word_embeddings=False,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_ids,
        pad_token_id=pad_token_id,
        initializer_range=0.1,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = eos_token_ids
    model.generation_config.bos_token_id = bos_token_id
    model.to(torch.bfloat16).save_pretrained(out_dir)


# ----- tiny-llama3's tokenizer --------------------------------------------------------------------

# Llama 3's pre-tokenizer split (tiktoken's cl100k pattern with digits in groups of up to three).
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Llama 3.1's 256 special tokens, in id order (128000..128255 in the real vocabulary).
LLAMA3_SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
    *[f"<|reserved_special_token_{i}|>" for i in range(3, 248)],
]

# Llama 3.1 Instruct's chat template, as meta-llama/Llama-3.1-8B-Instruct's tokenizer_config.json
# ships it (system header with the knowledge cutoff and date, tools in the first user message,
# one tool call per turn, ipython results), in a file beside this module.
LLAMA31_CHAT_TEMPLATE_FILE = "llama31_chat_template.jinja"


def llama31_chat_template() -> str:
    from importlib.resources import files

    return files(__package__).joinpath(LLAMA31_CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")


# What the BPE learns merges from: the template's own words and a little varied text.
_LLAMA3_CORPUS = """\
system user assistant ipython Environment: ipython Tools: brave_search, wolfram_alpha
Cutting Knowledge Date: December 2023
Today Date: 26 Jul 2024
You are a helpful assistant. Given the following functions, please respond with a JSON for a function call
with its proper arguments that best answers the given prompt. Do not use variables.
Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.
"""


def _build_llama3(spec: FamilyModel, out_dir: Path) -> None:
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    from .family_tokenizers import FAMILY_FILE
    from .models import TINY_CORPUS

    bpe = Tokenizer(models.BPE(ignore_merges=True))
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator((_LLAMA3_CORPUS + TINY_CORPUS).splitlines(), trainer=trainer)
    bpe.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in LLAMA3_SPECIAL_TOKENS])
    bos = bpe.token_to_id("<|begin_of_text|>")
    bpe.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A",
                pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                special_tokens=[("<|begin_of_text|>", bos)],
            ),
        ]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        chat_template=llama31_chat_template(),
        model_max_length=CONTEXT,
        # Llama 3 says True; transformers 5 ignores it for BPE (with a warning) either way.
        clean_up_tokenization_spaces=False,
    )
    # Llama 3.1 Instruct's generation config stops on end_of_text, eom_id and eot_id.
    stop = [tokenizer.convert_tokens_to_ids(t) for t in ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")]
    _save_random_llama(out_dir, len(tokenizer), bos_token_id=bos, eos_token_ids=stop)
    tokenizer.save_pretrained(out_dir)
    family = {
        "name": spec.name,
        "family": spec.family,
        "tokenizer": None,
        "renderer": None,
        "vocab_size": len(tokenizer),
        "stop_token_ids": stop,
    }
    (out_dir / FAMILY_FILE).write_text(json.dumps(family, indent=2) + "\n")
