"""bench/decode: one batched decoding step of SmolLM2-135M on the CPU with the sampler's KV cache (kv_cache.py,
written in place) against transformers' DynamicCache (appended with torch.cat) in the same run, at the batch
sizes and cached lengths the agent's turns reach. Writes bench/results/decode.json.

    make bench-decode
"""
import json
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, DynamicCache

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "trainer"))
from evalrl_trainer.kv_cache import GrowingCache  # noqa: E402
from evalrl_trainer.tiny_model import smollm2_folder  # noqa: E402

SHAPES = [(8, 200), (8, 1500), (16, 1500)]  # (batch, cached tokens)
STEPS = 96  # past a re-buffering (kv_cache.GROWTH)


@torch.no_grad()
def ms_per_step(model, cache, batch: int, cached: int) -> float:
    prompt = torch.randint(10, 40_000, (batch, cached), generator=torch.Generator().manual_seed(0))
    model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
    next_ids = torch.randint(10, 40_000, (batch, 1), generator=torch.Generator().manual_seed(1))
    start = time.perf_counter()
    for step in range(STEPS):
        attn = torch.ones((batch, cached + step + 1), dtype=torch.long)
        positions = torch.full((batch, 1), cached + step)
        model(input_ids=next_ids, attention_mask=attn, position_ids=positions, past_key_values=cache, use_cache=True)
    return (time.perf_counter() - start) / STEPS * 1000


def main():
    torch.set_num_threads(2)
    model = AutoModelForCausalLM.from_pretrained(smollm2_folder(), dtype=torch.float32).eval()
    figures = {}
    for batch, cached in SHAPES:
        reference = ms_per_step(model, DynamicCache(), batch, cached)
        ours = ms_per_step(model, GrowingCache(), batch, cached)
        key = f"b{batch}_t{cached}"
        figures[key] = {"ms_per_step": round(ours, 1), "dynamic_cache_ms_per_step": round(reference, 1), "speedup": round(reference / ours, 3)}
        print(f"bench/decode: batch {batch} × {cached} cached tokens: {ours:.1f} ms/step, DynamicCache {reference:.1f} ms/step (×{reference / ours:.2f})")
    result = {"model": "SmolLM2-135M-Instruct, fp32, 2 CPU threads", "steps": STEPS, "shapes": figures,
              "torch": torch.__version__, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
    (ROOT / "bench" / "results" / "decode.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
