"""Qwen3, production's model, with its real tokenizer and chat template (tests/fixtures/qwen3) and a tiny
random-weight model of its architecture: prompts as vLLM renders them, thinking on and off, think blocks in
replies, and a sample and a training step through the model server."""
import json

import pytest
from fastapi.testclient import TestClient
from transformers import AutoTokenizer

from evalrl_trainer import tiny_model
from evalrl_trainer.adapters import Adapters
from evalrl_trainer.base_model import load_base_model
from evalrl_trainer.chat import render_as_vllm, render_prompt, renders_tools
from evalrl_trainer.sampler import Sampler
from evalrl_trainer.server import create_app
from evalrl_trainer.tool_calls import parse_tool_calls, split_thinking
from evalrl_trainer.trainer import Trainer
from evalrl_trainer.vllm_messages import vllm_messages

TOOLS = [
    {"type": "function", "function": {"name": "search_emails", "description": "Search the inbox.", "parameters": {
        "type": "object", "required": ["keywords"], "properties": {"keywords": {"type": "array", "items": {"type": "string"}}}}}},
    {"type": "function", "function": {"name": "read_email", "description": "Read one email.", "parameters": {
        "type": "object", "required": ["message_id"], "properties": {"message_id": {"type": "string"}}}}},
]  # fmt: skip


def call(id_: str, name: str, args: dict) -> dict:
    """An assistant turn as the agent loop sends it back: no content, one call, arguments as a JSON string."""
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": id_, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}  # fmt: skip


HISTORY = [
    {"role": "system", "content": "You are an email search agent."},
    {"role": "user", "content": "When did Jane send the budget draft?"},
    call("c1", "search_emails", {"keywords": ["budget", "draft"]}),
    {"role": "tool", "tool_call_id": "c1", "content": "m1 | 2001-03-05 | jane@example.com | Budget draft"},
    {"role": "assistant", "content": "<think>\nRead it first.\n</think>\n\n", "tool_calls": [
        {"id": "c2", "type": "function", "function": {"name": "read_email", "arguments": '{"message_id":"m1"}'}}]},
    {"role": "tool", "tool_call_id": "c2", "content": "subject: Budget draft\n\nAttached."},
]  # fmt: skip


@pytest.fixture(scope="session")
def qwen3_folder(tmp_path_factory):
    return tiny_model.build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3"), arch="qwen3")


@pytest.fixture(scope="session")
def qwen3(qwen3_folder):
    return AutoTokenizer.from_pretrained(qwen3_folder)


def test_the_fixture_is_qwen3s_tokenizer_and_template(qwen3):
    added = qwen3.added_tokens_decoder
    assert qwen3.vocab_size == 151643 and len(added) == 26 and len(qwen3) == 151669
    assert (added[151643].content, added[151667].content, added[151668].content) == ("<|endoftext|>", "<think>", "</think>")
    assert qwen3.eos_token == "<|im_end|>" and qwen3.eos_token_id == 151645
    assert all(s in qwen3.chat_template for s in ("enable_thinking", "<think>", "<tool_call>", "<tool_response>"))


def test_qwen3s_template_renders_tools_and_calls_natively(qwen3):
    text = qwen3.decode(render_prompt(qwen3, HISTORY, TOOLS, chat_template_kwargs={"enable_thinking": False}))
    assert renders_tools(qwen3)
    assert '<tools>\n{"type": "function", "function": {"name": "search_emails", "description": "Search the inbox."' in text
    assert "- search_emails(" not in text  # not the compact listing of templates that ignore tools
    # Arguments re-rendered from a dict (vLLM's rule), whatever spacing the history's JSON string had.
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "search_emails", "arguments": {"keywords": ["budget", "draft"]}}\n</tool_call><|im_end|>' in text
    assert '<tool_call>\n{"name": "read_email", "arguments": {"message_id": "m1"}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\nsubject: Budget draft\n\nAttached.\n</tool_response><|im_end|>\n" in text


@pytest.mark.parametrize("thinking", [False, True])
def test_the_model_servers_prompt_is_vllms_token_for_token(qwen3, thinking):
    kwargs = {"enable_thinking": thinking}
    for k in range(2, len(HISTORY) + 1):
        assert render_prompt(qwen3, HISTORY[:k], TOOLS, chat_template_kwargs=kwargs) == render_as_vllm(qwen3, HISTORY[:k], TOOLS, kwargs)
    text = qwen3.decode(render_as_vllm(qwen3, HISTORY, TOOLS, kwargs))
    # Off, the prompt holds the empty think block the model then writes after; on, the model opens its own.
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n" if not thinking else "<|im_start|>assistant\n")
    # The reasoning of a turn after the question is kept in the history (Qwen3's template, both modes).
    assert "<|im_start|>assistant\n<think>\nRead it first.\n</think>\n\n<tool_call>" in text


@pytest.mark.parametrize("sent_back_with_reasoning", [False, True])
def test_without_thinking_a_turn_extends_into_the_next_prompt_only_with_its_empty_think_block(qwen3, sent_back_with_reasoning):
    """Qwen3's template drops an earlier turn's empty think block unless the turn carries reasoning, so the next
    prompt no longer extends this turn's prompt and reply (its own training sequence). The agent loop sends the
    reasoning "\n" back (src/env/thinking.ts sentBack), which renders as exactly that block."""
    kwargs = {"enable_thinking": False}
    prompt = render_as_vllm(qwen3, HISTORY[:2], TOOLS, kwargs)
    written = '<tool_call>\n{"name": "search_emails", "arguments": {"keywords": ["budget", "draft"]}}\n</tool_call><|im_end|>'
    reply = qwen3(written, add_special_tokens=False)["input_ids"]
    turn = HISTORY[2] | ({"reasoning": "\n"} if sent_back_with_reasoning else {})
    following = render_as_vllm(qwen3, [*HISTORY[:2], turn, HISTORY[3]], TOOLS, kwargs)
    assert (following[: len(prompt) + len(reply)] == prompt + reply) is sent_back_with_reasoning


def test_vllms_message_rules(qwen3):
    """vllm/renderers/chat_utils/chat_message.py: no content is "", arguments become a dict and malformed ones {},
    `reasoning_content` is the message's reasoning."""
    bad = {"role": "assistant", "content": None, "reasoning_content": "hmm", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "read_email", "arguments": "{not json"}}]}  # fmt: skip
    [m] = vllm_messages([bad])
    assert m["content"] == "" and m["tool_calls"][0]["function"]["arguments"] == {} and m["reasoning"] == "hmm"
    assert bad["tool_calls"][0]["function"]["arguments"] == "{not json"  # the request is left as it came
    assert render_as_vllm(qwen3, [{"role": "user", "content": "q"}, bad], TOOLS, None)  # rendered, not a 500


def test_a_template_that_ignores_tools_still_gets_them_flattened(smollm2_folder):
    smollm2 = AutoTokenizer.from_pretrained(smollm2_folder)
    text = smollm2.decode(render_prompt(smollm2, HISTORY[:4], TOOLS, chat_template_kwargs={"enable_thinking": False}))
    assert not renders_tools(smollm2)
    assert "- search_emails(keywords: string[]): Search the inbox." in text
    assert '<tool_call>{"name": "search_emails", "arguments": {"keywords": ["budget", "draft"]}}</tool_call>' in text
    assert "<think>" not in text


@pytest.mark.parametrize("reply, calls, content", [
    ('<think>\nMaybe <tool_call>{"name": "read_email", "arguments": {"message_id": "m9"}}</tool_call>\n</think>\n\n'
     '<tool_call>\n{"name": "read_email", "arguments": {"message_id": "m1"}}\n</tool_call>',
     [{"message_id": "m1"}], '<think>\nMaybe <tool_call>{"name": "read_email", "arguments": {"message_id": "m9"}}</tool_call>\n</think>'),
    ('<think>\nStill thinking <tool_call>{"name": "read_email", "arguments": {"message_id": "m9"}}', [], None),
    ('I should read it.\n</think>\n\n<tool_call>{"name": "read_email", "arguments": {"message_id": "m1"}}</tool_call>',
     [{"message_id": "m1"}], "I should read it.\n</think>"),
])  # fmt: skip
def test_tool_calls_are_parsed_after_a_think_block_only(reply, calls, content):
    got_content, got = parse_tool_calls(reply, TOOLS)
    assert [json.loads(c["function"]["arguments"]) for c in got] == calls
    assert got_content == (content if calls else reply)  # the reasoning stays, for the template to find again


def test_splitting_a_think_block_is_linear():
    """No backtracking: a megabyte of unclosed tags is read in one pass."""
    text = "<think>" + "<think><" * 200_000
    assert split_thinking(text) == (text, "")
    assert split_thinking("no reasoning") == ("", "no reasoning")


@pytest.fixture
def qwen3_server(qwen3_folder, tmp_path):
    base = load_base_model(qwen3_folder, tmp_path / "cache", device="cpu")
    adapters = Adapters(base, tmp_path)
    return TestClient(create_app(adapters, Sampler(adapters, mode="deterministic"), Trainer(adapters), token=None))


def test_the_tiny_qwen3_samples_and_trains_through_the_model_server(qwen3_server):
    kwargs = {"enable_thinking": False}
    r = qwen3_server.post("/v1/chat/completions", json={
        "messages": HISTORY, "tools": TOOLS, "max_tokens": 8, "seed": 1, "chat_template_kwargs": kwargs})  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    tokens = qwen3_server.post("/tokenize", json={"messages": HISTORY, "tools": TOOLS, "chat_template_kwargs": kwargs}).json()
    assert body["prompt_token_ids"] == tokens["tokens"] and 151645 in tokens["eos_token_ids"]
    sampled = body["choices"][0]["token_ids"]
    sequence = {"token_ids": body["prompt_token_ids"] + sampled, "mask": [0] * len(body["prompt_token_ids"]) + [1] * len(sampled),
                "logprobs": [0.0] * len(body["prompt_token_ids"]) + body["choices"][0]["token_logprobs"], "advantage": 1.0}  # fmt: skip
    step = qwen3_server.post("/train/step", json={"adapter": "policy", "step": 1, "sequences": [sequence], "lora": {"rank": 4, "alpha": 8}})
    assert step.status_code == 200, step.text
    r = qwen3_server.post("/v1/chat/completions", json={"model": "policy@step-1", "messages": HISTORY[:2], "max_tokens": 4})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("thinking, reply_starts", [(False, "<tool_call>"), (True, "<think>\n\n</think>\n\n<tool_call>")])
def test_a_demonstration_turn_trains_what_the_sampler_writes_in_its_mode(qwen3_server, qwen3, thinking, reply_starts):
    """What src/env/demonstrations.ts cuts a warm-start turn from: the prompt, and the conversation closed after
    the turn, both in the sampler's mode. Without thinking the prompt already holds the empty think block, so
    the trained reply is the call alone, as the sampler writes it."""
    kwargs = {"enable_thinking": thinking}
    prompt = qwen3_server.post("/tokenize", json={"messages": HISTORY[:2], "tools": TOOLS, "chat_template_kwargs": kwargs}).json()["tokens"]
    closed = qwen3_server.post("/tokenize", json={
        "messages": HISTORY[:3], "tools": TOOLS, "add_generation_prompt": False, "chat_template_kwargs": kwargs}).json()["tokens"]  # fmt: skip
    assert closed[: len(prompt)] == prompt
    assert qwen3.decode(closed[len(prompt) :]).startswith(reply_starts)
