import torch
from transformers import DynamicCache

from evalrl_trainer.kv_cache import GROWTH, GrowingCache


def greedy(model, cache, prompt: torch.Tensor, steps: int, drop_row_at: int | None = None) -> tuple[torch.Tensor, list[int]]:
    """Greedy decoding of a batch; at step `drop_row_at` the last row leaves the batch, as a finished row does in
    the sampler. Returns the last step's logits and the data pointer of layer 0's keys at every step."""
    with torch.no_grad():
        logits = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
        attn = torch.ones(prompt.shape, dtype=torch.long)
        pointers = []
        for step in range(steps):
            if step == drop_row_at:
                keep = torch.arange(logits.shape[0] - 1)
                cache.batch_select_indices(keep)
                logits, attn = logits[keep], attn[keep]
            attn = torch.cat([attn, torch.ones((attn.shape[0], 1), dtype=attn.dtype)], dim=1)
            positions = torch.full((attn.shape[0], 1), attn.shape[1] - 1)
            next_ids = logits.argmax(-1, keepdim=True)
            logits = model(input_ids=next_ids, attention_mask=attn, position_ids=positions, past_key_values=cache, use_cache=True).logits[:, -1]
            pointers.append(cache.layers[0].keys.data_ptr())
    return logits, pointers


def test_decoding_past_a_rebuffer_and_a_dropped_row_matches_the_dynamic_cache(tiny_base):
    model = tiny_base.model
    prompt = torch.randint(10, 300, (3, 40), generator=torch.Generator().manual_seed(0))
    steps = GROWTH + 20  # the buffer fills once and is re-allocated
    expected, _ = greedy(model, DynamicCache(), prompt, steps, drop_row_at=5)
    cache = GrowingCache()
    got, pointers = greedy(model, cache, prompt, steps, drop_row_at=5)
    assert got.shape == (2, expected.shape[-1])
    assert torch.allclose(got, expected, atol=1e-4)
    assert cache.get_seq_length() == 40 + steps
    # Written in place: the keys move only when the row leaves and when the buffer fills, not at every token
    # (moves, not distinct addresses: the allocator may hand a freed buffer's address out again).
    assert sum(a != b for a, b in zip(pointers, pointers[1:])) == 2
