"""The engine thread: training work and batched sampling, interleaved in bounded slices.

All torch work runs on one thread, so the engine never sees two operations at once and HTTP
never waits for torch. The thread loops over ticks; one tick is:

1. the next queued **job** (create, load, save or delete an adapter, ``forward_backward``,
   ``optim_step``, a sampler snapshot), run to its end;
2. **prefill** of waiting sample requests, up to :data:`PREFILL_TOKENS_PER_TICK` prompt tokens
   (a long prompt is prefilled over several ticks, in chunks);
3. requests whose prompt is in **join** the decode batch of the weights they sample from, so
   requests that arrive together (a GRPO step's, an eval's) decode as one batch;
4. each decode batch runs **decode steps** for :data:`DECODE_SLICE_S` seconds (at least one step).

So a request or a job waits at most about one tick: a long sampling request cannot starve a short
one or a training step, and a training step delays sampling by its own length only. The bound of
a tick is the sum of its parts: one job (bounded by the request-size limits of the HTTP layer),
one prefill budget, and one decode slice per batch (a decode step is bounded by
:data:`MAX_BATCH_ROWS`).

A batch holds at most :data:`MAX_BATCH_ROWS` rows and :data:`KV_BUDGET_BYTES` of KV cache
(counted as rows x (prompt + max_tokens)); a request that does not fit waits for rows to leave.
A request too large for the budget on its own still runs, alone.

Work has an **owner** (the session that asked for it). :meth:`Scheduler.cancel` drops an owner's
queued jobs and its waiting, prefilling and decoding sample requests, whose futures then fail with
:class:`WorkCancelled`; a job that is already running finishes first. The HTTP layer calls it
when a session finishes or goes silent, so the work of a client that has gone is dropped.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import torch

from .sampling import DecodeBatch, Generation, SamplingRequest

log = logging.getLogger("rtc.serve")

PREFILL_TOKENS_PER_TICK = 512
DECODE_SLICE_S = 0.25
MAX_BATCH_ROWS = 64
KV_BUDGET_BYTES = 1 << 30


class WorkCancelled(Exception):
    """The work was dropped before it ran (its owner went away, or the server is stopping)."""


@dataclass
class _Job:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    owner: Hashable | None
    future: concurrent.futures.Future


@dataclass
class _Pending:
    """A sample request and the weights it samples from (``adapter`` None: the base model)."""

    gen: Generation
    adapter: str | None
    key: Hashable


@dataclass
class _Batch:
    key: Hashable
    adapter: str | None
    open: Callable[[], torch.nn.Module]  # the weights, ready to run (selects a peft adapter)
    decode: DecodeBatch
    prefilling: list[_Pending] = field(default_factory=list)
    ready: list[_Pending] = field(default_factory=list)

    def committed(self) -> tuple[int, int]:
        """Rows and KV tokens that this batch holds or has promised to prefilled requests."""
        gens = self.decode.generations + [p.gen for p in self.prefilling + self.ready]
        rows = sum(g.n for g in gens)
        tokens = sum(g.n * (len(g.request.prompt) + g.max_tokens) for g in gens)
        return rows, tokens


def _settle(
    future: concurrent.futures.Future, result: Any = None, error: BaseException | None = None
) -> None:
    """Resolve a future unless it is already done (cancelled by its waiter, or by cancel())."""
    if future.done():
        return
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass


class Scheduler:
    """Owns the engine thread; submit work from any thread, results come back as futures.

    ``engine`` provides ``tokenizer``, ``max_length``, ``vocab_size``, ``batchable`` (rows of
    different prompts can share a cache), ``kv_bytes_per_token`` and ``sampling_weights(adapter)``
    (a callable that returns the model to sample from, ready to run).
    """

    def __init__(self, engine, slice_s: float = DECODE_SLICE_S, max_rows: int = MAX_BATCH_ROWS):
        self.engine = engine
        self.slice_s = slice_s
        self.max_rows = max_rows
        self._cond = threading.Condition()
        self._jobs: collections.deque[_Job] = collections.deque()
        self._incoming: collections.deque[_Pending] = collections.deque()
        self._closed = False
        # Decode steps run and the rows they carried (rows / steps = the batch size achieved).
        self.stats = {"decode_steps": 0, "decode_rows": 0, "max_rows": 0}
        # Engine-thread state.
        self._waiting: list[_Pending] = []
        self._batches: dict[Hashable, _Batch] = {}
        self._thread = threading.Thread(target=self._run, name="rtc-engine", daemon=True)
        self._thread.start()

    # ----- any thread -------------------------------------------------------------------------

    def submit(
        self, fn: Callable[..., Any], *args: Any, owner: Hashable | None = None
    ) -> concurrent.futures.Future:
        """Run ``fn(*args)`` on the engine thread, in submission order among jobs."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._cond:
            if self._closed:
                future.set_exception(WorkCancelled("the server is stopping"))
                return future
            self._jobs.append(_Job(fn, args, owner, future))
            self._cond.notify()
        return future

    def sample(
        self, request: SamplingRequest, adapter: str | None, owner: Hashable | None = None
    ) -> concurrent.futures.Future:
        """Decode ``request`` from the base model (``adapter`` None) or a sampler adapter."""
        engine = self.engine
        gen = Generation(request, engine.tokenizer, engine.max_length, own_cache=not engine.batchable)
        gen.owner = owner
        gen.future = concurrent.futures.Future()
        key: Hashable = adapter if engine.batchable else ("alone", id(gen))
        with self._cond:
            if self._closed:
                gen.future.set_exception(WorkCancelled("the server is stopping"))
                return gen.future
            self._incoming.append(_Pending(gen, adapter, key))
            self._cond.notify()
        return gen.future

    def cancel(self, owner: Hashable) -> int:
        """Drop everything ``owner`` asked for that has not finished; returns how many."""
        error = WorkCancelled(f"dropped: {owner} has gone")
        dropped = 0
        with self._cond:
            kept = collections.deque()
            for job in self._jobs:
                if job.owner == owner:
                    _settle(job.future, error=error)
                    dropped += 1
                else:
                    kept.append(job)
            self._jobs = kept
            for pending in list(self._incoming):
                if pending.gen.owner == owner:
                    self._incoming.remove(pending)
                    _settle(pending.gen.future, error=error)
                    dropped += 1
            # Requests the engine thread already holds: it drops them at its next step.
            for pending in self._engine_side():
                gen = pending.gen
                if gen.owner == owner and not gen.cancelled and not gen.future.done():
                    gen.cancelled = True
                    _settle(gen.future, error=error)
                    dropped += 1
            self._cond.notify()
        if dropped:
            log.info("dropped %d queued or running requests of %s", dropped, owner)
        return dropped

    def _engine_side(self) -> list[_Pending]:
        # Lists are copied: the engine thread may change them while this runs.
        out = list(self._waiting)
        for batch in list(self._batches.values()):
            out += list(batch.prefilling) + list(batch.ready)
            out += [_Pending(g, batch.adapter, batch.key) for g in batch.decode.generations]
        return out

    def close(self) -> None:
        """Stop the thread after the current slice; everything pending fails with WorkCancelled."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=10)

    def idle(self) -> bool:
        with self._cond:
            return not (self._jobs or self._incoming or self._waiting or self._batches)

    # ----- the engine thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._closed or self._jobs or self._incoming or self._waiting or self._batches):
                    self._cond.wait()
                if self._closed:
                    break
                job = self._jobs.popleft() if self._jobs else None
                self._waiting += self._incoming
                self._incoming.clear()
            if job is not None:
                self._run_job(job)
            try:
                self._sampling_tick()
            except Exception:  # a bug here must not kill the engine thread
                log.exception("sampling failed")
                self._fail_all_sampling(RuntimeError("sampling failed; see the server log"))
        self._shutdown()

    def _run_job(self, job: _Job) -> None:
        if job.future.done():
            return
        try:
            result = job.fn(*job.args)
        except BaseException as error:  # handed to the waiter, which decides what it means
            _settle(job.future, error=error)
        else:
            _settle(job.future, result)

    def _sampling_tick(self) -> None:
        self._admit()
        self._prefill()
        for key in list(self._batches):
            batch = self._batches[key]
            if batch.ready:
                self._join(batch)
            if batch.decode.rows:
                self._decode(batch)
            if not (batch.decode.rows or batch.prefilling or batch.ready):
                del self._batches[key]

    def _batch_for(self, pending: _Pending) -> _Batch | None:
        batch = self._batches.get(pending.key)
        if batch is None:
            try:
                opener = self.engine.sampling_weights(pending.adapter)
            except Exception as error:
                _settle(pending.gen.future, error=error)
                return None
            batch = _Batch(
                pending.key, pending.adapter, opener, DecodeBatch(own_cache=not self.engine.batchable)
            )
            self._batches[pending.key] = batch
        return batch

    def _admit(self) -> None:
        """Move waiting requests into their batch's prefill list while the batch has room."""
        budget = max(1, KV_BUDGET_BYTES // max(1, self.engine.kv_bytes_per_token))
        still: list[_Pending] = []
        full: set[Hashable] = set()
        for pending in self._waiting:
            gen = pending.gen
            if gen.cancelled or gen.future.done():
                continue
            if pending.key in full:
                still.append(pending)  # keep arrival order within a batch
                continue
            batch = self._batch_for(pending)
            if batch is None:
                continue
            rows, tokens = batch.committed()
            need = gen.n * (len(gen.request.prompt) + gen.max_tokens)
            if rows and (rows + gen.n > self.max_rows or tokens + need > budget):
                full.add(pending.key)
                still.append(pending)
                continue
            batch.prefilling.append(pending)
        self._waiting = still

    def _prefill(self) -> None:
        left = PREFILL_TOKENS_PER_TICK
        for batch in list(self._batches.values()):
            if left <= 0:
                break
            if not batch.prefilling:
                continue
            try:
                model = batch.open()
            except Exception as error:
                self._fail_batch(batch, error)
                continue
            while batch.prefilling and left > 0:
                pending = batch.prefilling[0]
                gen = pending.gen
                if gen.cancelled or gen.future.done():
                    batch.prefilling.pop(0)
                    continue
                try:
                    left -= gen.prefill(model, self.engine.vocab_size)
                except Exception as error:
                    log.exception("prefill failed")
                    batch.prefilling.pop(0)
                    _settle(gen.future, error=error)
                    continue
                if gen.prompt_done:
                    batch.prefilling.pop(0)
                    if gen.max_tokens == 0:
                        _settle(gen.future, gen.finished_result())
                    else:
                        batch.ready.append(pending)

    def _join(self, batch: _Batch) -> None:
        ready = [p.gen for p in batch.ready if not (p.gen.cancelled or p.gen.future.done())]
        batch.ready = []
        if not ready:
            return
        if batch.decode.own_cache:
            # The model's own cache holds one request: the others wait for it to finish.
            if batch.decode.rows:
                batch.ready = [_Pending(g, batch.adapter, batch.key) for g in ready]
                return
            batch.ready = [_Pending(g, batch.adapter, batch.key) for g in ready[1:]]
            ready = ready[:1]
        batch.decode.join(ready)

    def _decode(self, batch: _Batch) -> None:
        try:
            model = batch.open()
            deadline = time.monotonic() + self.slice_s
            while batch.decode.rows:
                rows = len(batch.decode.rows)
                self.stats["decode_steps"] += 1
                self.stats["decode_rows"] += rows
                self.stats["max_rows"] = max(self.stats["max_rows"], rows)
                for gen in batch.decode.step(model):
                    _settle(gen.future, gen.finished_result())
                if time.monotonic() >= deadline or self._closed:
                    break
        except Exception as error:
            log.exception("decoding failed")
            self._fail_batch(batch, error)

    def _fail_batch(self, batch: _Batch, error: BaseException) -> None:
        for gen in batch.decode.generations + [p.gen for p in batch.prefilling + batch.ready]:
            _settle(gen.future, error=error)
        batch.decode = DecodeBatch(own_cache=batch.decode.own_cache)
        batch.prefilling, batch.ready = [], []

    def _fail_all_sampling(self, error: BaseException) -> None:
        for batch in list(self._batches.values()):
            self._fail_batch(batch, error)
        self._batches.clear()
        for pending in self._waiting:
            _settle(pending.gen.future, error=error)
        self._waiting = []

    def _shutdown(self) -> None:
        error = WorkCancelled("the server is stopping")
        with self._cond:
            for job in self._jobs:
                _settle(job.future, error=error)
            self._jobs.clear()
            self._waiting += self._incoming
            self._incoming.clear()
        self._fail_all_sampling(error)
