"""A chat request's messages and tools as vLLM's OpenAI server hands them to the chat template (vLLM 0.33.0, read in
its wheel), so that the model server renders the same history into the same prompt tokens.

Covered: text content, assistant tool calls and reasoning, tool results, names. Not covered (no caller sends
them): image and audio parts, the `developer` role, Claude Code's billing header in system messages."""
import copy
import json


def _text(content) -> str:
    """vllm/renderers/chat_utils/chat_message.py parse_chat_message_content_parts, for a template whose content
    format is "string" (it never loops over a message's content, as Qwen3's and SmolLM2's do not): no content is
    "", a string stays, text parts are joined with newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text":
            texts.append(part.get("text", ""))
        else:
            raise ValueError("messages: only text content parts are supported")
    return "\n".join(texts)


def _message(message: dict) -> dict:
    """parse_chat_message_content (same file), after ChatCompletionRequest._normalize_messages_before
    (vllm/entrypoints/openai/chat_completion/protocol.py) renamed `reasoning_content` to `reasoning`."""
    role = message["role"]
    reasoning = message.get("reasoning")
    if reasoning is None:
        reasoning = message.get("reasoning_content")
    out = {"role": role, "content": _text(message.get("content"))}
    if role == "assistant":
        if message.get("tool_calls") is not None:
            out["tool_calls"] = copy.deepcopy(list(message["tool_calls"]))
        if reasoning is not None:
            out["reasoning"] = out["reasoning_content"] = reasoning
    elif role == "tool" and "tool_call_id" in message:
        out["tool_call_id"] = message["tool_call_id"]
    for key in ("name", "task"):
        if isinstance(message.get(key), str):
            out[key] = message[key]
    return out


def _arguments(raw) -> dict:
    """chat_message.py _postprocess_messages: templates get a call's arguments as a dict; none, malformed JSON and
    JSON that is not an object all become {} (a malformed call in the history must not fail every later turn)."""
    if not raw:
        return {}
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def vllm_messages(messages: list[dict]) -> list[dict]:
    """The conversation vLLM renders: each message parsed, then _postprocess_messages's tool-call rule (empty
    `tool_calls` dropped, arguments parsed; a call that is not a function is refused)."""
    out = [_message(m) for m in messages]
    for m in out:
        calls = m.get("tool_calls")
        if m["role"] != "assistant" or not isinstance(calls, list):
            continue
        if not calls:
            del m["tool_calls"]
        for call in calls:
            if not isinstance(call, dict):
                raise ValueError("assistant tool_calls entries must be objects.")
            function = call.get("function")
            if call.get("type", "function") != "function" or not isinstance(function, dict):
                raise ValueError("chat completions only support assistant tool_calls of type 'function'.")
            function["arguments"] = _arguments(function.get("arguments"))
    return out


def vllm_tool(tool: dict) -> dict:
    """vllm/entrypoints/openai/chat_completion/protocol.py ChatCompletionToolsParam.model_dump(): its fields in
    their declared order (the template dumps them as JSON, so order is part of the prompt), unknown keys dropped,
    a missing description or parameters as null, `strict` and `defer_loading` only when set."""
    fn = tool["function"]
    defer = tool.get("defer_loading")
    function = {"name": fn["name"], "description": fn.get("description"), "parameters": fn.get("parameters")}
    for key, value in (("strict", fn.get("strict")), ("defer_loading", fn.get("defer_loading", defer))):
        if value is not None:
            function[key] = value
    return {"type": "function", "function": function} | ({} if defer is None else {"defer_loading": defer})
