"""bench/decode: one batched decoding step of SmolLM2-135M on the CPU with the sampler's KV cache (kv_cache.py,
written in place) against transformers' DynamicCache (appended with torch.cat) in the same run, at the batch
sizes and cached lengths the agent's turns reach; then a step whose rows use two LoRA adapters (mixed_lora.py)
against PEFT's own `adapter_names` path and against one adapter. Writes bench/results/decode.json.

    make bench-decode
"""
import json
import sys
import time
from pathlib import Path

import torch
from peft import get_peft_model
from transformers import AutoModelForCausalLM, DynamicCache

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "trainer"))
from evalrl_trainer.kv_cache import GrowingCache  # noqa: E402
from evalrl_trainer.lora import LoraSettings, lora_config  # noqa: E402
from evalrl_trainer.mixed_lora import MixedLora  # noqa: E402
from evalrl_trainer.tiny_model import smollm2_folder  # noqa: E402

SHAPES = [(8, 200), (8, 1500), (16, 1500)]  # (batch, cached tokens)
LORA_SHAPE = (8, 800)
STEPS = 96  # past a re-buffering (kv_cache.GROWTH)


@torch.no_grad()
def ms_per_step(model, cache, batch: int, cached: int, **extra) -> float:
    prompt = torch.randint(10, 40_000, (batch, cached), generator=torch.Generator().manual_seed(0))
    model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1, **extra)
    next_ids = torch.randint(10, 40_000, (batch, 1), generator=torch.Generator().manual_seed(1))
    start = time.perf_counter()
    for step in range(STEPS):
        attn = torch.ones((batch, cached + step + 1), dtype=torch.long)
        positions = torch.full((batch, 1), cached + step)
        model(input_ids=next_ids, attention_mask=attn, position_ids=positions, past_key_values=cache, use_cache=True, **extra)
    return (time.perf_counter() - start) / STEPS * 1000


def two_adapters(model) -> dict:
    """Half the rows through each of two adapters (r8, all linear layers), PEFT's way and mixed_lora's."""
    peft = get_peft_model(model, lora_config(LoraSettings(rank=8, alpha=16)), adapter_name="policy")
    peft.add_adapter("judge", lora_config(LoraSettings(rank=8, alpha=16)))
    for p in peft.parameters():
        p.requires_grad_(False)
    peft.eval()
    batch, cached = LORA_SHAPE
    rows = ["policy", "judge"] * (batch // 2)
    one = ms_per_step(peft, GrowingCache(), batch, cached)
    reference = ms_per_step(peft, GrowingCache(), batch, cached, adapter_names=rows)
    with MixedLora().rows(peft, rows):
        ours = ms_per_step(peft, GrowingCache(), batch, cached)
    print(f"bench/decode: batch {batch} × {cached} cached tokens, two adapters: {ours:.1f} ms/step, PEFT's adapter_names "
          f"{reference:.1f} ms/step (×{reference / ours:.2f}); one adapter {one:.1f} ms/step")  # fmt: skip
    return {"ms_per_step": round(ours, 1), "peft_adapter_names_ms_per_step": round(reference, 1),
            "one_adapter_ms_per_step": round(one, 1), "speedup": round(reference / ours, 3)}  # fmt: skip


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
    figures[f"two_adapters_b{LORA_SHAPE[0]}_t{LORA_SHAPE[1]}"] = two_adapters(model)
    result = {"model": "SmolLM2-135M-Instruct, fp32, 2 CPU threads", "steps": STEPS, "shapes": figures,
              "torch": torch.__version__, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
    (ROOT / "bench" / "results" / "decode.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
