"""A step too large for one request: its sequences are staged in chunks, then trained as one optimizer step."""
import hashlib
import json
import os
import random
import time

import pytest
from fastapi.testclient import TestClient

from evalrl_trainer import checkpoints
from evalrl_trainer.adapters import Adapters
from evalrl_trainer.base_model import load_base_model
from evalrl_trainer.limits import Limits
from evalrl_trainer.sampler import Sampler
from evalrl_trainer.server import create_app, main
from evalrl_trainer.staging import IncompleteUpload, Staging
from evalrl_trainer.trainer import Trainer


def serve(base, root, limits: Limits = Limits()) -> TestClient:
    adapters = Adapters(base, root)
    return TestClient(create_app(adapters, Sampler(adapters, mode="deterministic"), Trainer(adapters), None, limits))


def sequence(advantage: float, n: int = 10, offset: int = 5) -> dict:
    return {"token_ids": list(range(offset, offset + n)), "mask": [0] * 3 + [1] * (n - 3), "logprobs": [-1.0] * n,
            "advantage": advantage}  # fmt: skip


def step(n: int = 1, advantages=(1.0, -1.0, 0.5, -0.5, 2.0)) -> dict:
    sequences = [sequence(a, n=8 + 3 * i, offset=5 + i) for i, a in enumerate(advantages)]
    return {"adapter": "policy", "step": n, "sequences": sequences, "lora": {"rank": 4, "alpha": 8}}


def chunks_of(sequences: list[dict], budget_bytes: int) -> list[list[dict]]:
    """In order, each chunk's JSON under the budget (what the TypeScript client does)."""
    chunks: list[list[dict]] = [[]]
    for s in sequences:
        if chunks[-1] and len(json.dumps(chunks[-1] + [s])) > budget_bytes:
            chunks.append([])
        chunks[-1].append(s)
    return chunks


def staged(body: dict, budget_bytes: int) -> tuple[list[dict], dict]:
    """The chunk uploads of a step's sequences, and the request that then trains the staged step."""
    chunks = chunks_of(body["sequences"], budget_bytes)
    up = {"id": hashlib.sha256(json.dumps(body).encode()).hexdigest(), "chunks": len(chunks)}
    parts = [{"adapter": body["adapter"], "step": body["step"], "upload": up, "index": i, "sequences": c}
             for i, c in enumerate(chunks)]  # fmt: skip
    return parts, {**{k: v for k, v in body.items() if k != "sequences"}, "upload": up}


def send(client: TestClient, parts: list[dict], commit: dict):
    for part in parts:
        r = client.post("/train/step/chunk", json=part)
        assert r.status_code == 200, r.text
    return client.post("/train/step", json=commit)


def test_a_step_sent_in_chunks_is_the_step_sent_whole(tiny_model_folder, tmp_path):
    """One optimizer step over every sequence, with the whole step's loss normaliser: the same weights."""
    # A base model per server: a server that trains adds its LoRA adapter to its base model.
    fresh = lambda: load_base_model(tiny_model_folder, tmp_path / "cache", device="cpu")  # noqa: E731
    body = step()
    whole = serve(fresh(), tmp_path / "whole").post("/train/step", json=body).json()
    parts, commit = staged(body, 200)
    chunked = send(serve(fresh(), tmp_path / "chunked"), parts, commit)
    assert len(parts) == 5 and chunked.status_code == 200, chunked.text
    for key in ("loss", "grad_norm", "tokens", "sha256", "request_digest"):
        assert chunked.json()[key] == whole[key], key


def test_a_chunked_step_is_exactly_once(tiny_base, tmp_path):
    client = serve(tiny_base, tmp_path)
    body = step()
    parts, commit = staged(body, 300)
    first = send(client, [parts[0], *parts], commit).json()  # a duplicated chunk upload is harmless
    assert first["cached"] is False
    assert not list((tmp_path / ".staging").glob("*/*"))  # spent: dropped
    again = send(client, parts, commit).json()  # a retry stages again and gets the stored result
    assert again["cached"] is True and again["loss"] == first["loss"]
    assert client.post("/train/step", json=body).json()["cached"] is True  # whole or in chunks, one step
    other = step(advantages=(1.0, -1.0, 0.5, -0.5, 3.0))  # the last chunk's sequence differs
    refused = send(client, *staged(other, 300))
    assert refused.status_code == 409 and "different request" in refused.json()["error"]["message"]
    assert checkpoints.complete_steps(tmp_path, "policy") == [0, 1]


def test_an_incomplete_staging_never_trains(tiny_base, tmp_path):
    client = serve(tiny_base, tmp_path)
    body = step()
    parts, commit = staged(body, 300)
    r = send(client, [parts[0], *parts[2:]], commit)
    assert r.status_code == 409 and r.json()["error"]["message"].startswith("upload: chunks [1] of 5 are not staged")
    assert checkpoints.complete_steps(tmp_path, "policy") == []
    assert not list((tmp_path / ".staging").glob("*/*/*"))  # spent: the retry stages them all again
    assert send(client, parts, commit).json()["cached"] is False


def test_abandoned_uploads_expire(tmp_path):
    staging = Staging(tmp_path, ttl_s=60)
    staging.put("policy", 1, "a" * 64, 0, 2, b"[]")
    stale = time.time() - 61
    os.utime(tmp_path / ".staging" / "policy" / f"step-1-{'a' * 64}", (stale, stale))
    staging.put("policy", 2, "b" * 64, 0, 1, b"[]")  # any upload sweeps the expired ones
    with pytest.raises(IncompleteUpload):
        next(staging.read("policy", 1, "a" * 64, 2))
    assert list(staging.read("policy", 2, "b" * 64, 1)) == [b"[]"]


def test_bad_chunks_and_steps_get_a_4xx_naming_the_field(tiny_base, tmp_path):
    client = serve(tiny_base, tmp_path)
    part = staged(step(), 10_000)[0][0]
    for bad, field in [
        ({**part, "index": 1}, "index"),
        ({**part, "adapter": "../x"}, "adapter"),
        ({**part, "upload": {"id": "../x", "chunks": 1}}, "upload.id"),
        ({**part, "sequences": [{**sequence(1.0), "mask": [1]}]}, "sequences.0"),
    ]:
        r = client.post("/train/step/chunk", json=bad)
        assert r.status_code == 400 and r.json()["error"]["message"].startswith(field), r.json()
    both = client.post("/train/step", json={**step(), "upload": part["upload"]})
    assert both.status_code == 400 and both.json()["error"]["message"].startswith("sequences")
    neither = client.post("/train/step", json={"adapter": "policy", "step": 1})
    assert neither.status_code == 400 and neither.json()["error"]["message"].startswith("sequences")


def test_limits_are_flags_and_a_refusal_names_the_flag_to_raise(tiny_base, tmp_path):
    client = serve(tiny_base, tmp_path, Limits(request_bytes=1_000, train_sequences=4))
    body = step()  # 1,272 bytes of JSON, 5 sequences
    big = client.post("/train/step", json=body)
    assert big.status_code == 413 and big.json()["error"]["message"].endswith("(--max-request-mb)")
    r = send(client, *staged(body, 600))  # two chunks, each under the limit: the step's sequences are not
    assert r.status_code == 400 and r.json()["error"]["message"].endswith("(--max-step-sequences)")
    tokens = serve(tiny_base, tmp_path / "t", Limits(train_tokens=20)).post("/train/step", json=body)
    assert tokens.status_code == 400 and tokens.json()["error"]["message"].endswith("(--max-step-tokens)")
    for flag in ("--max-request-mb", "--max-step-sequences", "--max-step-tokens"):
        with pytest.raises(SystemExit):
            main([flag, "0", "--model", "/nonexistent"])


def production_step(rng: random.Random, context: int) -> list[dict]:
    """examples/production.yaml's policy step: 32 tasks × 8 samples, an email-agent episode each (up to 10 turns
    of a short tool call or answer, then the tool's result: search hits or an email), one sequence per episode
    that ends at the context. The sampler's logprobs are near the random model's (~ln 1/49,152 per token)."""
    sequences = []
    for _ in range(32 * 8):
        ids = [rng.randrange(1000, 40000) for _ in range(rng.randint(300, 700))]  # system prompt and question
        mask = [0] * len(ids)
        for _ in range(rng.randint(1, 10)):
            reply, result = rng.randint(10, 40), rng.randint(100, 1500)
            if len(ids) + reply + result > context:
                break
            ids += [rng.randrange(1000, 40000) for _ in range(reply + result)]
            mask += [1] * reply + [0] * result
        logprobs = [round(-10.8 + rng.gauss(0, 0.05), 4) if m else 0.0 for m in mask]
        advantage = rng.choice([-1.0, -0.5, 0.5, 1.0])
        sequences.append({"token_ids": ids, "mask": mask, "logprobs": logprobs, "advantage": advantage})
    return sequences


def test_a_production_sized_step_goes_in_chunks_to_one_trained_step(tiny_base, tmp_path):
    """A production step's shape: 256 sequences of 581 to 8,154 tokens (median 4,737; the tiny model's context of
    8,192 stands in for Qwen3's 16,384), 1.21 M tokens of which 31,903 produced, 18 MB of JSON. On this machine's
    2 CPU cores (shared) it uploads and trains in 110-115 s, ~10,500 tokens/s, so a production step's few million
    tokens (~5 minutes) are scaled down to this, and the request limit with them so that the whole step is
    refused and its chunks are not; the path under test (chunks, staging, one optimizer step) is the same."""
    client = serve(tiny_base, tmp_path, Limits(request_bytes=4 << 20))
    body = {"adapter": "policy", "step": 1, "sequences": production_step(random.Random(0), tiny_base.max_context),
            "hyperparameters": {"learning_rate": 1e-5, "loss_aggregation": "dr-grpo"},
            "lora": {"rank": 16, "alpha": 32}}  # fmt: skip
    tokens = sum(len(s["token_ids"]) for s in body["sequences"])
    assert len(body["sequences"]) == 256 and tokens > 1_000_000
    assert client.post("/train/step", json=body).status_code == 413
    parts, commit = staged(body, 3 << 20)
    started = time.perf_counter()
    r = send(client, parts, commit)
    assert r.status_code == 200, r.text
    trained = r.json()
    assert trained["micro_batches"] > 0 and trained["update_norm"] > 0 and trained["cached"] is False
    assert trained["tokens"] == sum(sum(s["mask"]) for s in body["sequences"])  # every produced token, once
    print(f"production-shaped step: {len(parts)} chunks, {tokens} tokens, {time.perf_counter() - started:.0f} s")
