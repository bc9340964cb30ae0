"""bench/qwen3_sequences: the share of multi-turn agent episodes that train as one sequence on Qwen3's chat
template (src/grpo/trainingSequences.ts: a turn joins the sequence only when its prompt extends the previous
turn's prompt and reply). Episodes of 3-6 turns with tool calls are rendered as vLLM renders them
(chat.render_as_vllm, the real tokenizer of tests/fixtures/qwen3), their replies written as Qwen3 writes them
and sent back as the agent loop does (vLLM's hermes parser: the text before the first call is the content).
Writes bench/results/qwen3_sequences.json.

    .venv/bin/python bench/qwen3_sequences.py
"""
import json
import sys
import tempfile
from pathlib import Path

from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "trainer"))
from evalrl_trainer.chat import render_as_vllm  # noqa: E402
from evalrl_trainer.tiny_model import write_qwen3_tokenizer  # noqa: E402

TOOLS = [
    {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {k: {"type": t} for k, t in params.items()}, "required": list(params)}}}
    for name, description, params in [
        ("search_emails", "Search the inbox; every keyword must appear.", {"keywords": "array"}),
        ("read_email", "Read one email of the inbox by its message id.", {"message_id": "string"}),
        ("return_final_answer", "Give the final answer with the message ids it comes from.", {"answer": "string", "sources": "array"}),
    ]
]  # fmt: skip
HITS = "\n".join(f"m{i} | 2001-0{i}-1{i} | jane{i}@enron.com | Budget draft v{i} | the **budget** **draft** for Q{i}" for i in range(1, 6))
EMAIL = "id: m{n}\nfrom: jane@enron.com\nto: me@enron.com\ndate: 2001-03-05\nsubject: Budget draft\n\nHi, the budget draft is attached. Jane"
# (call, its tool result): an episode is a prefix of searches and reads that ends with the answer.
STEPS = [
    (("search_emails", {"keywords": ["budget"]}), HITS),
    (("search_emails", {"keywords": ["budget", "draft"]}), HITS),
    (("read_email", {"message_id": "m1"}), EMAIL.format(n=1)),
    (("read_email", {"message_id": "m2"}), EMAIL.format(n=2)),
    (("search_emails", {"keywords": ["draft", "jane"]}), HITS),
]
ANSWER = (("return_final_answer", {"answer": "2001-03-05", "sources": ["m1"]}), "Answer recorded.")
START = [
    {"role": "system", "content": "You are an email search agent. Find the answer with search_emails and read_email, then call return_final_answer."},
    {"role": "user", "content": "When did Jane send me the budget draft?"},
]  # fmt: skip


def reply(name: str, args: dict, thinking: bool, turn: int) -> str:
    """A turn as Qwen3 writes it: its reasoning when it thinks, one call in the hermes format, end of turn."""
    reasoning = f"<think>\nStep {turn}: {name} should find it.\n</think>\n\n" if thinking else ""
    return f'{reasoning}<tool_call>\n{json.dumps({"name": name, "arguments": args}, ensure_ascii=False)}\n</tool_call><|im_end|>'


def sent_back(text: str, name: str, args: dict) -> dict:
    """The assistant message the agent loop stores: vLLM's hermes parser keeps the text before the first call."""
    content = text[: text.find("<tool_call>")]
    call = {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}
    return {"role": "assistant", "content": content or None, "tool_calls": [call]}


# What src/env/thinking.ts sentBack adds to a turn sampled without thinking.
EMPTY_REASONING = {"reasoning": "\n"}


NO_CALL = 'Error: no tool call found. Reply with <tool_call>, a JSON object with "name" and "arguments", and </tool_call>.'


def episode(turns: int, thinking: bool, echo: bool, malformed_at: int | None) -> list[tuple[str, list[dict]]]:
    """Each turn's reply text and the messages the loop appends after it: searches and reads, then the answer;
    optionally one reply without a call, which the loop answers with an error as the user (agentLoop.ts)."""
    out = []
    extra = EMPTY_REASONING if echo else {}
    for turn, ((name, args), result) in enumerate([*STEPS[: turns - 1], ANSWER]):
        if turn == malformed_at:
            text = reply(name, args, thinking, turn).split("<tool_call>")[0] + "I will search.<|im_end|>"
            message = {"role": "assistant", "content": text.removesuffix("<|im_end|>")}
            out.append((text, [message | extra, {"role": "user", "content": NO_CALL}]))
        text = reply(name, args, thinking, turn)
        out.append((text, [sent_back(text, name, args) | extra, {"role": "tool", "tool_call_id": "c", "content": result}]))
    return out


def sequences(tokenizer, turns: list[tuple[str, list[dict]]], thinking: bool) -> int:
    """How many training sequences an episode makes (1: it trains as one)."""
    messages, count, trained = list(START), 0, None
    for text, appended in turns:
        prompt = render_as_vllm(tokenizer, messages, TOOLS, {"enable_thinking": thinking})
        count += 0 if trained is not None and prompt[: len(trained)] == trained else 1
        trained = prompt + tokenizer(text, add_special_tokens=False)["input_ids"]
        messages += appended
    return count


def main():
    tokenizer = AutoTokenizer.from_pretrained(write_qwen3_tokenizer(Path(tempfile.mkdtemp())))
    figures = {}
    variants = [
        ("thinking off, history as vLLM returns it", False, False, None),
        ("thinking off, the agent loop's history (empty reasoning sent back)", False, True, None),
        ("thinking off, the agent loop's history, one malformed reply", False, True, 1),
        ("thinking on", True, False, None),
        ("thinking on, one malformed reply", True, False, 1),
    ]
    for label, thinking, echo, malformed in variants:
        counts = {turns: sequences(tokenizer, episode(turns, thinking, echo, malformed), thinking) for turns in range(3, 7)}
        share = sum(c == 1 for c in counts.values()) / len(counts)
        figures[label] = {"sequences_by_turns": counts, "share_one_sequence": share}
        print(f"{label}: {share:.2f} of episodes train as one sequence; sequences per episode by turns {counts}")
    (ROOT / "bench" / "results" / "qwen3_sequences.json").write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
