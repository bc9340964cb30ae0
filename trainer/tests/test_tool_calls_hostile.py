"""Issue 47: hostile model output is text (a malformed call costs a reward), never a 500, and parsing is linear."""
import time

import pytest

from evalrl_trainer.tool_calls import parse_tool_calls
from evalrl_trainer.vllm_double import hermes_tool_calls

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"properties": {"q": {}}}}}]
DEEP = 100_000
HOSTILE = {
    "many unclosed tags": "<tool_call>" * 50_000 + "x",
    "many near-miss tags": "<tool_call_x " * 50_000,
    "tag then spaces": "<tool_call>" + " " * 300_000 + "x",
    "deep json in a tag": "<tool_call>" + '{"a":' * DEEP + "1" + "}" * DEEP + "</tool_call>",
    "deep list in a tag": "<tool_call>" + "[" * DEEP + "]" * DEEP,
    "deep bare json": "[" * DEEP + "]" * DEEP,
    "deep arguments": '<tool_call>{"name": "search", "arguments": ' + "[" * DEEP + "]" * DEEP + "}</tool_call>",
    "deep string arguments": '{"name": "search", "arguments": "' + "[" * DEEP + "]" * DEEP + '"}',
    "deep pythonic": "search(" + "[" * DEEP + "]" * DEEP + ")",
    "fence then spaces": "```" + " " * 300_000 + "x```",
    "huge number": '<tool_call>{"name": "search", "arguments": {"q": 1e400}}</tool_call>',
    "lone surrogate and NUL": "<tool_call>\ud800\x00</tool_call>",
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_output_is_text_or_calls_never_an_exception(name):
    started = time.monotonic()
    content, calls = parse_tool_calls(HOSTILE[name], TOOLS)
    assert isinstance(calls, list)
    assert content is None or isinstance(content, str)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("name", HOSTILE)
def test_hermes_copy_falls_back_to_text(name):
    content, calls = hermes_tool_calls(HOSTILE[name])
    assert isinstance(calls, list)


def test_deep_nesting_is_a_malformed_reply():
    text = HOSTILE["deep json in a tag"]
    assert parse_tool_calls(text, TOOLS) == (text, [])
    assert hermes_tool_calls(text) == (text, [])


def test_scanner_keeps_the_old_reading():
    content, calls = parse_tool_calls('hi <tool_call_en> {"name": "search", "arguments": {"q": "a"}} </tool_call> <tool_ca', TOOLS)
    assert content == "hi  <tool_ca" and [c["function"]["name"] for c in calls] == ["search"]
    content, calls = parse_tool_calls('```json\n{"name": "search", "arguments": {"q": "a"}}\n```', TOOLS)
    assert content is None and len(calls) == 1
