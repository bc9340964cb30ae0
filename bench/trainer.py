"""bench/trainer: the model server against plain PyTorch doing the same work, on the CPU with SmolLM2-135M.

Training: the server's POST /train/step on 4 × 1,024-token sequences (LoRA r=16) against a plain loop over the
same batch (forward, the same GRPO loss, backward, clip, AdamW step). Target: the server within 10 %.
Memory: the server's peak resident memory (VmHWM) through those steps, and through one step on 8 × 4,096
tokens in a fresh server. Target: ≤ 4 GiB each (a 0.5 GB model).
Sampling: 8 concurrent chat requests of 64 tokens each against 8 sequential plain `generate` calls of 64
tokens. Target: at least 2× the tokens/s. Writes bench/results/trainer.json.

    make bench-trainer
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "trainer"))
from evalrl_trainer.base_model import model_dtype  # noqa: E402
from evalrl_trainer.grpo import LossConfig, grpo_loss, loss_normaliser  # noqa: E402
from evalrl_trainer.lora import LoraSettings, with_lora  # noqa: E402
from evalrl_trainer.tiny_model import smollm2_folder  # noqa: E402

PORT = 18123
SEQS, SEQ_LEN, PROMPT = 4, 1024, 256
TRAIN_STEPS = int(os.environ.get("TRAIN_STEPS", 2))
SAMPLES, SAMPLE_TOKENS = 8, 64
THREADS = 2
DTYPE = model_dtype(torch.device("cpu"))  # what the server picks here (auto): both sides run in it


def post(path: str, body: dict, timeout=1800) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def training_batch(vocab: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    seqs = []
    for i in range(SEQS):
        ids = torch.randint(0, vocab, (SEQ_LEN,), generator=g).tolist()
        mask = [0] * PROMPT + [1] * (SEQ_LEN - PROMPT)
        logprobs = [0.0] * PROMPT + (-torch.rand(SEQ_LEN - PROMPT, generator=g) * 4).tolist()
        seqs.append({"token_ids": ids, "mask": mask, "logprobs": logprobs, "advantage": [1.0, -1.0, 0.5, -0.5][i]})
    return seqs


def plain_training(folder: Path, seqs: list[dict]) -> float:
    """The same step written plainly: no server, no checkpoint, no micro-batch bookkeeping beyond the loop."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = with_lora(AutoModelForCausalLM.from_pretrained(folder, dtype=DTYPE), LoraSettings(rank=16, alpha=32))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    ids = torch.tensor([s["token_ids"] for s in seqs])
    mask = torch.tensor([s["mask"] for s in seqs], dtype=torch.float32)
    old = torch.tensor([s["logprobs"] for s in seqs])
    adv = torch.tensor([s["advantage"] for s in seqs])
    norm = loss_normaliser(float(mask.sum()), SEQS, SEQ_LEN, "token-mean")
    times = []
    for _ in range(TRAIN_STEPS):
        t = time.perf_counter()
        opt.zero_grad()
        for b in range(SEQS):  # micro-batch 1, as the server runs it below
            logits = model(input_ids=ids[b : b + 1]).logits[:, :-1].float()
            logp = torch.nn.functional.pad(-torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), ids[b : b + 1, 1:].reshape(-1), reduction="none").view(1, -1), (1, 0))
            loss, _ = grpo_loss(logp, old[b : b + 1], mask[b : b + 1], adv[b : b + 1], LossConfig(), norm)
            loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
        times.append(time.perf_counter() - t)
    return float(mask.sum()) / min(times)  # produced tokens per second, best step


def plain_sampling(folder: Path, prompt_ids: list[int]) -> float:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=DTYPE).eval()
    ids = torch.tensor([prompt_ids])
    t = time.perf_counter()
    with torch.no_grad():
        for i in range(SAMPLES):
            torch.manual_seed(i)
            model.generate(ids, do_sample=True, temperature=1.0, max_new_tokens=SAMPLE_TOKENS, min_new_tokens=SAMPLE_TOKENS)
    return SAMPLES * SAMPLE_TOKENS / (time.perf_counter() - t)


@contextmanager
def model_server(folder: Path):
    """A fresh model server process on `folder`, as `evalrl` starts it (default micro-batch token budget)."""
    with tempfile.TemporaryDirectory() as ckpt:
        server = subprocess.Popen(
            [sys.executable, "-m", "evalrl_trainer.server", "--model", str(folder), "--checkpoints", ckpt,
             "--port", str(PORT), "--threads", str(THREADS), "--max-batch", str(SAMPLES)],
            cwd=ROOT / "trainer", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            for _ in range(600):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=1)
                    break
                except OSError:
                    time.sleep(0.5)
            yield server
        finally:
            server.terminate()
            server.wait()


def peak_rss_gib(pid: int) -> float:
    """The process's peak resident set (VmHWM), as the kernel counts it."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 2**20


def long_step_peak(folder: Path) -> tuple[float, float]:
    """One step on 8 × 4,096 tokens (a long multi-turn batch) in a fresh server: its peak memory and tokens/s."""
    g = torch.Generator().manual_seed(1)
    seqs = []
    for i in range(8):
        ids = torch.randint(0, 49152, (4096,), generator=g).tolist()
        seqs.append({"token_ids": ids, "mask": [0] * 3584 + [1] * 512, "logprobs": [0.0] * 3584 + [-1.0] * 512,
                     "advantage": 1.0 if i % 2 else -1.0})  # fmt: skip
    with model_server(folder) as server:
        t = time.perf_counter()
        post("/train/step", {"adapter": "long", "step": 1, "sequences": seqs, "hyperparameters": {"learning_rate": 1e-5}})
        return peak_rss_gib(server.pid), 8 * 4096 / (time.perf_counter() - t)


def server_figures(folder: Path, seqs: list[dict]) -> tuple[float, float, list[int], float]:
    with model_server(folder) as server:
        best = 0.0
        hp = {"learning_rate": 1e-5}
        for step in range(1, TRAIN_STEPS + 1):
            t = time.perf_counter()  # wall time of the HTTP call: parsing, training and checkpointing
            r = post("/train/step", {"adapter": "bench", "step": step, "sequences": seqs, "hyperparameters": hp})
            best = max(best, r["tokens"] / (time.perf_counter() - t))
        messages = [{"role": "user", "content": "Write a long story about an energy trader in Houston."}]
        chat = {"model": "base", "messages": messages, "max_tokens": SAMPLE_TOKENS, "ignore_eos": True, "temperature": 1.0}
        prompt_ids = post("/v1/chat/completions", {**chat, "max_tokens": 1})["prompt_token_ids"]
        results: list[dict] = []
        threads = [threading.Thread(target=lambda i=i: results.append(post("/v1/chat/completions", {**chat, "seed": i}))) for i in range(SAMPLES)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        sample_tps = sum(r["usage"]["completion_tokens"] for r in results) / (time.perf_counter() - t)
        return best, sample_tps, prompt_ids, peak_rss_gib(server.pid)


def main():
    torch.set_num_threads(THREADS)
    folder = smollm2_folder()
    seqs = training_batch(49152)
    print(f"bench/trainer: SmolLM2-135M on CPU ({THREADS} threads, {DTYPE}); train {SEQS}×{SEQ_LEN} tokens, sample {SAMPLES}×{SAMPLE_TOKENS}")
    server_train, server_sample, prompt_ids, peak = server_figures(folder, seqs)
    peak_long, long_tps = long_step_peak(folder)
    plain_train = plain_training(folder, seqs)
    plain_sample = plain_sampling(folder, prompt_ids)
    result = {
        "train_ratio_vs_plain": round(server_train / plain_train, 3),
        "sample_ratio_vs_plain": round(server_sample / plain_sample, 3),
        "server_train_tokens_per_s": round(server_train, 1),
        "plain_train_tokens_per_s": round(plain_train, 1),
        "server_sample_tokens_per_s_c8": round(server_sample, 1),
        "plain_sample_tokens_per_s_sequential": round(plain_sample, 1),
        "train_batch": f"{SEQS}x{SEQ_LEN}",
        "peak_rss_gib": round(peak, 2),
        "peak_rss_gib_8x4096": round(peak_long, 2),
        "train_tokens_per_s_8x4096": round(long_tps, 1),
        "targets": {"train_ratio_vs_plain": ">= 0.9", "sample_ratio_vs_plain": ">= 2", "peak_rss_gib": "<= 4"},
        "dtype": str(DTYPE).removeprefix("torch."),
        "torch": torch.__version__,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(f"train: server {server_train:.1f} tok/s vs plain {plain_train:.1f} tok/s, ratio {result['train_ratio_vs_plain']} (target >= 0.9)")
    print(f"sample: server c8 {server_sample:.1f} tok/s vs 8 sequential generate {plain_sample:.1f} tok/s, ratio {result['sample_ratio_vs_plain']} (target >= 2)")
    print(f"memory: server peak {peak:.2f} GiB (train {SEQS}x{SEQ_LEN} + sampling), {peak_long:.2f} GiB for one 8x4096 step (target <= 4)")
    out = ROOT / "bench" / "results" / "trainer.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
