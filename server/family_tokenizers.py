"""The tokenizer the engine uses: Hugging Face or a family's native one, behind one small interface.

The engine needs a tokenizer for two things only: to know the ids that end a sample when the
client names no stop (``stop_token_ids``), and to turn generated ids into text to look for stop
strings (``decode``). A served model directory says which kind it has:

- ``rtc_family.json`` naming a ``tml_renderers`` tokenizer class (``tiny-qwen3``, ``tiny-gpt-oss``,
  ...): the family's native tokenizer from tml-renderers, which has no Hugging Face files. Its
  stop ids are the family renderer's ``stop()`` ids, recorded when the model was built.
- anything else: the directory's Hugging Face tokenizer. Its stop ids are the tokenizer's
  ``eos_token_id`` and the ``eos_token_id`` of ``generation_config.json`` (else of
  ``config.json``), as transformers' ``generate`` would stop (Llama 3.1 Instruct lists
  end_of_text, eom_id and eot_id there).

``decode`` keeps special tokens by default (``<|im_end|>``, ``<|return|>``), as a stop string
is matched against the text the model produced, markers included.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

FAMILY_FILE = "rtc_family.json"


class ServedTokenizer(Protocol):
    """What the engine and the sampler call."""

    @property
    def stop_token_ids(self) -> frozenset[int]: ...

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str: ...


class TmlTokenizer:
    """A ``tml_renderers.tokenizers`` tokenizer (native code, offline, no Hugging Face files)."""

    def __init__(self, class_name: str, stop_token_ids: Sequence[int]):
        from tml_renderers import tokenizers

        cls = getattr(tokenizers, class_name, None)
        if cls is None:
            raise ValueError(f"tml_renderers has no tokenizer {class_name!r}; is tml-renderers up to date?")
        self.name = class_name
        self.native = cls()
        self._stop = frozenset(int(i) for i in stop_token_ids)

    def vocab_size(self) -> int:
        """One past the largest id the tokenizer can produce (ordinary or special).

        Ordinary ids are the BPE ranks 0..n-1; special ids are listed by ``special_tokens()``.
        Raises if some id below that cannot be decoded: a model whose vocabulary has such a hole
        could sample a token the tokenizer (and the client's parser) cannot read.
        """
        native = self.native
        ordinary = 0
        while _decodes(native, ordinary):
            ordinary += 1
        special = max(native.encode_special(name) for name in native.special_tokens())
        size = max(ordinary, special + 1)
        holes = [i for i in range(ordinary, size) if not _decodes(native, i)]
        if holes:
            raise ValueError(f"{self.name}: ids {holes[:5]} below {size} cannot be decoded")
        return size

    @property
    def stop_token_ids(self) -> frozenset[int]:
        return self._stop

    @property
    def eos_token_id(self) -> int:
        return self.native.encode_special(self.native.eos_token)

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        ids = [int(t) for t in token_ids]
        if skip_special_tokens:
            ids = [t for t in ids if not self.native.is_special_token(t)]
        # Lenient: a token holding half of a UTF-8 character decodes to U+FFFD, never an error.
        return self.native.decode(ids)


def _decodes(native, token_id: int) -> bool:
    try:
        native.decode_bytes([token_id])
    except ValueError:
        return False
    return True


class HfTokenizer:
    """A Hugging Face tokenizer directory, with the stop ids of the model's generation config."""

    def __init__(self, model_dir: Path):
        from transformers import AutoTokenizer

        self.hf = AutoTokenizer.from_pretrained(str(model_dir))
        stop: set[int] = set()
        if self.hf.eos_token_id is not None:
            stop.add(int(self.hf.eos_token_id))
        # transformers derives a missing generation config from config.json; so do we.
        for name in ("generation_config.json", "config.json"):
            if (model_dir / name).is_file():
                eos = json.loads((model_dir / name).read_text()).get("eos_token_id")
                if isinstance(eos, int):
                    stop.add(eos)
                elif isinstance(eos, list):
                    stop.update(int(i) for i in eos)
                break
        self._stop = frozenset(stop)

    @property
    def stop_token_ids(self) -> frozenset[int]:
        return self._stop

    @property
    def eos_token_id(self) -> int | None:
        return self.hf.eos_token_id

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.hf.decode(list(token_ids), skip_special_tokens=skip_special_tokens)


def read_family_file(model_dir: Path) -> dict | None:
    """The ``rtc_family.json`` of a family model directory, or None for any other model."""
    path = model_dir / FAMILY_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def load_served_tokenizer(model_dir: Path) -> HfTokenizer | TmlTokenizer:
    """The tokenizer of a served model directory (see the module docstring for which)."""
    family = read_family_file(model_dir)
    if family is not None and family.get("tokenizer"):
        tokenizer = TmlTokenizer(family["tokenizer"], family["stop_token_ids"])
        if tokenizer.vocab_size() != family["vocab_size"]:
            raise ValueError(
                f"{model_dir} was built for a {family['tokenizer']} of {family['vocab_size']} ids; "
                f"the installed tml-renderers has {tokenizer.vocab_size()}: delete {model_dir} to rebuild it"
            )
        return tokenizer
    return HfTokenizer(model_dir)
