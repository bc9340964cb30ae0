"""The sampling engine: requests queue up; one thread decodes them in batches (decode_batch.py) with a KV cache
written in place (kv_cache.py), each prompt prefilled alone from its longest cached prefix (prefix_cache.py).

Throughput mode batches continuously, up to max_batch rows, also across adapters (PEFT mixed-adapter batches):
what waits joins the running batch between decoding steps, and a finished row answers at once — an agent's
next turn does not wait for the longest reply of the batch it was in. Deterministic mode decodes one request
at a time, so a seeded sample depends only on its adapter, prompt and seed — batched arithmetic is not
batch-invariant. Logprobs are the model's own (temperature 1), the ones GRPO's importance ratio needs.

Adapters with equal weights count as one (adapters.fingerprint): two runs started from one checkpoint with one
seed ask for the same seeded samples, and each is computed once.
"""
import os
import queue
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import torch
from transformers import DynamicCache

from .adapters import Adapters
from .decode_batch import Batch, Row
from .prefix_cache import Layers, PrefixCache

Mode = Literal["throughput", "deterministic"]


@dataclass
class SampleRequest:
    prompt_ids: list[int]
    adapter: str | None  # resident adapter name; None → base model
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # vLLM's convention: 0 or -1 keeps every token
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False


@dataclass
class Sample:
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: Literal["stop", "length"]


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many tokens two prompts start with alike."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


RECENT_SAMPLES = 1024  # seeded samples kept for an equal request that comes late (token ids only: small)


class Sampler:
    def __init__(
        self, adapters: Adapters, mode: Mode = "throughput", max_batch: int = 8, gather_ms: float = 5.0, prefix_cache_mb: int = 256
    ):
        self.adapters = adapters
        self.mode = mode
        self.max_batch = 1 if mode == "deterministic" else max_batch
        # Deterministic mode recomputes every prompt: a cached prefix can differ in the last bits from a
        # recomputed one, and a seeded sample must depend only on its adapter, prompt and seed.
        self.cache = PrefixCache(0 if mode == "deterministic" else prefix_cache_mb << 20)
        self.gather_s = gather_ms / 1000
        self.tokenizer = adapters.base.tokenizer
        self.eos_ids = self._eos_ids()
        self.queue: queue.Queue[tuple[SampleRequest, Future]] = queue.Queue()
        self.batches = 0
        self.usage = {"prefill_s": 0.0, "decode_s": 0.0, "decoded_tokens": 0, "shared_samples": 0}  # for /health
        self.computing: dict[tuple, list[Future]] = {}  # a seeded request being computed → equal ones waiting on it
        self.recent: OrderedDict[tuple, Sample] = OrderedDict()
        threading.Thread(target=self._loop, name="sampler", daemon=True).start()

    def submit(self, request: SampleRequest) -> Future:
        future: Future = Future()
        self.queue.put((request, future))
        return future

    # --- engine -------------------------------------------------------------------------------------------
    def _loop(self):
        while True:
            waiting = [self.queue.get()]
            deadline = time.monotonic() + self.gather_s
            while len(waiting) < self.max_batch:
                try:
                    waiting.append(self.queue.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            with self.adapters.lock:
                self._run(waiting, self._admit)
            self.batches += 1

    def _admit(self, room: int) -> list[tuple[SampleRequest, Future]]:
        """Requests that join the running batch: what is waiting, up to `room`, unless another user of the
        weights (a train step, an adapter load) waits for the batch to end."""
        joining = []
        while len(joining) < room and not self.adapters.lock.waiting:
            try:
                joining.append(self.queue.get_nowait())
            except queue.Empty:
                break
        return joining

    def decode(self, requests: list[SampleRequest]) -> list[Sample]:
        """Decodes these requests as one batch, nothing joining it (the engine's batches admit what waits)."""
        futures = [Future() for _ in requests]
        with self.adapters.lock:
            self._run(list(zip(requests, futures)), lambda _: [])
        return [f.result() for f in futures]

    @torch.no_grad()
    def _run(self, waiting: list[tuple[SampleRequest, Future]], admit) -> None:
        """Continuous batching: the batch decodes one token per row per step; a row that finishes leaves and
        answers its request at once, and requests that wait join between steps (each prefilled alone), so a short
        reply never waits for a long one, nor a new turn for the batch to end. Deterministic mode admits none."""
        batch, joining = Batch(), []
        try:
            while True:
                started = time.monotonic()
                waiting = self._not_computed_yet(waiting)
                prefilled = [self._prefilled(w, later=[r for r, _ in waiting[i + 1 :]]) for i, w in enumerate(waiting)]
                joining = [row for row in prefilled if row is not None]
                if joining:
                    batch.join(joining)
                self.usage["prefill_s"] += time.monotonic() - started
                if not batch.rows:
                    return
                started = time.monotonic()
                for index, row in batch.sample_step(self._sample, self._stopped):
                    self._remember(row, batch, index)
                    self._answer(row.request, row.future, self._finish(row))
                    self.usage["decoded_tokens"] += len(row.token_ids)
                batch.leave_finished()
                if batch.rows:
                    with self._adapters_for([row.request.adapter for row in batch.rows]) as (model, extra):
                        batch.forward(model, extra)
                self.usage["decode_s"] += time.monotonic() - started
                waiting = admit(self.max_batch - len(batch.rows))
        except Exception as err:  # a failed batch fails its requests, never the engine
            for row in batch.rows + joining:
                if not row.future.done():
                    self._answer(row.request, row.future, err)

    def _prefilled(self, waiting: tuple[SampleRequest, Future], later: list[SampleRequest]) -> Row | None:
        """A request ready to join the batch, or None when its prefill failed (that request alone fails)."""
        request, future = waiting
        try:
            logits, layers = self._prefill(request, self.adapters.base.device, later)
        except Exception as err:
            self._answer(request, future, err)
            return None
        return Row(request, future, self._generator(request.seed, self.adapters.base.device), logits, layers)

    def _owner(self, r: SampleRequest) -> str | None:
        return self.adapters.fingerprint(r.adapter)

    def _identity(self, r: SampleRequest) -> tuple | None:
        """What determines a seeded request's sample (None: unseeded, every sample is new; or its adapter was
        unloaded while it waited, and its prefill fails it alone)."""
        if r.seed is None or (r.adapter is not None and r.adapter not in self.adapters.names()):
            return None
        return (self._owner(r), tuple(r.prompt_ids), r.seed, r.max_tokens, r.temperature, r.top_p, r.top_k, r.min_p, tuple(r.stop), r.ignore_eos)

    def _not_computed_yet(self, waiting: list[tuple[SampleRequest, Future]]) -> list[tuple[SampleRequest, Future]]:
        """The requests to compute: a seeded request equal to one computed recently gets its sample, one equal to
        a request being computed waits for it."""
        todo = []
        for request, future in waiting:
            identity = self._identity(request)
            if identity in self.recent:
                self.recent.move_to_end(identity)
                future.set_result(self.recent[identity])
            elif identity in self.computing:
                self.computing[identity].append(future)
            else:
                if identity is not None:
                    self.computing[identity] = []
                todo.append((request, future))
                continue
            self.usage["shared_samples"] += 1
        return todo

    def _answer(self, request: SampleRequest, future: Future, outcome: Sample | Exception) -> None:
        """Answers a computed request and the equal requests that waited on it."""
        identity = self._identity(request)
        for f in [future] + self.computing.pop(identity, []):
            if isinstance(outcome, Exception):
                f.set_exception(outcome)
            else:
                f.set_result(outcome)
        if identity is not None and not isinstance(outcome, Exception):
            self.recent[identity] = outcome
            while len(self.recent) > RECENT_SAMPLES:
                self.recent.popitem(last=False)

    def _prefill(self, r: SampleRequest, device, later: list[SampleRequest] = ()) -> tuple[torch.Tensor, Layers]:
        """One request's prompt through the model from its longest cached prefix (each alone: no padding, no
        T × T mask). Returns its last position's logits (the only ones sampling needs) and its keys/values, sized
        exactly (a DynamicCache: one forward pass appends once, and joining the batch re-buffers anyway).
        The part of its prompt that a request prefilled `later` starts with is cached at once (a GRPO group's
        samples, a new adapter's episodes and their shared instructions), so it is computed once."""
        cached, layers = self.cache.lookup(self._owner(r), r.prompt_ids)
        cache = DynamicCache()
        for layer, (k, v) in enumerate(layers or []):
            cache.update(k, v, layer)
        ids = torch.tensor([r.prompt_ids[cached:]], device=device)
        positions = torch.arange(cached, len(r.prompt_ids), device=device)[None]
        with self._adapters_for([r.adapter]) as (model, extra):
            out = model(input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True, logits_to_keep=1, **extra)
        self.cache.count(cached, len(r.prompt_ids) - cached)
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        shared = max((common_prefix(r.prompt_ids, o.prompt_ids) for o in later if self._owner(o) == self._owner(r)), default=0)
        if shared > cached:  # only that part: the cache's room is for what will be reused
            self.cache.store(self._owner(r), r.prompt_ids[:shared], [(k[:, :, :shared].clone(), v[:, :, :shared].clone()) for k, v in layers])
        return out.logits[0, -1], layers

    def _remember(self, row: Row, batch: Batch, index: int):
        """Keeps a finished request's keys/values for a later prompt that extends it: its prompt and every
        sampled token fed back (all but the last, which was never fed)."""
        columns = slice(row.start, batch.width)
        layers = [(layer.keys[index : index + 1, :, columns].clone(), layer.values[index : index + 1, :, columns].clone())
                  for layer in batch.cache.layers]  # fmt: skip
        fed = batch.width - row.start - len(row.request.prompt_ids)
        self.cache.store(self._owner(row.request), row.request.prompt_ids + row.token_ids[:fed], layers)

    # --- helpers ------------------------------------------------------------------------------------------
    @contextmanager
    def _adapters_for(self, adapters: list[str | None]):
        """A uniform batch runs its one adapter (or none) directly; only a mixed batch pays for PEFT's
        per-layer split by adapter. Equal adapters count as one."""
        peft = self.adapters.peft
        adapters = [self.adapters.representative(a) for a in adapters]
        if peft is None:
            yield self.adapters.base.model, {}
        elif all(a is None for a in adapters):
            with peft.disable_adapter():
                yield peft, {}
        elif len(set(adapters)) == 1:
            previous = peft.active_adapter
            peft.base_model.set_adapter(adapters[0])
            try:
                yield peft, {}
            finally:
                peft.base_model.set_adapter(previous)
        else:
            yield peft, {"adapter_names": [a if a is not None else "__base__" for a in adapters]}

    @staticmethod
    def _generator(seed: int | None, device: torch.device) -> torch.Generator:
        g = torch.Generator(device=device)
        g.manual_seed(seed if seed is not None else int.from_bytes(os.urandom(8), "little") % 2**63)
        return g

    @staticmethod
    def _sample(logits_V: torch.Tensor, r: SampleRequest, g: torch.Generator) -> int:
        if r.temperature <= 0:
            return int(torch.argmax(logits_V))
        probs = torch.softmax(logits_V / r.temperature, dim=-1)
        if r.top_k > 0:  # vLLM's order: top-k, then top-p, then min-p, on the tempered distribution
            kth = torch.topk(probs, min(r.top_k, probs.numel())).values[-1]
            probs = torch.where(probs >= kth, probs, 0.0)
        if r.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = sorted_p.cumsum(-1) - sorted_p < r.top_p  # smallest prefix reaching top_p
            probs = torch.zeros_like(probs).scatter_(0, order[keep], sorted_p[keep])
        if r.min_p > 0:
            probs = torch.where(probs >= r.min_p * probs.max(), probs, 0.0)
        return int(torch.multinomial(probs, 1, generator=g))

    def _stopped(self, row: Row) -> bool:
        r = row.request
        if row.token_ids[-1] in self.eos_ids and not r.ignore_eos:
            return True
        if not r.stop:
            return False
        tail = self.tokenizer.decode(row.token_ids[-16:], skip_special_tokens=False)
        return any(s in tail for s in r.stop)

    def _finish(self, row: Row) -> Sample:
        text = self.tokenizer.decode([t for t in row.token_ids if t not in self.eos_ids], skip_special_tokens=True)
        for s in row.request.stop:
            if s in text:
                text = text[: text.index(s)]
        return Sample(token_ids=row.token_ids, logprobs=row.logprobs, text=text, finish_reason=row.finish)  # type: ignore[arg-type]

    def _eos_ids(self) -> list[int]:
        ids = set()
        gen = getattr(self.adapters.base.model, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None)
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != self.tokenizer.unk_token_id:
            ids.add(im_end)
        return sorted(ids)
