"""bench/gpu_step: GRPO LoRA training throughput on one GPU, Qwen3-4B-shaped.

A model built from Qwen3-4B's published configuration with random bf16 weights (nothing downloaded), LoRA
rank 16 on all linear layers, GRPO steps (evalrl_trainer.train_step, the server's own code) on
8 × 2,048-token sequences. Prints training tokens/s and MFU, writes bench/results/gpu_step.json.

MFU counts 4·N FLOPs per token for the base weights (forward 2N, backward through the frozen weights 2N;
LoRA adds no weight gradients for them) plus causal attention (3 × 2·2·L·T·d/2 per token), against the
GPU's dense bf16 peak.
"""
import json
import os
import sys
import time
from pathlib import Path

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trainer"))
from evalrl_trainer.base_model import compile_decoder_layers  # noqa: E402
from evalrl_trainer.lora import LoraSettings, with_lora  # noqa: E402
from evalrl_trainer.grpo import LossConfig  # noqa: E402
from evalrl_trainer.train_step import Sequence, StepConfig, train_step  # noqa: E402

SEQS, SEQ_LEN = 8, 2048
STEPS, WARMUP = int(os.environ.get("STEPS", 7)), 2  # the first step compiles
MICRO = int(os.environ.get("MICRO", 4))
PEAK = {"H200": 989e12, "H100": 989e12, "A100": 312e12}

# Qwen3-4B (config.json of Qwen/Qwen3-4B)
QWEN3_4B = Qwen3Config(
    vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
    num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
    rope_theta=1_000_000, rms_norm_eps=1e-6, tie_word_embeddings=True, attn_implementation="sdpa",
)


def main():
    assert torch.cuda.is_available(), "bench/gpu_step needs a CUDA GPU"
    torch.manual_seed(0)
    gpu = torch.cuda.get_device_name()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        base = Qwen3ForCausalLM(QWEN3_4B)
    torch.set_default_dtype(torch.float32)
    n_params = sum(p.numel() for p in base.parameters())
    model = with_lora(base, LoraSettings(rank=16, alpha=32))
    compile_decoder_layers(model)  # what the server does on a GPU (--compile)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-5, fused=True)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, QWEN3_4B.vocab_size, (SEQS, SEQ_LEN), generator=g)
    mask = [0] * 512 + [1] * (SEQ_LEN - 512)  # prompt 512 tokens, completion 1,536
    batch = [
        Sequence(ids[i].tolist(), mask, (-torch.rand(SEQ_LEN, generator=g)).tolist(), float(torch.randn(1, generator=g)))
        for i in range(SEQS)
    ]
    cfg = StepConfig(learning_rate=1e-5, max_grad_norm=1.0, loss=LossConfig(), tokens_per_micro_batch=MICRO * SEQ_LEN)
    times = []
    for step in range(STEPS):
        torch.cuda.synchronize()
        t = time.perf_counter()
        metrics = train_step(model, optimizer, batch, cfg)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        print(f"step {step}: {times[-1]:.3f}s loss {metrics['loss']:.4f} grad_norm {metrics['grad_norm']:.3f}", flush=True)
    if os.environ.get("PROFILE") == "1":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            train_step(model, optimizer, batch, cfg)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=60))
    per_step = sum(times[WARMUP:]) / len(times[WARMUP:])
    tokens = SEQS * SEQ_LEN  # every token goes through forward and backward
    tps = tokens / per_step
    c = QWEN3_4B
    attn_flops_per_token = 3 * 2 * 2 * c.num_hidden_layers * SEQ_LEN * c.num_attention_heads * c.head_dim / 2
    flops_per_token = 4 * n_params + attn_flops_per_token
    peak = next((v for k, v in PEAK.items() if k in gpu), 989e12)
    mfu = tps * flops_per_token / peak
    result = {
        "train_tokens_per_s": round(tps),
        "mfu": round(mfu, 4),
        "gpu": gpu,
        "seconds_per_step": round(per_step, 3),
        "sequences": SEQS,
        "seq_len": SEQ_LEN,
        "micro_batch": MICRO,
        "compiled_layers": True,
        "lora_rank": 16,
        "base_params": n_params,
        "peak_flops": peak,
        "max_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1),
        "torch": torch.__version__,
        "target_tokens_per_s": 16000,
        "ratio_vs_target": round(tps / 16000, 3),
    }
    print(json.dumps(result, indent=2))
    out = os.environ.get("OUT")
    path = Path(out) / "gpu_step.json" if out else Path(__file__).parent / "results" / "gpu_step.json"
    path.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
