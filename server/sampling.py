"""Token generation: sample requests decoded together, as one batch with one KV cache.

A request runs in three phases (the :class:`~rtc.server.scheduler.Scheduler` decides when):

1. **Prefill** (:meth:`Generation.prefill`): the prompt goes through the model alone, in chunks
   of at most :data:`PREFILL_CHUNK` tokens, so a long prompt is several bounded slices of engine
   time. Prompt logprobs, when asked for, are taken chunk by chunk (the logits of a chunk are
   tokens x vocabulary, so the chunk is smaller for large vocabularies).
2. **Join** (:meth:`DecodeBatch.join`): its ``num_samples`` rows join the batch of the weights it
   samples from, next to rows of other prompts. Rows have different lengths: the cache is
   left-padded with zeros that the attention mask hides, and each row has its own position ids,
   so a row computes what it would compute alone (up to the float rounding of batched matmuls).
3. **Decode** (:meth:`DecodeBatch.step`): one step picks a token for every row, then runs the
   model once on all rows. Finished rows leave; new requests join between steps.

Randomness is per request: a ``torch.Generator`` seeded with the request's seed draws
``num_samples`` uniforms per decode step, and inverse-CDF sampling turns them into tokens. What a
request draws depends only on its own state, so the same seed gives the same tokens whether the
request ran alone or in a batch, up to float rounding: a row's logits in a batch equal its logits
alone only to the last bits (the CPU's matmul kernels round differently for different row counts,
and padded attention sums in another order), which changes a draw when its uniform falls within
about 1e-6 of a boundary between two tokens. That is rare for peaked distributions (trained
models; measured in benchmarks/README.md) and frequent only for near-uniform ones. Inverse CDF
(a cumulative sum and a binary search) draws from exactly the distribution ``torch.multinomial``
draws from, at a fraction of its cost.

Logprobs: a sampled token's logprob is taken under the distribution it was drawn from after
temperature scaling, ``log_softmax(logits / temperature)``, before top-k / top-p truncation
(the truncation renormalises over a subset and would make every logprob of a greedy-like
setting 0, which is useless as the behaviour-policy term of importance sampling). At
temperature 1 this is exactly the model's logprob, so it equals what ``compute_logprobs``
returns for the same sequence. Prompt logprobs are always the model's own (temperature 1).
A temperature of 0 means greedy decoding, with temperature-1 logprobs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

# The row the SDK reads as "nothing here" in a top-k matrix.
TOPK_MASK_LOGPROB = -99999.0
DEFAULT_MAX_TOKENS = 256
# Prompt tokens per prefill forward: one slice of engine time.
PREFILL_CHUNK = 256
# With prompt logprobs, a chunk's logits are chunk x vocabulary floats; keep them near 32 MB.
PROMPT_LOGITS_BUDGET = 1 << 23
# A finished row stays in the batch (fed a dummy token) until this fraction of the batch is
# finished: removing a row copies the whole cache, which costs about as much as carrying a few
# dead rows for a few steps.
COMPACT_FRACTION = 8
# Layer types whose attention reads keys and values from the cache in the [rows, heads, length,
# dim] layout that RowCache keeps. Anything else (recurrent or linear attention state) decodes
# each request on its own, in the model's own cache.
BATCHABLE_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "attention"})


@dataclass
class SamplingRequest:
    prompt: list[int]
    num_samples: int
    max_tokens: int | None
    temperature: float
    top_k: int
    top_p: float
    seed: int | None
    stop_strings: list[str]
    stop_token_ids: list[int]
    prompt_logprobs: bool
    topk_prompt_logprobs: int
    prompt_logprobs_last_n: int | None = None  # score only the last N prompt tokens


@dataclass
class SampledSequence:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str  # "stop" or "length"


@dataclass
class SamplingResult:
    sequences: list[SampledSequence]
    prompt_logprobs: list[float] | None = None  # NaN at position 0
    topk_prompt: tuple[torch.Tensor, torch.Tensor] | None = None  # ids [L, K], logprobs [L, K]
    extra: dict[str, object] = field(default_factory=dict)


# ----- the sampling kernel ------------------------------------------------------------------


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask logits outside top-k and the top-p nucleus (per row) with -inf."""
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if 0 < top_p < 1:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the mass before it already reaches top_p; the first always stays.
        drop = (torch.cumsum(probs, dim=-1) - probs) >= top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits


def inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row of ``probs`` [rows, vocab] (unnormalised, >= 0), from ``uniforms`` in [0, 1).

    The token is the first index whose cumulative mass exceeds ``u * total``. A token of zero
    probability never is: its cumulative sum equals its predecessor's, and ``u * total`` is
    kept strictly below the total, so some later index with positive mass always qualifies.
    """
    cdf = torch.cumsum(probs, dim=-1)
    total = cdf[:, -1:]
    target = torch.minimum(
        uniforms[:, None].to(cdf.dtype) * total, torch.nextafter(total, torch.zeros_like(total))
    )
    return torch.searchsorted(cdf, target, right=True)[:, 0].clamp_(max=probs.shape[-1] - 1)


class StopWatcher:
    """Finds the first point at which a row's generated text contains a stop string."""

    def __init__(self, tokenizer, stop_strings: list[str]):
        self.tokenizer = tokenizer
        self.stop_strings = [s for s in stop_strings if s]
        # Only the tail can newly complete a stop string; a token is at least one character.
        self.tail = max((len(s) for s in self.stop_strings), default=0) + 4

    def hit(self, tokens: list[int]) -> bool:
        if not self.stop_strings:
            return False
        text = self.tokenizer.decode(tokens[-self.tail :], skip_special_tokens=False)
        return any(s in text for s in self.stop_strings)


# ----- the KV cache of a batch of rows of different lengths -------------------------------


class RowCacheLayer(CacheLayerMixin):
    """One layer's keys and values, [rows, heads, capacity, dim], written in place.

    HF's DynamicLayer concatenates the whole cache with every new token (a full copy per step);
    this one keeps spare capacity and writes the new column into it. Columns ``start:end`` are
    in use: a row's leading columns are padding (zeros, hidden by the attention mask).
    """

    is_sliding = False

    def __init__(self) -> None:
        super().__init__()
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self.start = 0
        self.end = 0

    # -- the interface attention layers call
    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        q = key_states.shape[-2]
        if self._k is None:
            shape = (key_states.shape[0], key_states.shape[1], max(2 * q, 64), key_states.shape[3])
            self._k = key_states.new_zeros(shape)
            self._v = value_states.new_zeros(shape[:3] + value_states.shape[3:])
        elif self.end + q > self._k.shape[2]:
            self._reallocate(rows=None, left=0, capacity=2 * (self.length + q))
        self._k[:, :, self.end : self.end + q] = key_states
        self._v[:, :, self.end : self.end + q] = value_states
        self.end += q
        return self._refresh()

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1

    # -- batch surgery, used by DecodeBatch
    @property
    def length(self) -> int:
        return self.end - self.start

    def _refresh(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys = self._k[:, :, self.start : self.end]
        self.values = self._v[:, :, self.start : self.end]
        return self.keys, self.values

    def _reallocate(self, rows: torch.Tensor | None, left: int, capacity: int) -> None:
        """Copy the used columns (of ``rows``) into a fresh buffer, after ``left`` zero columns."""
        keys, values = self._k[:, :, self.start : self.end], self._v[:, :, self.start : self.end]
        if rows is not None:
            keys, values = keys[rows], values[rows]
        length = left + keys.shape[2]
        capacity = max(capacity, length)
        self._k = keys.new_zeros((keys.shape[0], keys.shape[1], capacity, keys.shape[3]))
        self._v = values.new_zeros((values.shape[0], values.shape[1], capacity, values.shape[3]))
        self._k[:, :, left:length] = keys
        self._v[:, :, left:length] = values
        self.start, self.end = 0, length
        self._refresh()

    def select(self, rows: torch.Tensor) -> None:
        self._reallocate(rows, 0, self._k.shape[2])

    def trim_left(self, columns: int) -> None:
        self.start += columns
        self._refresh()

    def pad_left(self, columns: int) -> None:
        """Add ``columns`` zero columns before every row (existing rows become shorter ones)."""
        if columns <= 0:
            return
        if self.start >= columns:
            self._k[:, :, self.start - columns : self.start] = 0
            self._v[:, :, self.start - columns : self.start] = 0
            self.start -= columns
            self._refresh()
        else:
            self._reallocate(None, columns, self._k.shape[2] + columns)

    def append_rows(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Add rows whose used columns line up with this layer's (same length)."""
        length = self.length
        capacity = max(self._k.shape[2] - self.start, length + 64)
        old_k, old_v = self._k[:, :, self.start : self.end], self._v[:, :, self.start : self.end]
        rows = old_k.shape[0] + keys.shape[0]
        self._k = old_k.new_zeros((rows, old_k.shape[1], capacity, old_k.shape[3]))
        self._v = old_v.new_zeros((rows, old_v.shape[1], capacity, old_v.shape[3]))
        self._k[: old_k.shape[0], :, :length] = old_k
        self._v[: old_v.shape[0], :, :length] = old_v
        self._k[old_k.shape[0] :, :, :length] = keys
        self._v[old_v.shape[0] :, :, :length] = values
        self.start, self.end = 0, length
        self._refresh()

    def right_aligned(self, rows: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This single-row layer's used columns repeated ``rows`` times and left-padded to ``length``."""
        keys, values = self._k[:, :, self.start : self.end], self._v[:, :, self.start : self.end]
        out_k = keys.new_zeros((rows, keys.shape[1], length, keys.shape[3]))
        out_v = values.new_zeros((rows, values.shape[1], length, values.shape[3]))
        out_k[:, :, length - keys.shape[2] :] = keys
        out_v[:, :, length - values.shape[2] :] = values
        return out_k, out_v


class RowCache(Cache):
    """A cache of :class:`RowCacheLayer`, created lazily as the model's layers first write."""

    def __init__(self) -> None:
        super().__init__(layer_class_to_replicate=RowCacheLayer)

    @property
    def length(self) -> int:
        return self.layers[0].length if self.layers else 0


def batchable(config) -> bool:
    """Whether rows of different prompts can share one :class:`RowCache` for this model."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None)
    if layer_types is None:
        # Models without layer types are plain attention stacks, unless they carry recurrent state.
        return not any(
            hasattr(text, name) for name in ("ssm_state_size", "mamba_d_state", "linear_num_value_heads")
        )
    return set(layer_types) <= BATCHABLE_LAYER_TYPES


def new_cache(model: torch.nn.Module, own: bool):
    """A RowCache, or (``own``) the model's own cache for models RowCache cannot hold."""
    if not own:
        return RowCache()
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


# ----- one request ----------------------------------------------------------------------------


class Generation:
    """One sample request: its prefill progress, its rows' tokens, and its random stream."""

    def __init__(self, request: SamplingRequest, tokenizer, max_length: int, own_cache: bool = False):
        self.request = request
        self.n = request.num_samples
        self.own_cache = own_cache
        prompt_length = len(request.prompt)
        wanted = request.max_tokens if request.max_tokens is not None else DEFAULT_MAX_TOKENS
        self.max_tokens = max(0, min(wanted, max_length - prompt_length))
        self.generator = torch.Generator()
        if request.seed is not None:
            # Any integer is a seed; the generator takes 64 bits.
            self.generator.manual_seed(int(request.seed) % (1 << 64))
        else:
            self.generator.seed()
        self.greedy = request.temperature <= 0
        self.temperature = 1.0 if self.greedy else float(request.temperature)
        self.filtered = not self.greedy and (0 < request.top_k or 0 < request.top_p < 1)
        self.stop_ids = set(request.stop_token_ids)
        self.watcher = StopWatcher(tokenizer, request.stop_strings)
        self.tokens: list[list[int]] = [[] for _ in range(self.n)]
        self.logprobs: list[list[float]] = [[] for _ in range(self.n)]
        self.reasons = ["length"] * self.n
        self.done = [False] * self.n
        self.live_rows = self.n
        self.cancelled = False
        self.prefilled = 0
        self.cache = None
        self.next_logits: torch.Tensor | None = None  # [1, vocab] once the prompt is in
        self.result = SamplingResult(sequences=[])
        self._scoring = request.prompt_logprobs or request.topk_prompt_logprobs > 0
        # Prompt positions whose next-token logprob is reported (those before stay NaN / masked).
        skip = prompt_length - (request.prompt_logprobs_last_n or prompt_length - 1)
        self._score_from = max(0, skip - 1) if self._scoring else prompt_length - 1
        self._picked: torch.Tensor | None = None
        self._topk: tuple[torch.Tensor, torch.Tensor] | None = None
        # Set by the scheduler.
        self.owner: str | None = None
        self.future = None

    @property
    def prompt_done(self) -> bool:
        return self.prefilled >= len(self.request.prompt)

    def chunk_size(self, vocab_size: int) -> int:
        if not self._scoring:
            return PREFILL_CHUNK
        return max(16, min(PREFILL_CHUNK, PROMPT_LOGITS_BUDGET // max(1, vocab_size)))

    @torch.no_grad()
    def prefill(self, model: torch.nn.Module, vocab_size: int) -> int:
        """Run the next chunk of the prompt; returns the number of prompt tokens it took."""
        prompt = self.request.prompt
        length = len(prompt)
        a = self.prefilled
        b = min(length, a + self.chunk_size(vocab_size))
        if self.cache is None:
            self.cache = new_cache(model, self.own_cache)
        # Logits are needed from position score_from on (prompt logprobs) and at the last position.
        keep = max(1, b - max(a, self._score_from))
        out = model(
            input_ids=torch.tensor([prompt[a:b]], dtype=torch.long),
            position_ids=torch.arange(a, b, dtype=torch.long)[None],
            cache=self.cache,
            use_cache=True,
            logits_to_keep=keep,
        )
        logits = out.logits[0, -keep:].float()
        if self._scoring:
            self._score(logits, b - keep, b)
        self.prefilled = b
        if b == length:
            self.next_logits = logits[-1:]
            self._finish_prompt_scores()
        return b - a

    def _score(self, logits: torch.Tensor, first: int, end: int) -> None:
        """Prompt logprobs of positions ``first:end`` (logits of those positions given)."""
        prompt = self.request.prompt
        length = len(prompt)
        if self._picked is None:
            self._picked = torch.full((length,), float("nan"))
            k = min(self.request.topk_prompt_logprobs, logits.shape[-1])
            self._topk = (
                torch.zeros((length, k), dtype=torch.long),
                torch.full((length, k), TOPK_MASK_LOGPROB),
            )
        lo, hi = max(first, self._score_from), min(end, length - 1)
        if hi <= lo:
            return
        logsoftmax = torch.log_softmax(logits[lo - first : hi - first], dim=-1)
        targets = torch.tensor(prompt[lo + 1 : hi + 1], dtype=torch.long)
        if self.request.prompt_logprobs:
            self._picked[lo + 1 : hi + 1] = logsoftmax.gather(1, targets[:, None])[:, 0]
        if self.request.topk_prompt_logprobs > 0:
            values, ids = torch.topk(logsoftmax, self._topk[0].shape[1], dim=-1)
            self._topk[0][lo + 1 : hi + 1] = ids
            self._topk[1][lo + 1 : hi + 1] = values

    def _finish_prompt_scores(self) -> None:
        if not self._scoring:
            return
        if self._picked is None:  # a one-token prompt: nothing to score
            self._score(torch.zeros((0, 1)), 0, 0)
        if self.request.prompt_logprobs:
            self.result.prompt_logprobs = self._picked.tolist()
        if self.request.topk_prompt_logprobs > 0:
            self.result.topk_prompt = self._topk

    def uniforms(self) -> torch.Tensor:
        """This step's draws: one per sample, finished or not, so the stream never depends on
        which rows are still running or on what else is in the batch."""
        return torch.rand(self.n, generator=self.generator)

    def record(self, row: int, token: int, logprob: float) -> bool:
        """Append a sampled token to a row; True when the row is finished."""
        tokens = self.tokens[row]
        tokens.append(token)
        self.logprobs[row].append(logprob)
        if token in self.stop_ids or self.watcher.hit(tokens):
            self.reasons[row] = "stop"
        elif len(tokens) < self.max_tokens:
            return False
        self.done[row] = True
        self.live_rows -= 1
        return True

    def finished_result(self) -> SamplingResult:
        self.result.sequences = [
            SampledSequence(self.tokens[row], self.logprobs[row], self.reasons[row]) for row in range(self.n)
        ]
        self.cache = None
        return self.result


# ----- the batch --------------------------------------------------------------------------------


@dataclass
class _Row:
    gen: Generation
    index: int  # which of the request's samples
    live: bool = True


class DecodeBatch:
    """Rows of any number of requests that sample from the same weights, and their KV cache."""

    def __init__(self, own_cache: bool = False):
        self.own_cache = own_cache
        self.rows: list[_Row] = []
        self.cache = None
        self.pad = torch.zeros(0, dtype=torch.long)  # leading padding columns per row
        self.next_logits: torch.Tensor | None = None  # [rows, vocab]
        self.steps = 0

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def generations(self) -> list[Generation]:
        seen: dict[int, Generation] = {}
        for row in self.rows:
            seen.setdefault(id(row.gen), row.gen)
        return list(seen.values())

    @property
    def length(self) -> int:
        return self.cache.length if isinstance(self.cache, RowCache) else self.cache.get_seq_length()

    def join(self, gens: list[Generation]) -> None:
        """Add the rows of requests whose prompts are in their own (single-row) caches."""
        gens = [g for g in gens if g.n > 0]
        if not gens:
            return
        if self.own_cache:
            if self.rows or len(gens) != 1:
                raise ValueError("a batch in the model's own cache holds one request")
            gen = gens[0]
            gen.cache.batch_repeat_interleave(gen.n)
            self.cache = gen.cache
            self.rows = [_Row(gen, i) for i in range(gen.n)]
            self.pad = torch.zeros(gen.n, dtype=torch.long)
            self.next_logits = gen.next_logits.expand(gen.n, -1).clone()
            gen.cache = None
            return
        current = self.length if self.rows else 0
        target = max([current] + [g.cache.length for g in gens])
        if not self.rows:
            self.cache = RowCache()
            self.next_logits = None
        new_k: list[list[torch.Tensor]] = []
        new_v: list[list[torch.Tensor]] = []
        for gen in gens:
            for index, layer in enumerate(gen.cache.layers):
                keys, values = layer.right_aligned(gen.n, target)
                if index == len(new_k):
                    new_k.append([])
                    new_v.append([])
                new_k[index].append(keys)
                new_v[index].append(values)
        if self.rows:
            for layer in self.cache.layers:
                layer.pad_left(target - current)
            for layer, keys, values in zip(self.cache.layers, new_k, new_v, strict=True):
                layer.append_rows(torch.cat(keys), torch.cat(values))
            self.pad = self.pad + (target - current)
        else:
            for keys, values in zip(new_k, new_v, strict=True):
                layer = RowCacheLayer()
                layer.is_initialized = True
                layer._k, layer._v = torch.cat(keys), torch.cat(values)
                layer.start, layer.end = 0, target
                layer._refresh()
                self.cache.layers.append(layer)
        pads = [torch.full((g.n,), target - g.cache.length, dtype=torch.long) for g in gens]
        self.pad = torch.cat([self.pad, *pads])
        logits = [g.next_logits.expand(g.n, -1) for g in gens]
        self.next_logits = torch.cat(([self.next_logits] if self.next_logits is not None else []) + logits)
        for gen in gens:
            self.rows += [_Row(gen, i) for i in range(gen.n)]
            gen.cache = None

    def drop_cancelled(self) -> None:
        for row in self.rows:
            if row.live and row.gen.cancelled:
                row.live = False

    def _choose(self) -> tuple[list[int], list[float]]:
        """A token and its logprob for every row, from ``next_logits``.

        One softmax of ``logits / temperature`` gives both the probabilities to draw from and,
        at the drawn token, its logprob (greedy rows use temperature 1).
        """
        logits = self.next_logits
        temps = torch.tensor([row.gen.temperature for row in self.rows], dtype=logits.dtype)
        scaled = logits if bool((temps == 1).all()) else logits / temps[:, None]
        probs = torch.softmax(scaled, dim=-1)
        positions: dict[int, list[int]] = {}
        for position, row in enumerate(self.rows):
            positions.setdefault(id(row.gen), []).append(position)
        draws = torch.zeros(len(self.rows))
        greedy: list[int] = []
        sampling = probs
        for gen in self.generations:
            rows = positions[id(gen)]
            if gen.greedy:
                greedy += rows
                continue
            draws[rows] = gen.uniforms()[[self.rows[p].index for p in rows]]
            if gen.filtered:
                if sampling is probs:
                    sampling = probs.clone()
                kept = filter_logits(scaled[rows], gen.request.top_k, gen.request.top_p)
                sampling[rows] = torch.softmax(kept, dim=-1)
        chosen = inverse_cdf(sampling, draws)
        if greedy:
            chosen[greedy] = logits[greedy].argmax(dim=-1)
        logprobs = probs.gather(1, chosen[:, None])[:, 0].log()
        return chosen.tolist(), logprobs.tolist()

    @torch.no_grad()
    def step(self, model: torch.nn.Module) -> list[Generation]:
        """Pick one token per row, then run the model on the rows still going.

        Returns the requests that finished in this step.
        """
        self.drop_cancelled()
        finished: list[Generation] = []
        if any(row.live for row in self.rows):
            tokens, logprobs = self._choose()
            for row, token, logprob in zip(self.rows, tokens, logprobs, strict=True):
                if not row.live:
                    continue
                if row.gen.record(row.index, token, logprob):
                    row.live = False
                    if row.gen.live_rows == 0:
                        finished.append(row.gen)
        else:
            tokens = [0] * len(self.rows)
        self.steps += 1
        dead = sum(not row.live for row in self.rows)
        if dead == len(self.rows):
            self.rows = []
            self.cache = None
            self.next_logits = None
            self.pad = torch.zeros(0, dtype=torch.long)
            return finished
        if dead and not self.own_cache and dead * COMPACT_FRACTION >= len(self.rows):
            keep = [i for i, row in enumerate(self.rows) if row.live]
            self._select(keep)
            tokens = [tokens[i] for i in keep]
        self._forward(model, tokens)
        return finished

    def _select(self, keep: list[int]) -> None:
        index = torch.tensor(keep, dtype=torch.long)
        self.rows = [self.rows[i] for i in keep]
        self.pad = self.pad[index]
        self.next_logits = self.next_logits[index]
        for layer in self.cache.layers:
            layer.select(index)
        # Columns that are padding in every remaining row are dropped.
        trim = int(self.pad.min())
        if trim:
            for layer in self.cache.layers:
                layer.trim_left(trim)
            self.pad = self.pad - trim

    def _forward(self, model: torch.nn.Module, tokens: list[int]) -> None:
        length = self.length
        columns = torch.arange(length + 1)
        mask = (columns[None, :] >= self.pad[:, None]).long()
        positions = (length - self.pad)[:, None]
        out = model(
            input_ids=torch.tensor(tokens, dtype=torch.long)[:, None],
            attention_mask=mask,
            position_ids=positions,
            cache=self.cache,
            use_cache=True,
        )
        self.next_logits = out.logits[:, -1].float()


def generate(
    model: torch.nn.Module,
    tokenizer,
    request: SamplingRequest,
    max_length: int,
    own_cache: bool | None = None,
) -> SamplingResult:
    """Run one request to the end, alone (for in-process use; the server batches requests)."""
    return generate_many(model, tokenizer, [request], max_length, own_cache)[0]


def generate_many(
    model: torch.nn.Module,
    tokenizer,
    requests: list[SamplingRequest],
    max_length: int,
    own_cache: bool | None = None,
    on_step: Callable[[DecodeBatch], None] | None = None,
) -> list[SamplingResult]:
    """Run requests to the end in one batch (joined together after their prefills)."""
    if own_cache is None:
        own_cache = not batchable(model.config)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    gens = [Generation(r, tokenizer, max_length, own_cache) for r in requests]
    for gen in gens:
        while not gen.prompt_done:
            gen.prefill(model, vocab)
    groups = [[g] for g in gens] if own_cache else [gens]
    for group in groups:
        running = [g for g in group if g.max_tokens > 0]
        batch = DecodeBatch(own_cache)
        batch.join(running)
        while batch.rows:
            batch.step(model)
            if on_step is not None:
                on_step(batch)
    return [g.finished_result() for g in gens]
