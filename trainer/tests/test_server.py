import json
import math
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evalrl_trainer import checkpoints
from evalrl_trainer.adapters import Adapters
from evalrl_trainer.sampler import Sampler
from evalrl_trainer.server import Limits, create_app, main
from evalrl_trainer.trainer import Trainer

TOKEN = "s3cret-token-for-tests"


@pytest.fixture
def server(tiny_base, tmp_path):
    adapters = Adapters(tiny_base, tmp_path)
    app = create_app(adapters, Sampler(adapters, mode="deterministic"), Trainer(adapters), token=TOKEN)
    client = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    return client, adapters, tmp_path


def sequence(advantage=1.0, n=10):
    return {"token_ids": list(range(5, 5 + n)), "mask": [0] * 3 + [1] * (n - 3), "logprobs": [-1.0] * n, "advantage": advantage}


def test_requests_need_the_token(server):
    client, _, _ = server
    assert client.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/v1/models").json()["data"][0]["id"] == "base"


def test_training_and_adapter_loading_need_the_token_too(server):
    client, _, _ = server
    wrong = {"Authorization": "Bearer wrong"}
    step = {"adapter": "policy", "step": 1, "sequences": [sequence()]}
    assert client.post("/train/step", json=step, headers=wrong).status_code == 401
    assert client.post("/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": "/tmp"}, headers=wrong).status_code == 401
    assert client.post("/train/cancel", json={"adapter": "policy"}, headers=wrong).status_code == 401


def test_chat_completion_returns_token_ids_and_logprobs(server):
    client, _, _ = server
    r = client.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "seed": 3, "n": 2, "logprobs": True,
    })  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["choices"]) == 2 and len(body["prompt_token_ids"]) > 0
    for choice in body["choices"]:
        assert len(choice["token_ids"]) == len(choice["token_logprobs"]) == len(choice["logprobs"]["content"])
        assert choice["message"]["role"] == "assistant"


def test_train_step_is_exactly_once_and_publishable_to_sampling(server):
    client, adapters, root = server
    body = {"adapter": "policy", "step": 1, "sequences": [sequence(1.0), sequence(-1.0)], "lora": {"rank": 4, "alpha": 8}}
    first = client.post("/train/step", json=body)
    assert first.status_code == 200, first.text
    again = client.post("/train/step", json=body).json()
    assert again["cached"] is True and again["loss"] == first.json()["loss"]
    assert client.post("/train/step", json={**body, "step": 3}).status_code == 409
    assert client.get("/train/progress/policy").json() == {"adapter": "policy", "running": False, "latest_step": 1}
    for model in ("policy", "policy@latest", "policy@step-1", "policy@step-0"):
        r = client.post("/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "x"}], "max_tokens": 4})
        assert r.status_code == 200, (model, r.text)
    path = checkpoints.adapter_weights_path(root, "policy", 1)
    assert client.post("/v1/load_lora_adapter", json={"lora_name": "published", "lora_path": str(path)}).status_code == 200
    assert "published" in [m["id"] for m in client.get("/v1/models").json()["data"]]
    r = client.post("/v1/chat/completions", json={"model": "published", "messages": [{"role": "user", "content": "x"}], "max_tokens": 4})
    assert r.status_code == 200
    assert client.post("/v1/unload_lora_adapter", json={"lora_name": "published"}).status_code == 200


def test_a_step_is_addressed_as_the_trained_adapter_a_published_copy_or_its_checkpoint(server):
    """`policy@step-N` samples the trained adapter itself while it is at step N (no copy), a copy published
    under that address, or else the checkpoint, loaded on demand; a host keeps two loaded steps per adapter."""
    client, adapters, root = server
    for step in (1, 2, 3):
        body = {"adapter": "policy", "step": step, "sequences": [sequence(1.0), sequence(-1.0)], "lora": {"rank": 4, "alpha": 8}}
        assert client.post("/train/step", json=body).status_code == 200
    assert adapters.resolve("policy@step-3") == "policy"
    assert "policy@step-3" in [m["id"] for m in client.get("/v1/models").json()["data"]]  # what a pool routes by
    assert adapters.resolve("policy@step-1") == "policy__step_1"
    assert adapters.resolve("policy@step-0") == "policy__step_0"
    assert adapters.resolve("policy@step-2") == "policy__step_2"
    assert sorted(a for a in adapters.loaded if a.startswith("policy__")) == ["policy__step_1", "policy__step_2"]
    path = checkpoints.adapter_weights_path(root, "policy", 2)
    r = client.post("/v1/load_lora_adapter", json={"lora_name": "other@step-2", "lora_path": str(path)})
    assert r.status_code == 200, r.text
    assert adapters.resolve("other@step-2") == "other@step-2"
    ask = {"model": "other@step-2", "messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
    assert client.post("/v1/chat/completions", json=ask).status_code == 200
    assert client.post("/v1/load_lora_adapter", json={"lora_name": "other@latest", "lora_path": str(path)}).status_code == 400


def test_adapter_loading_answers_as_vllm_does(server):
    """vLLM 0.33.0's load/unload: plain-text success, 400 for a name it holds unless load_inplace, 404 for
    unloading a name it does not hold."""
    client, _, root = server
    body = {"adapter": "policy", "step": 1, "sequences": [sequence(1.0), sequence(-1.0)], "lora": {"rank": 4, "alpha": 8}}
    assert client.post("/train/step", json=body).status_code == 200
    load = {"lora_name": "policy@step-1", "lora_path": str(checkpoints.adapter_weights_path(root, "policy", 1))}
    first = client.post("/v1/load_lora_adapter", json=load)
    assert first.status_code == 200 and first.text == "Success: LoRA adapter 'policy@step-1' added successfully."
    again = client.post("/v1/load_lora_adapter", json=load)
    assert again.status_code == 400 and "has already been loaded" in again.json()["error"]["message"]
    assert client.post("/v1/load_lora_adapter", json={**load, "load_inplace": True}).status_code == 200
    gone = client.post("/v1/unload_lora_adapter", json={"lora_name": "policy@step-1", "lora_int_id": 1})
    assert gone.status_code == 200 and gone.text == "Success: LoRA adapter 'policy@step-1' removed successfully."
    missing = client.post("/v1/unload_lora_adapter", json={"lora_name": "policy@step-1"})
    assert missing.status_code == 404 and missing.json()["error"]["message"] == "The lora adapter 'policy@step-1' cannot be found."


@pytest.mark.parametrize(
    "body, field",
    [
        ({"adapter": "policy", "step": 1, "sequences": []}, "sequences"),
        ({"adapter": "policy", "step": 1, "sequences": [{**sequence(), "advantage": math.nan}]}, "sequences.0"),
        ({"adapter": "policy", "step": 1, "sequences": [{**sequence(), "mask": [1]}]}, "sequences.0"),
        ({"adapter": "policy", "step": 0, "sequences": [sequence()]}, "step"),
        ({"adapter": "policy", "step": 1, "sequences": [sequence(n=9000)]}, "sequences"),
        ({"adapter": "policy", "step": 1, "sequences": [sequence()], "hyperparameters": {"learning_rate": -1}}, "hyperparameters.learning_rate"),
    ],
)
def test_bad_train_requests_get_a_4xx_naming_the_field(server, body, field):
    client, _, _ = server
    r = client.post("/train/step", content=__import__("json").dumps(body, allow_nan=True), headers={"content-type": "application/json"})
    assert 400 <= r.status_code < 500
    assert r.json()["error"]["message"].startswith(field), r.json()
    assert client.get("/health").status_code == 200  # still serving


def test_bad_sampling_requests(server):
    client, _, _ = server
    unknown = client.post("/v1/chat/completions", json={"model": "nope", "messages": [{"role": "user", "content": "x"}]})
    assert unknown.status_code == 404 and "unknown adapter" in unknown.json()["error"]["message"]
    too_long = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 32768})
    assert too_long.status_code == 400 and too_long.json()["error"]["message"].startswith("max_tokens")
    bad_role = client.post("/v1/chat/completions", json={"messages": [{"role": "robot", "content": "x"}]})
    assert bad_role.status_code == 400 and bad_role.json()["error"]["message"].startswith("messages")
    too_many = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "n": 65})
    assert too_many.status_code == 400 and too_many.json()["error"]["message"].startswith("n")


def test_refuses_a_public_address_without_a_token(monkeypatch):
    monkeypatch.delenv("EVALRL_MODEL_SERVER_TOKEN", raising=False)
    with pytest.raises(SystemExit):
        main(["--host", "0.0.0.0", "--model", "/nonexistent"])


def test_tokenize_gives_the_chat_prompt_as_sampling_renders_it_and_raw_text(server):
    client, _, _ = server
    messages = [{"role": "user", "content": "hello"}]
    chat = client.post("/v1/chat/completions", json={"model": "base", "messages": messages, "max_tokens": 2, "seed": 1})
    tokens = client.post("/tokenize", json={"messages": messages}).json()
    assert tokens["tokens"] == chat.json()["prompt_token_ids"] and tokens["count"] == len(tokens["tokens"])
    raw = client.post("/tokenize", json={"prompt": "<|im_end|>"}).json()["tokens"]
    assert len(raw) == 1  # a special token stays one id
    assert client.post("/tokenize", json={}).status_code == 400


def test_requests_over_the_limits_are_refused_before_any_work(tiny_base, tmp_path):
    adapters = Adapters(tiny_base, tmp_path)
    limits = Limits(request_bytes=20_000, train_sequences=3, train_tokens=60)
    client = TestClient(create_app(adapters, Sampler(adapters, mode="deterministic"), Trainer(adapters), None, limits))
    step = {"adapter": "policy", "step": 1, "lora": {"rank": 4, "alpha": 8}}
    big = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x" * 30_000}]})
    assert big.status_code == 413 and big.json()["error"]["message"].startswith("body")
    many = client.post("/train/step", json={**step, "sequences": [sequence()] * 4})
    assert many.status_code == 400 and many.json()["error"]["message"].startswith("sequences: 4 sequences")
    long = client.post("/train/step", json={**step, "sequences": [sequence(n=40)] * 2})
    assert long.status_code == 400 and "80 tokens" in long.json()["error"]["message"]
    assert client.post("/train/step", json={**step, "sequences": [sequence()] * 3}).status_code == 200


def test_a_step_request_that_differs_from_the_checkpointed_one_is_refused(server):
    client, _, _ = server
    body = {"adapter": "policy", "step": 1, "sequences": [sequence(1.0), sequence(-1.0)], "lora": {"rank": 4, "alpha": 8}}
    assert client.post("/train/step", json=body).json()["cached"] is False
    other = client.post("/train/step", json={**body, "hyperparameters": {"learning_rate": 0.5}})
    assert other.status_code == 409 and "different request" in other.json()["error"]["message"]
    assert client.post("/train/step", json=body).json()["cached"] is True


def test_unknown_hyperparameters_are_refused_by_name(server):
    client, _, _ = server
    body = {"adapter": "policy", "step": 1, "sequences": [sequence()], "hyperparameters": {"micro_batch": 4}}
    r = client.post("/train/step", json=body)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("hyperparameters.micro_batch")


def test_a_malformed_tool_call_in_the_history_is_rendered_not_a_500(server):
    client, _, _ = server
    messages = [
        {"role": "user", "content": "find it"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_email", "arguments": "<1@x>"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Error: the arguments of read_email are not valid JSON."},
    ]  # fmt: skip
    r = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2})
    assert r.status_code == 200, r.text


def test_a_probe_adapter_of_the_asked_rank_is_written_under_the_checkpoint_root_and_loads(server):
    """What `evalrl preflight` asks the trainer for, and each sampler then loads from the shared folder."""
    client, _, root = server
    path = Path(client.post("/checkpoints/probe", json={"rank": 8}).json()["path"])
    assert path.is_relative_to(root.resolve()) and json.loads((path / "adapter_config.json").read_text())["r"] == 8
    loaded = client.post("/v1/load_lora_adapter", json={"lora_name": "evalrl-preflight-1", "lora_path": str(path)})
    assert loaded.status_code == 200
    assert client.post("/v1/chat/completions", json={"model": "evalrl-preflight-1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).status_code == 200
    ids = [m["id"] for m in client.get("/v1/models").json()["data"]]
    assert not any(i.startswith("probe") for i in ids)  # written, then dropped from the trainer's memory
