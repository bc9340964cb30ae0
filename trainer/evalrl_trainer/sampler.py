"""The sampling engine: requests queue up; one thread decodes them in batches with a KV cache.

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
from transformers import DynamicCache

from .adapters import Adapters

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
    def __init__(self, adapters: Adapters, mode: Mode = "throughput", max_batch: int = 8, gather_ms: float = 5.0):
        self.adapters = adapters
        self.mode = mode
        self.max_batch = 1 if mode == "deterministic" else max_batch
        self.gather_s = gather_ms / 1000
        self.tokenizer = adapters.base.tokenizer
        self.eos_ids = self._eos_ids()
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_ids[0]
        self.queue: queue.Queue[tuple[SampleRequest, Future]] = queue.Queue()
        self.batches = 0
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
        B = len(requests)
        longest = max(len(r.prompt_ids) for r in requests)
        ids = torch.full((B, longest), self.pad_id, dtype=torch.long)
        attn = torch.zeros((B, longest), dtype=torch.long)
        for i, r in enumerate(requests):  # left padding: every row's next token is at the same column
            ids[i, longest - len(r.prompt_ids):] = torch.tensor(r.prompt_ids)
            attn[i, longest - len(r.prompt_ids):] = 1
        ids, attn = ids.to(device), attn.to(device)
        with self._adapters_for([r.adapter for r in requests]) as (model, extra):
            return self._decode(requests, model, extra, ids, attn, device)

    def _decode(self, requests, model, extra, ids, attn, device) -> list[Sample]:
        B = len(requests)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        generators = [self._generator(r.seed, device) for r in requests]
        cache = DynamicCache()
        out_ids: list[list[int]] = [[] for _ in requests]
        out_lp: list[list[float]] = [[] for _ in requests]
        finish: list[str | None] = [None] * B
        # Prefill: the output layer only at the last position (the one sampling needs), not vocab × prompt.
        logits = model(input_ids=ids, attention_mask=attn, position_ids=positions, past_key_values=cache, use_cache=True, logits_to_keep=1, **extra).logits[:, -1]
        for step in range(max(r.max_tokens for r in requests)):
            logp_BV = torch.log_softmax(logits.float(), dim=-1)
            next_ids = torch.full((B, 1), self.pad_id, dtype=torch.long, device=device)
            for i, r in enumerate(requests):
                if finish[i] is not None:
                    continue
                token = self._sample(logits[i].float(), r, generators[i])
                out_ids[i].append(token)
                out_lp[i].append(float(logp_BV[i, token]))
                next_ids[i, 0] = token
                if (token in self.eos_ids and not r.ignore_eos) or self._hit_stop(out_ids[i], r.stop):
                    finish[i] = "stop"
                elif len(out_ids[i]) >= r.max_tokens:
                    finish[i] = "length"
            if all(f is not None for f in finish):
                break
            attn = torch.cat([attn, torch.ones((B, 1), dtype=attn.dtype, device=device)], dim=1)
            positions = positions[:, -1:] + 1
            logits = model(input_ids=next_ids, attention_mask=attn, position_ids=positions, past_key_values=cache, use_cache=True, **extra).logits[:, -1]
        return [self._finish(r, out_ids[i], out_lp[i], finish[i] or "length") for i, r in enumerate(requests)]

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
