"""The vLLM double answers as vLLM 0.33.0 does (each case cites its source in vllm_double.py)."""
import json

import pytest
from fastapi.testclient import TestClient

from evalrl_trainer.adapters import Adapters
from evalrl_trainer.base_model import load_base_model
from evalrl_trainer.sampler import Sampler
from evalrl_trainer.vllm_double import create_app, hermes_tool_calls, parse_args

KEY = "double-key-0123456789"
TOOLS = [{"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}]
HELLO = [{"role": "user", "content": "hello"}]
GOOD = ["serve", "MODEL", "--served-model-name", "base", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        "--generation-config", "vllm", "--enable-lora", "--max-lora-rank", "16", "--max-loras", "4"]  # fmt: skip


def double(tiny_base, tmp_path, argv: list[str], monkeypatch, runtime_lora=True) -> TestClient:
    monkeypatch.setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True" if runtime_lora else "")
    args = parse_args([a if a != "MODEL" else str(tmp_path / "model") for a in argv])
    adapters = Adapters(tiny_base, tmp_path / "double")
    app = create_app(args, adapters, Sampler(adapters, mode="deterministic"), KEY)
    return TestClient(app, headers={"Authorization": f"Bearer {KEY}"})


def probe_adapter(tiny_model_folder, tmp_path, rank=4):
    """A probe adapter from a trainer of its own: a base model of its own, as on another host."""
    trainer = Adapters(load_base_model(tiny_model_folder, tmp_path / "cache", device="cpu"), tmp_path / "trainer")
    return str(trainer.write_probe(rank))


def test_serves_its_names_samples_with_token_ids_and_raw_logprobs(tiny_base, tmp_path, monkeypatch):
    client = double(tiny_base, tmp_path, GOOD, monkeypatch)
    assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["base"]
    reply = client.post("/v1/chat/completions", json={"model": "base", "messages": HELLO, "max_tokens": 5, "seed": 1,
                                                      "logprobs": True, "return_token_ids": True}).json()  # fmt: skip
    choice = reply["choices"][0]
    assert reply["prompt_token_ids"] and len(choice["token_ids"]) == len(choice["logprobs"]["content"]) <= 5
    assert "tool_calls" not in choice["message"]  # absent, not [], without calls
    plain = client.post("/v1/chat/completions", json={"model": "base", "messages": HELLO, "max_tokens": 2}).json()
    assert plain["prompt_token_ids"] is None and plain["choices"][0]["token_ids"] is None


def test_refuses_as_vllm_does(tiny_base, tmp_path, monkeypatch):
    client = double(tiny_base, tmp_path, GOOD, monkeypatch)
    unknown = client.post("/v1/chat/completions", json={"model": "policy@step-1", "messages": HELLO})
    assert unknown.status_code == 404
    assert unknown.json()["error"] == {"message": "The model `policy@step-1` does not exist. Valid aliases: base.",
                                       "type": "NotFoundError", "param": "model", "code": 404}  # fmt: skip
    hot = client.post("/v1/chat/completions", json={"model": "base", "messages": HELLO, "temperature": 3})
    assert hot.status_code == 400 and hot.json()["error"]["message"].startswith("temperature must be in [0, 2]")
    assert client.post("/v1/chat/completions", json={"messages": HELLO}, headers={"Authorization": "Bearer wrong"}).json() == {"error": "Unauthorized"}
    assert client.get("/health", headers={"Authorization": ""}).status_code == 200  # not guarded


def test_tools_need_the_auto_tool_choice_flags(tiny_base, tmp_path, monkeypatch):
    without = [a for a in GOOD if a not in ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")]
    client = double(tiny_base, tmp_path, without, monkeypatch)
    refused = client.post("/v1/chat/completions", json={"model": "base", "messages": HELLO, "tools": TOOLS})
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    with pytest.raises(SystemExit):  # the CLI refuses the flag without a parser
        parse_args(["serve", "m", "--enable-auto-tool-choice"])


def test_hermes_parser():
    content, calls = hermes_tool_calls('Let me look.<tool_call>{"name": "ping", "arguments": {"a":1}}</tool_call>')
    assert content == "Let me look." and calls[0]["function"] == {"name": "ping", "arguments": '{"a": 1}'}
    assert calls[0]["id"].startswith("chatcmpl-tool-") and len(calls[0]["id"]) == len("chatcmpl-tool-") + 16
    assert hermes_tool_calls('<tool_call>{"name": "ping", "arguments": {}}')[1]  # unclosed last block
    assert hermes_tool_calls("<tool_call>{not json}</tool_call>") == ("<tool_call>{not json}</tool_call>", [])


def test_fields_left_out_come_from_the_generation_config_unless_told_otherwise(tiny_base, tmp_path, monkeypatch):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_k": 20, "top_p": 0.95}))
    body = {"model": "base", "messages": HELLO, "max_tokens": 16, "seed": 3, "return_token_ids": True}
    explicit = {**body, "temperature": 1, "top_p": 1, "top_k": 0, "min_p": 0, "repetition_penalty": 1}
    sample = lambda client, b: client.post("/v1/chat/completions", json=b).json()["choices"][0]["token_ids"]  # noqa: E731
    auto = double(tiny_base, tmp_path, [a for a in GOOD if a not in ("--generation-config", "vllm")], monkeypatch)
    assert sample(auto, body) != sample(auto, explicit)  # filled from generation_config.json
    neutral = double(tiny_base, tmp_path, GOOD, monkeypatch)
    assert sample(neutral, body) == sample(neutral, explicit)


def test_runtime_lora_loading_and_a_restart_that_forgets(tiny_base, tiny_model_folder, tmp_path, monkeypatch):
    path = probe_adapter(tiny_model_folder, tmp_path)
    client = double(tiny_base, tmp_path, GOOD, monkeypatch)
    load = {"lora_name": "policy@step-1", "lora_path": path}
    loaded = client.post("/v1/load_lora_adapter", json=load)
    assert (loaded.status_code, loaded.text) == (200, "Success: LoRA adapter 'policy@step-1' added successfully.")
    again = client.post("/v1/load_lora_adapter", json=load)
    assert again.status_code == 400 and "has already been loaded" in again.json()["error"]["message"]
    assert client.post("/v1/chat/completions", json={"model": "policy@step-1", "messages": HELLO, "max_tokens": 2}).status_code == 200
    missing = client.post("/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": str(tmp_path / "nowhere")})
    assert missing.status_code == 404 and "No adapter found" in missing.json()["error"]["message"]
    big = client.post("/v1/load_lora_adapter", json={"lora_name": "big", "lora_path": probe_adapter(tiny_model_folder, tmp_path, 32)})
    assert big.status_code == 500 and "greater than max_lora_rank 16" in big.json()["error"]["message"]
    assert client.post("/v1/unload_lora_adapter", json={"lora_name": "policy@step-1"}).status_code == 200
    # Its only adapter unloaded, it samples the base model and loads again (PEFT alone fails on both).
    assert client.post("/v1/chat/completions", json={"model": "base", "messages": HELLO, "max_tokens": 2}).status_code == 200
    assert client.post("/v1/load_lora_adapter", json=load).status_code == 200
    unload = client.post("/v1/unload_lora_adapter", json={"lora_name": "nope"})
    assert unload.status_code == 404 and unload.json()["error"]["message"] == "The lora adapter 'nope' cannot be found."
    restarted = double(tiny_base, tmp_path, GOOD, monkeypatch)
    assert [m["id"] for m in restarted.get("/v1/models").json()["data"]] == ["base"]
    assert restarted.post("/v1/chat/completions", json={"model": "policy@step-1", "messages": HELLO}).status_code == 404
    no_runtime = double(tiny_base, tmp_path, GOOD, monkeypatch, runtime_lora=False)
    assert no_runtime.post("/v1/load_lora_adapter", json=load).json() == {"detail": "Not Found"}
