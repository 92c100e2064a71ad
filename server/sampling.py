"""Token generation with per-token logprobs, stop conditions and prompt logprobs.

``num_samples`` copies of the prompt run as one batch with a KV cache; they share the prompt,
so no padding is needed, and a finished row simply stops being read.

Logprobs: a sampled token's logprob is taken under the distribution it was drawn from after
temperature scaling, ``log_softmax(logits / temperature)``, before top-k / top-p truncation
(the truncation renormalises over a subset and would make every logprob of a greedy-like
setting 0, which is useless as the behaviour-policy term of importance sampling). At
temperature 1 this is exactly the model's logprob, so it equals what ``compute_logprobs``
returns for the same sequence. Prompt logprobs are always the model's own (temperature 1).
A temperature of 0 means greedy decoding, with temperature-1 logprobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

# The row the SDK reads as "nothing here" in a top-k matrix.
TOPK_MASK_LOGPROB = -99999.0
DEFAULT_MAX_TOKENS = 256


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


def _filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
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


class _StopWatcher:
    """Finds the first point at which a row's generated text contains a stop string."""

    def __init__(self, tokenizer, stop_strings: list[str]):
        self.tokenizer = tokenizer
        self.stop_strings = [s for s in stop_strings if s]

    def hit(self, tokens: list[int]) -> bool:
        if not self.stop_strings:
            return False
        # Only the tail can newly complete a stop string.
        tail_tokens = max(len(s) for s in self.stop_strings) + 4
        text = self.tokenizer.decode(tokens[-tail_tokens:], skip_special_tokens=False)
        return any(s in text for s in self.stop_strings)


@torch.no_grad()
def generate(model: torch.nn.Module, tokenizer, request: SamplingRequest, max_length: int) -> SamplingResult:
    prompt = torch.tensor([request.prompt], dtype=torch.long)
    room = max_length - len(request.prompt)
    max_tokens = request.max_tokens if request.max_tokens is not None else DEFAULT_MAX_TOKENS
    max_tokens = max(0, min(max_tokens, room))
    generator = torch.Generator()
    if request.seed is not None:
        generator.manual_seed(int(request.seed))
    else:
        generator.seed()

    out = model(input_ids=prompt, use_cache=True)
    logits_all = out.logits[0].float()
    result = SamplingResult(sequences=[])
    if request.prompt_logprobs or request.topk_prompt_logprobs > 0:
        logsoftmax = torch.log_softmax(logits_all[:-1], dim=-1)
        # Positions before `skip` are left unscored: NaN, or the top-k "nothing here" row.
        skip = len(request.prompt) - (request.prompt_logprobs_last_n or len(request.prompt) - 1)
        if request.prompt_logprobs:
            picked = logsoftmax.gather(1, prompt[0, 1:, None])[:, 0]
            picked[: skip - 1] = float("nan")
            result.prompt_logprobs = [float("nan"), *picked.tolist()]
        if request.topk_prompt_logprobs > 0:
            k = min(request.topk_prompt_logprobs, logsoftmax.shape[-1])
            values, ids = torch.topk(logsoftmax, k, dim=-1)
            ids = torch.cat([torch.zeros((1, k), dtype=ids.dtype), ids])
            values = torch.cat([torch.full((1, k), TOPK_MASK_LOGPROB), values])
            ids[:skip] = 0
            values[:skip] = TOPK_MASK_LOGPROB
            result.topk_prompt = (ids, values)

    n = request.num_samples
    past = out.cache
    if n > 1:
        past = _repeat_cache(past, n)
    next_logits = logits_all[-1:].expand(n, -1)
    tokens: list[list[int]] = [[] for _ in range(n)]
    logprobs: list[list[float]] = [[] for _ in range(n)]
    done = [False] * n
    reasons = ["length"] * n
    stop_ids = set(request.stop_token_ids)
    watcher = _StopWatcher(tokenizer, request.stop_strings)
    attention = torch.ones((n, len(request.prompt)), dtype=torch.long)

    for _ in range(max_tokens):
        if request.temperature <= 0:
            chosen = next_logits.argmax(dim=-1)
            scaled = torch.log_softmax(next_logits, dim=-1)
        else:
            scaled = torch.log_softmax(next_logits / request.temperature, dim=-1)
            filtered = _filter_logits(scaled, request.top_k, request.top_p)
            probs = torch.softmax(filtered, dim=-1)
            chosen = torch.multinomial(probs, 1, generator=generator)[:, 0]
        chosen_logprobs = scaled.gather(1, chosen[:, None])[:, 0]
        for row in range(n):
            if done[row]:
                continue
            token = int(chosen[row])
            tokens[row].append(token)
            logprobs[row].append(float(chosen_logprobs[row]))
            if token in stop_ids or watcher.hit(tokens[row]):
                done[row] = True
                reasons[row] = "stop"
        if all(done):
            break
        attention = torch.cat([attention, torch.ones((n, 1), dtype=torch.long)], dim=1)
        out = model(input_ids=chosen[:, None], attention_mask=attention, cache=past, use_cache=True)
        past = out.cache
        next_logits = out.logits[:, -1].float()

    result.sequences = [SampledSequence(tokens[row], logprobs[row], reasons[row]) for row in range(n)]
    return result


def _repeat_cache(past, n: int):
    """Repeat a batch-1 KV cache ``n`` times along the batch dimension."""
    if hasattr(past, "batch_repeat_interleave"):
        past.batch_repeat_interleave(n)
        return past
    return tuple(tuple(t.repeat_interleave(n, dim=0) for t in layer) for layer in past)
