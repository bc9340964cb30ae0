"""Chat messages (OpenAI format) → prompt token ids, through the model's own chat template."""
import json

# In words, not as a template to fill in: small models copy a template's placeholders literally.
TOOL_INSTRUCTIONS = (
    "You can call these tools. To call one, reply with <tool_call>, then a JSON object with the tool's "
    'name as "name" and its parameters as "arguments", then </tool_call>.\n'
    "Tools:\n{tools}"
)


def _template_message(message: dict) -> dict:
    """Assistant tool calls become the `<tool_call>` text the model is taught to write."""
    out = {"role": message["role"], "content": message.get("content") or ""}
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        body = json.dumps({"name": fn.get("name", ""), "arguments": _arguments(fn.get("arguments"))})
        out["content"] += ("\n" if out["content"] else "") + f"<tool_call>{body}</tool_call>"
    return out


def _arguments(raw):
    """A call's arguments as the model wrote them: parsed when they are JSON, else the raw text (a malformed
    call a client sends back is history to render, not an error of this server)."""
    if not isinstance(raw, str):
        return raw if raw is not None else {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _type_of(schema: dict) -> str:
    kind = schema.get("type", "any")
    if kind == "array":
        return f"{_type_of(schema.get('items', {}))}[]"
    return kind if isinstance(kind, str) else "|".join(kind)


def tool_listing(tools: list[dict]) -> str:
    """One line per tool, `name(arg: type, optional?: type): description`: a few dozen tokens per tool where
    the JSON schemas take hundreds, which matters in a small model's context."""
    lines = []
    for tool in tools:
        fn = tool["function"]
        params = fn.get("parameters") or {}
        required = set(params.get("required", []))
        args = []
        for name, schema in (params.get("properties") or {}).items():
            note = f" ({schema['description']})" if schema.get("description") else ""
            args.append(f"{name}{'' if name in required else '?'}: {_type_of(schema)}{note}")
        lines.append(f"- {fn['name']}({', '.join(args)}): {fn.get('description', '')}".rstrip(": "))
    return "\n".join(lines)


def render_prompt(tokenizer, messages: list[dict], tools: list[dict] | None, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of the prompt. A template that ignores `tools` (it renders the same with and without them)
    gets the compact tool listing in the system message instead. Without the generation prompt it is the
    conversation as the template closes it (what a demonstration's assistant turns are cut from)."""
    msgs = [_template_message(m) for m in messages]
    if tools:
        with_tools = tokenizer.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=False)
        without = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        if with_tools == without:
            # The listing goes first: prompts that share it share a cacheable prefix (prefix_cache.py).
            system = TOOL_INSTRUCTIONS.format(tools=tool_listing(tools))
            if msgs and msgs[0]["role"] == "system":
                msgs[0] = {"role": "system", "content": system + "\n\n" + msgs[0]["content"]}
            else:
                msgs.insert(0, {"role": "system", "content": system})
            tools = None
    ids = tokenizer.apply_chat_template(msgs, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True)
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return list(ids)
