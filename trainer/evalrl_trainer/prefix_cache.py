"""Prefix caching for the sampler: the keys and values of recent prompts, reused by prompts that extend them.

An agent's turn t + 1 resends turn t's prompt and reply, and every episode starts with the same instructions
and tool listing: without a cache, prefill — a forward pass over the whole prompt — costs the CPU server most
of its sampling time. Entries are per adapter weights (their fingerprint): once an adapter trains, its old
entries never match, and adapters with equal weights share theirs.
Least recently used entries go first when the budget is exceeded.
"""
from collections import OrderedDict
from dataclasses import dataclass

import torch

Layers = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values, each (1, kv_heads, T, head_dim)


@dataclass
class Entry:
    tokens: torch.Tensor  # (T,) the token ids the keys and values are of
    layers: Layers
    bytes: int


class PrefixCache:
    def __init__(self, budget_bytes: int):
        self.budget = budget_bytes
        self.entries: OrderedDict[tuple, Entry] = OrderedDict()
        self.used = 0
        self.hits = 0  # prompt tokens served from the cache
        self.misses = 0  # prompt tokens computed

    def lookup(self, owner: str | None, prompt: list[int]) -> tuple[int, Layers | None]:
        """The longest cached prefix of `prompt` for these adapter weights, at most all but its last token
        (the last position must be computed: sampling needs its logits)."""
        if self.budget <= 0 or len(prompt) < 2:
            return 0, None
        ids = torch.tensor(prompt[:-1])
        best, best_key = 0, None
        for key, entry in self.entries.items():
            if key[0] != owner:
                continue
            n = min(len(ids), len(entry.tokens))
            differ = torch.nonzero(ids[:n] != entry.tokens[:n])
            common = int(differ[0]) if len(differ) else n
            if common > best:
                best, best_key = common, key
        if best_key is None:
            return 0, None
        self.entries.move_to_end(best_key)
        return best, [(k[:, :, :best], v[:, :, :best]) for k, v in self.entries[best_key].layers]

    def store(self, owner: str | None, tokens: list[int], layers: Layers) -> None:
        if self.budget <= 0 or len(tokens) == 0:
            return
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        if size > self.budget:
            return
        key = (owner, tuple(tokens))
        if key in self.entries:
            self.entries.move_to_end(key)
            return
        ids = torch.tensor(tokens)
        for old_key in [k for k, e in self.entries.items() if k[0] == owner and len(e.tokens) <= len(ids)]:
            old = self.entries[old_key]
            if torch.equal(old.tokens, ids[: len(old.tokens)]):  # the new entry extends it: it adds nothing
                self.used -= self.entries.pop(old_key).bytes
        self.entries[key] = Entry(ids, layers, size)
        self.used += size
        while self.used > self.budget:
            _, old = self.entries.popitem(last=False)
            self.used -= old.bytes

    def count(self, cached: int, computed: int) -> None:
        self.hits += cached
        self.misses += computed
