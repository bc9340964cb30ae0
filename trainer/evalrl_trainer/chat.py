"""Chat messages (OpenAI format) → prompt token ids, through the model's own chat template."""
import json

TOOL_INSTRUCTIONS = (
    "You can call these tools. To call one, answer with exactly\n"
    '<tool_call>{{"name": "<tool name>", "arguments": {{...}}}}</tool_call>\n'
    "Tools:\n{tools}"
)


def _template_message(message: dict) -> dict:
    """Assistant tool calls become the `<tool_call>` text the model is taught to write."""
    out = {"role": message["role"], "content": message.get("content") or ""}
    for call in message.get("tool_calls") or []:
        fn = call["function"]
        args = fn.get("arguments") or "{}"
        body = json.dumps({"name": fn["name"], "arguments": json.loads(args) if isinstance(args, str) else args})
        out["content"] += ("\n" if out["content"] else "") + f"<tool_call>{body}</tool_call>"
    return out


def render_prompt(tokenizer, messages: list[dict], tools: list[dict] | None) -> list[int]:
    """Token ids of the prompt. Templates that ignore `tools` get the tool list as a system message."""
    msgs = [_template_message(m) for m in messages]
    if tools:
        probe = tokenizer.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=False)
        if tools[0]["function"]["name"] not in probe:
            listing = "\n".join(json.dumps(t["function"]) for t in tools)
            system = TOOL_INSTRUCTIONS.format(tools=listing)
            if msgs and msgs[0]["role"] == "system":
                msgs[0] = {"role": "system", "content": msgs[0]["content"] + "\n\n" + system}
            else:
                msgs.insert(0, {"role": "system", "content": system})
            tools = None
    ids = tokenizer.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return list(ids)
