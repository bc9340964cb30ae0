"""A batch being decoded: its rows and their keys/values, each row right-aligned in the batch's columns (kv_cache.py)
so that every row's next token lands in the same column. Rows join between steps and leave when they finish;
the sampler (sampler.py) decides who joins and samples the tokens."""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from .kv_cache import GrowingCache
from .prefix_cache import Layers

if TYPE_CHECKING:
    from .sampler import SampleRequest


@dataclass
class Row:
    request: SampleRequest
    future: Future
    generator: torch.Generator
    logits: torch.Tensor  # (V,) its prompt's last position, until it joins
    layers: Layers | None  # its prompt's keys/values, until it joins
    start: int = 0  # the column where its prompt starts
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None


class Batch:
    def __init__(self):
        self.rows: list[Row] = []
        self.cache = GrowingCache()
        self.width = 0  # columns of keys/values every row has (right-aligned)
        self.logits: torch.Tensor | None = None  # (B, V) each row's next-token logits

    def join(self, joining: list[Row]) -> None:
        """Admits prefilled rows. The columns left of every row already here are dropped, and the batch is as
        wide as its longest row: one long prompt that has left costs the rest nothing."""
        crop = min((row.start for row in self.rows), default=self.width)
        kept = self.width - crop
        width = max([kept] + [len(row.request.prompt_ids) for row in joining])
        self.cache.regroup(crop, width, [row.layers for row in joining])
        for row in self.rows:
            row.start += width - kept - crop
        for row in joining:
            row.start, row.layers = width - len(row.request.prompt_ids), None
        logits = torch.stack([row.logits for row in joining])
        self.logits = logits if self.logits is None else torch.cat([self.logits, logits])
        self.rows += joining
        self.width = width

    def sample_step(self, sample, stopped) -> list[tuple[int, Row]]:
        """One token for every row, with its logprob (temperature 1: the model's own). Returns the rows that
        finished, with their index in the batch."""
        logp_BV = torch.log_softmax(self.logits.float(), dim=-1)
        finished = []
        for i, row in enumerate(self.rows):
            token = sample(self.logits[i].float(), row.request, row.generator)
            row.token_ids.append(token)
            row.logprobs.append(float(logp_BV[i, token]))
            if stopped(row):
                row.finish = "stop"
            elif len(row.token_ids) >= row.request.max_tokens:
                row.finish = "length"
            if row.finish:
                finished.append((i, row))
        return finished

    def leave_finished(self) -> None:
        """Finished rows leave the batch: no compute is spent on them."""
        keep = [i for i, row in enumerate(self.rows) if row.finish is None]
        if len(keep) == len(self.rows):
            return
        self.rows = [self.rows[i] for i in keep]
        if not keep:  # an empty batch starts again from nothing
            self.cache, self.width, self.logits = GrowingCache(), 0, None
            return
        index = torch.tensor(keep, dtype=torch.long, device=self.logits.device)
        self.cache.batch_select_indices(index)
        self.logits = self.logits[index]

    def forward(self, model, extra: dict) -> None:
        """Feeds every row its last sampled token."""
        starts = torch.tensor([row.start for row in self.rows])
        attention = (torch.arange(self.width + 1)[None] >= starts[:, None]).long()
        positions = (self.width - starts)[:, None]
        next_ids = torch.tensor([[row.token_ids[-1]] for row in self.rows])
        device = self.logits.device
        out = model(input_ids=next_ids.to(device), attention_mask=attention.to(device), position_ids=positions.to(device),
                    past_key_values=self.cache, use_cache=True, **extra)  # fmt: skip
        self.logits = out.logits[:, -1]
        self.width += 1
