"""Tool calls recovered from a model's text: the Qwen/Hermes `<tool_call>{…}</tool_call>` form, bare JSON, or a
Python-style call `name(arg, key=value)` of a tool the request offers (vLLM's "pythonic" form)."""
import ast
import json
import keyword
import re
import uuid

# The opening tag also in the near-misses a small model writes after a short warm start (`<tool_call_en>`):
# `<tool_call>` is five tokens for SmolLM2, and its prior for `_` after `call` outlasts a few SFT steps.
# Found by plain scans (`_tagged`), not the regex `<tool_call\w*>\s*(.*?)\s*(</tool_call>|$)`, which backtracks
# quadratically on many unclosed tags: every text function here is linear in the model's output.
OPEN_TAG, CLOSE_TAG = "<tool_call", "</tool_call>"


def _tagged(text: str) -> tuple[list[tuple[str, str]], str]:
    """([(block, closing)], rest): each `<tool_call…>` block up to the next `</tool_call>` (closing) or the end of
    the text (closing ""), stripped, and the text outside the blocks."""
    blocks, rest, pos = [], [], 0
    while (start := text.find(OPEN_TAG, pos)) != -1:
        j = start + len(OPEN_TAG)
        while j < len(text) and (text[j].isalnum() or text[j] == "_"):  # the tag's \w* near-miss suffix
            j += 1
        if j >= len(text) or text[j] != ">":
            rest.append(text[pos:j])
            pos = j
            continue
        rest.append(text[pos:start])
        end = text.find(CLOSE_TAG, j + 1)
        if end == -1:
            blocks.append((text[j + 1 :].strip(), ""))
            pos = len(text)
            break
        blocks.append((text[j + 1 : end].strip(), CLOSE_TAG))
        pos = end + len(CLOSE_TAG)
    rest.append(text[pos:])
    return blocks, "".join(rest)


def _unfenced(text: str) -> str:
    """The inside of a ```json … ``` fence (the whole text is one), else the text."""
    if len(text) < 6 or not text.startswith("```") or not text.endswith("```"):
        return text
    inner = text[3:-3]
    return (inner[4:] if inner.startswith("json") else inner).strip()


def _as_call(obj) -> dict | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    # Without "arguments" the other keys are the arguments: the flat `{"name": …, "reason": …}` a warm-started
    # SmolLM2 judge writes when it skips the `"arguments": {` it was shown.
    flat = {k: v for k, v in obj.items() if k != "name"}
    args = obj.get("arguments", obj.get("parameters", flat))
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


PYTHONIC = re.compile(r"\s*([A-Za-z_]\w*)\s*\((.*)\)\s*", re.DOTALL)
# A Python keyword used as an argument name (`from=`) is renamed for the parser and back.
KEYWORD_ARGUMENT = re.compile(r"(^|,)(\s*)(" + "|".join(keyword.kwlist) + r")(\s*=)")


def _pythonic(block: str, tools: list[dict]) -> dict | None:
    """`run_verifier("x")` or `search_emails(keywords=["a"], from="b@c")`: the call a small model writes after the
    tool listing's signatures. Positional arguments take the tool's parameters in order; values must be literals."""
    match = PYTHONIC.fullmatch(block)
    params = {t["function"]["name"]: list((t["function"].get("parameters") or {}).get("properties") or {}) for t in tools}
    if not match or match.group(1) not in params:
        return None
    names = params[match.group(1)]
    source = "f(" + KEYWORD_ARGUMENT.sub(r"\1\2\3_\4", match.group(2)) + ")"
    try:
        call = ast.parse(source, mode="eval").body
        if not isinstance(call, ast.Call) or len(call.args) > len(names) or any(k.arg is None for k in call.keywords):
            return None
        args = {name: ast.literal_eval(node) for name, node in zip(names, call.args)}
        for k in call.keywords:
            unrenamed = k.arg[:-1] if k.arg.endswith("_") and keyword.iskeyword(k.arg[:-1]) else k.arg
            args[unrenamed] = ast.literal_eval(k.value)
        json.dumps(args, allow_nan=False)  # literals JSON has no form for (bytes, sets, inf) make no call
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None
    return {"name": match.group(1), "arguments": args}


EXTRA_CLOSING = re.compile(r"[}\s]*")


def _parse_call(block: str, tools: list[dict]) -> dict | None:
    """One tagged call. Closing braces after its JSON object are the ones left over from a skipped
    `"arguments": {` (the flat form above); anything else after it makes the call malformed."""
    try:
        obj, end = json.JSONDecoder().raw_decode(block)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError; deep nesting overflows the stack
        return _as_call(_pythonic(block, tools))
    return _as_call(obj) if EXTRA_CLOSING.fullmatch(block, end) else None


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def split_thinking(text: str) -> tuple[str, str]:
    """(thinking, answer): a reply's leading reasoning block (Qwen3's `<think>…</think>`) and what follows it. A
    block the token limit cut off is all thinking; a block whose opening tag the prompt already holds ends at the
    first `</think>`. Plain searches, linear in the text."""
    start = len(text) - len(text.lstrip())
    end = text.find(THINK_CLOSE, start)
    if text.startswith(THINK_OPEN, start):
        return (text, "") if end == -1 else (text[: end + len(THINK_CLOSE)], text[end + len(THINK_CLOSE) :])
    if end != -1 and THINK_OPEN not in text[:end]:
        return text[: end + len(THINK_CLOSE)], text[end + len(THINK_CLOSE) :]
    return "", text


def parse_tool_calls(text: str, tools: list[dict] | None = None) -> tuple[str | None, list[dict]]:
    """(content, tool_calls): text outside the tool calls stays content; unparseable calls stay text. A leading
    think block is reasoning, not calls: a call written inside it is not made, and the block stays in the
    content, where the chat template finds the reasoning again.

    A last call that is both unterminated and unparseable was cut off by the token limit: it is dropped and the
    complete calls before it stand (a small model often starts its next turn's call in the same reply).
    """
    thinking, answer = split_thinking(text)
    try:
        content, calls = _answer_calls(answer, tools)
    except Exception:  # RecursionError (deep nesting), MemoryError, ValueError…: a malformed reply is text, not a 500
        return text, []
    if not calls:
        return text, []
    return (thinking + (content or "")).strip() or None, calls


def _answer_calls(text: str, tools: list[dict] | None) -> tuple[str | None, list[dict]]:
    tagged, outside = _tagged(text)
    if tagged:
        calls = []
        for i, (block, closing) in enumerate(tagged):
            call = _parse_call(block, tools or [])
            if call is None and not closing and i == len(tagged) - 1 and calls:
                break
            if call is None:
                return text, []  # one broken call: hand the whole text back, the agent counts it as malformed
            calls.append(call)
        rest = outside.replace(CLOSE_TAG, "").strip()  # a stray closing tag is no content
        return (rest or None), calls
    stripped = text.strip()
    candidate = _unfenced(stripped)
    if candidate.startswith("{") or candidate.startswith("["):
        try:
            obj = json.loads(candidate)
        except json.JSONDecodeError:
            return text, []
        items = obj if isinstance(obj, list) else [obj]
        calls = [_as_call(item) for item in items]
        if calls and all(c is not None for c in calls):
            return None, calls
    call = _as_call(_pythonic(stripped, tools or []))
    return (None, [call]) if call else (text, [])
