"""bench/sampling: agent-shaped traffic through the sampler — 8 episodes at once, 3 turns each, every turn
resending the episode so far plus a tool result, replies of 16 to 160 tokens — with continuous batching (what
waits joins the running batch; sampler.py) against two references in the same run: static batches (nothing
joins a running batch), and continuous batching that caches a prompt only when its reply ends (the engine
before the shared prefix of requests waiting together was cached at prefill). Each engine runs in a process
of its own (a second sampler in one process decodes slower), with the server's allocator (jemalloc, when
installed). SmolLM2-135M, fp32, 2 CPU threads. Writes bench/results/sampling.json.

    make bench-sampling
"""
import ctypes.util
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "trainer"))
from evalrl_trainer.adapters import Adapters  # noqa: E402
from evalrl_trainer.base_model import load_base_model  # noqa: E402
from evalrl_trainer.sampler import SampleRequest, Sampler  # noqa: E402
from evalrl_trainer.tiny_model import smollm2_folder  # noqa: E402

EPISODES, TURNS = 8, 3
SHARED, QUESTION, TOOL_RESULT = 500, 60, 150  # tokens: instructions and tools, the question, each tool result


def episode(sampler: Sampler, index: int, shared: list[int]) -> int:
    """One agent episode's model calls, turn after turn; returns the tokens it decoded."""
    rng = random.Random(index)
    prompt = shared + [rng.randrange(100, 40_000) for _ in range(QUESTION)]
    decoded = 0
    for _ in range(TURNS):
        request = SampleRequest(prompt, None, max_tokens=rng.randint(16, 160), temperature=1.0, seed=index, ignore_eos=True)
        sample = sampler.submit(request).result()
        decoded += len(sample.token_ids)
        prompt = prompt + sample.token_ids + [rng.randrange(100, 40_000) for _ in range(TOOL_RESULT)]
    return decoded


def traffic(sampler: Sampler) -> dict:
    shared = [random.Random(0).randrange(100, 40_000) for _ in range(SHARED)]
    decoded = [0] * EPISODES

    def run(i: int):
        decoded[i] = episode(sampler, i, shared)

    start = time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(EPISODES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    return {"seconds": round(seconds, 1), "decoded_tokens": sum(decoded), "tokens_per_s": round(sum(decoded) / seconds, 1),
            "prompt_tokens_computed": sampler.cache.misses, "prompt_tokens_cached": sampler.cache.hits}  # fmt: skip


class CachedAtReplyEnd(Sampler):
    """The reference engine that caches a prompt's keys and values only when its reply ends."""

    def _prefilled(self, waiting, later):
        return super()._prefilled(waiting, later=[])


def measure(engine: str) -> dict:
    """One engine's figures, in this process."""
    torch.set_num_threads(2)
    base = load_base_model(smollm2_folder(), ROOT / ".evalrl" / "bench-sampling-cache", device="cpu")
    engine_class = CachedAtReplyEnd if engine == "reply-end-cache" else Sampler
    sampler = engine_class(Adapters(base, ROOT / ".evalrl" / f"bench-sampling-{engine}"), mode="throughput")
    if engine == "static":
        sampler._admit = lambda room: []  # the reference: a batch decodes to its end before the next one forms
    return traffic(sampler)


def in_own_process(engine: str) -> dict:
    jemalloc = ctypes.util.find_library("jemalloc")
    env = {**os.environ, "LD_PRELOAD": jemalloc} if jemalloc else dict(os.environ)
    out = subprocess.run([sys.executable, __file__, engine], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    reference, reply_end, ours = in_own_process("static"), in_own_process("reply-end-cache"), in_own_process("continuous")
    speedup = reference["seconds"] / ours["seconds"]
    prefix_speedup = reply_end["seconds"] / ours["seconds"]
    print(f"bench/sampling: {EPISODES} episodes × {TURNS} turns: continuous batching {ours['seconds']} s "
          f"({ours['tokens_per_s']} tokens/s, {ours['prompt_tokens_computed']} prompt tokens computed), "
          f"static batches {reference['seconds']} s (×{speedup:.2f}), prompts cached only at their reply's end "
          f"{reply_end['seconds']} s ({reply_end['prompt_tokens_computed']} computed) (×{prefix_speedup:.2f})")  # fmt: skip
    result = {"model": "SmolLM2-135M-Instruct, fp32, 2 CPU threads, max batch 8", "episodes": EPISODES, "turns": TURNS,
              "continuous": ours, "static": reference, "reply_end_cache": reply_end, "speedup": round(speedup, 3),
              "speedup_vs_reply_end_cache": round(prefix_speedup, 3), "torch": torch.__version__,
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
    (ROOT / "bench" / "results" / "sampling.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(json.dumps(measure(sys.argv[1])), flush=True)
        os._exit(0)  # the sampler's daemon thread would abort the interpreter's shutdown
    else:
        main()
