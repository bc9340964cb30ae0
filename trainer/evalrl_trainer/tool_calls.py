"""Tool calls recovered from a model's text: the Qwen/Hermes `<tool_call>{…}</tool_call>` form, or bare JSON."""
import json
import re
import uuid

# The opening tag also in the near-misses a small model writes after a short warm start (`<tool_call_en>`):
# `<tool_call>` is five tokens for SmolLM2, and its prior for `_` after `call` outlasts a few SFT steps.
TAGGED = re.compile(r"<tool_call\w*>\s*(.*?)\s*(</tool_call>|$)", re.DOTALL)
FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def _as_call(obj) -> dict | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return {
        "id": f"call_{uuid.uuid4().hex[:12]}",
        "type": "function",
        "function": {"name": obj["name"], "arguments": json.dumps(args)},
    }


def parse_tool_calls(text: str) -> tuple[str | None, list[dict]]:
    """(content, tool_calls): text outside the tool calls stays content; unparseable calls stay text.

    A last call that is both unterminated and unparseable was cut off by the token limit: it is dropped and the
    complete calls before it stand (a small model often starts its next turn's call in the same reply).
    """
    tagged = TAGGED.findall(text)
    if tagged:
        calls = []
        for i, (block, closing) in enumerate(tagged):
            try:
                call = _as_call(json.loads(block))
            except json.JSONDecodeError:
                call = None
            if call is None and not closing and i == len(tagged) - 1 and calls:
                break
            if call is None:
                return text, []  # one broken call: hand the whole text back, the agent counts it as malformed
            calls.append(call)
        rest = TAGGED.sub("", text).replace("</tool_call>", "").strip()  # a stray closing tag is no content
        return (rest or None), calls
    stripped = text.strip()
    fenced = FENCE.match(stripped)
    candidate = fenced.group(1) if fenced else stripped
    if candidate.startswith("{") or candidate.startswith("["):
        try:
            obj = json.loads(candidate)
        except json.JSONDecodeError:
            return text, []
        items = obj if isinstance(obj, list) else [obj]
        calls = [_as_call(item) for item in items]
        if calls and all(c is not None for c in calls):
            return None, calls
    return text, []
