"""The sampling engine: requests queue up; one thread decodes them in batches with a KV cache written in place
(kv_cache.py), each prompt prefilled alone from its longest cached prefix (prefix_cache.py).

Throughput mode batches whatever is waiting (up to max_batch), also across adapters (PEFT mixed-adapter
batches). Deterministic mode decodes one request at a time, so a seeded sample depends only on its adapter,
prompt and seed — batched arithmetic is not batch-invariant. Logprobs are the model's own (temperature 1),
the ones GRPO's importance ratio needs.
"""
import os
import queue
import threading
import time
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from .adapters import Adapters
from .kv_cache import GrowingCache
from .prefix_cache import Layers, PrefixCache

Mode = Literal["throughput", "deterministic"]


@dataclass
class SampleRequest:
    prompt_ids: list[int]
    adapter: str | None  # resident adapter name; None → base model
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False


@dataclass
class Sample:
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: Literal["stop", "length"]


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
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_ids[0]
        self.queue: queue.Queue[tuple[SampleRequest, Future]] = queue.Queue()
        self.batches = 0
        self.usage = {"prefill_s": 0.0, "decode_s": 0.0, "decoded_tokens": 0}  # where sampling time goes (/health)
        threading.Thread(target=self._loop, name="sampler", daemon=True).start()

    def submit(self, request: SampleRequest) -> Future:
        future: Future = Future()
        self.queue.put((request, future))
        return future

    # --- engine -------------------------------------------------------------------------------------------
    def _loop(self):
        while True:
            batch = [self.queue.get()]
            deadline = time.monotonic() + self.gather_s
            while len(batch) < self.max_batch:
                try:
                    batch.append(self.queue.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            try:
                with self.adapters.lock:
                    samples = self.decode([r for r, _ in batch])
                for (_, future), sample in zip(batch, samples):
                    future.set_result(sample)
            except Exception as err:  # a failed batch fails its requests, never the engine
                for _, future in batch:
                    future.set_exception(err)
            self.batches += 1

    @torch.no_grad()
    def decode(self, requests: list[SampleRequest]) -> list[Sample]:
        device = self.adapters.base.device
        started = time.monotonic()
        prefilled = [self._prefill(r, device) for r in requests]
        prefilled_at = time.monotonic()
        with self._adapters_for([r.adapter for r in requests]) as (model, extra):
            samples = self._decode(requests, prefilled, model, extra, device)
        self.usage["prefill_s"] += prefilled_at - started
        self.usage["decode_s"] += time.monotonic() - prefilled_at
        self.usage["decoded_tokens"] += sum(len(s.token_ids) for s in samples)
        return samples

    def _owner(self, r: SampleRequest) -> tuple:
        return r.adapter, self.adapters.revision(r.adapter)

    def _prefill(self, r: SampleRequest, device) -> tuple[torch.Tensor, Layers]:
        """One request's prompt through the model from its longest cached prefix (each alone: no padding, no
        T × T mask). Returns its last position's logits (the only ones sampling needs) and its keys/values, sized
        exactly (a DynamicCache: one forward pass appends once, and decoding re-buffers the batch anyway)."""
        cached, layers = self.cache.lookup(self._owner(r), r.prompt_ids)
        cache = DynamicCache()
        for layer, (k, v) in enumerate(layers or []):
            cache.update(k, v, layer)
        ids = torch.tensor([r.prompt_ids[cached:]], device=device)
        positions = torch.arange(cached, len(r.prompt_ids), device=device)[None]
        with self._adapters_for([r.adapter]) as (model, extra):
            out = model(input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True, logits_to_keep=1, **extra)
        self.cache.count(cached, len(r.prompt_ids) - cached)
        return out.logits[0, -1], [(layer.keys, layer.values) for layer in cache.layers]

    def _decode(self, requests, prefilled, model, extra, device) -> list[Sample]:
        """Decodes the batch together: each request's keys/values left-padded to the longest prompt, so every
        row's next token is at the same column."""
        B = len(requests)
        lengths = [len(r.prompt_ids) for r in requests]
        longest = max(lengths)
        cache = GrowingCache()
        logits = torch.stack([p[0] for p in prefilled])
        per_request = [p[1] for p in prefilled]
        prefilled.clear()  # from here on only the batched copy is kept
        for layer in range(len(per_request[0])):
            pad = lambda t, n: F.pad(t, (0, 0, longest - n, 0))  # noqa: E731  (left, on the sequence dimension)
            keys = torch.cat([pad(kv[layer][0], n) for kv, n in zip(per_request, lengths)])
            values = torch.cat([pad(kv[layer][1], n) for kv, n in zip(per_request, lengths)])
            for kv in per_request:
                kv[layer] = None  # type: ignore[call-overload]
            cache.update(keys, values, layer)
        del per_request
        attn = torch.zeros((B, longest), dtype=torch.long, device=device)
        for i, n in enumerate(lengths):
            attn[i, longest - n:] = 1
        positions = torch.tensor(lengths, device=device)[:, None] - 1
        generators = [self._generator(r.seed, device) for r in requests]
        out_ids: list[list[int]] = [[] for _ in requests]
        out_lp: list[list[float]] = [[] for _ in requests]
        finish: list[str | None] = [None] * B
        active = list(range(B))  # the requests still decoding, by row of the batch
        for step in range(max(r.max_tokens for r in requests)):
            logp_RV = torch.log_softmax(logits.float(), dim=-1)
            next_ids = torch.empty((len(active), 1), dtype=torch.long, device=device)
            for row, i in enumerate(active):
                r = requests[i]
                token = self._sample(logits[row].float(), r, generators[i])
                out_ids[i].append(token)
                out_lp[i].append(float(logp_RV[row, token]))
                next_ids[row, 0] = token
                if (token in self.eos_ids and not r.ignore_eos) or self._hit_stop(out_ids[i], r.stop):
                    finish[i] = "stop"
                elif len(out_ids[i]) >= r.max_tokens:
                    finish[i] = "length"
            rows = [row for row, i in enumerate(active) if finish[i] is None]
            for row, i in enumerate(active):
                if finish[i] is not None:
                    self._remember(requests[i], out_ids[i], cache, row, slice(longest - lengths[i], longest + step))
            if not rows:
                break
            if len(rows) < len(active):  # finished rows leave the batch: no compute is spent on them
                keep = torch.tensor(rows, device=device)
                cache.batch_select_indices(keep)
                attn, positions, next_ids = attn[keep], positions[keep], next_ids[keep]
                if "adapter_names" in extra:
                    extra = {"adapter_names": [extra["adapter_names"][row] for row in rows]}
                active = [active[row] for row in rows]
            attn = torch.cat([attn, torch.ones((len(active), 1), dtype=attn.dtype, device=device)], dim=1)
            positions = positions + 1
            logits = model(input_ids=next_ids, attention_mask=attn, position_ids=positions, past_key_values=cache, use_cache=True, **extra).logits[:, -1]
        return [self._finish(r, out_ids[i], out_lp[i], finish[i] or "length") for i, r in enumerate(requests)]

    def _remember(self, r: SampleRequest, token_ids: list[int], cache: GrowingCache, row: int, columns: slice):
        """Keeps a finished request's keys/values for a later prompt that extends it: its prompt and every
        sampled token fed back (all but the last, which was never fed)."""
        layers = [(layer.keys[row : row + 1, :, columns].clone(), layer.values[row : row + 1, :, columns].clone()) for layer in cache.layers]
        self.cache.store(self._owner(r), r.prompt_ids + token_ids[: columns.stop - columns.start - len(r.prompt_ids)], layers)

    # --- helpers ------------------------------------------------------------------------------------------
    @contextmanager
    def _adapters_for(self, adapters: list[str | None]):
        """A uniform batch runs its one adapter (or none) directly; only a mixed batch pays for PEFT's
        per-layer split by adapter."""
        peft = self.adapters.peft
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
        if r.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = sorted_p.cumsum(-1) - sorted_p < r.top_p  # smallest prefix reaching top_p
            probs = torch.zeros_like(probs).scatter_(0, order[keep], sorted_p[keep])
        return int(torch.multinomial(probs, 1, generator=g))

    def _hit_stop(self, token_ids: list[int], stop: list[str]) -> bool:
        if not stop:
            return False
        tail = self.tokenizer.decode(token_ids[-16:], skip_special_tokens=False)
        return any(s in tail for s in stop)

    def _finish(self, r: SampleRequest, token_ids: list[int], logprobs: list[float], reason: str) -> Sample:
        text = self.tokenizer.decode([t for t in token_ids if t not in self.eos_ids], skip_special_tokens=True)
        for s in r.stop:
            if s in text:
                text = text[: text.index(s)]
        return Sample(token_ids=token_ids, logprobs=logprobs, text=text, finish_reason=reason)  # type: ignore[arg-type]

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
