"""Chat messages (OpenAI format) → prompt token ids, through the model's own chat template: as vLLM renders them
where the template renders tools (Qwen3's), flattened to text where it ignores them (SmolLM2's)."""
import json

from .vllm_messages import vllm_messages, vllm_tool

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


PROBE_TOOL = {"type": "function", "function": {"name": "probe", "description": "", "parameters": {"type": "object"}}}


def renders_tools(tokenizer) -> bool:
    """Whether the chat template shows the model its tools (Qwen3's does; SmolLM2's renders the same without)."""
    probe = [{"role": "user", "content": "hi"}]
    with_tool = tokenizer.apply_chat_template(probe, tools=[PROBE_TOOL], add_generation_prompt=True, tokenize=False)
    return with_tool != tokenizer.apply_chat_template(probe, add_generation_prompt=True, tokenize=False)


def vllm_prompt_text(tokenizer, messages: list[dict], tools: list[dict] | None, chat_template_kwargs: dict | None,
                     add_generation_prompt: bool = True) -> str:  # fmt: skip
    """The prompt text of vLLM's chat endpoint (add_generation_prompt False: its /tokenize with that flag).
    vllm/renderers/online_renderer.py preprocess_chat passes the tools as `tool.model_dump()` and tokenize=False;
    renderers/params.py merge_kwargs drops the request's chat_template_kwargs set to None or "auto", lets them
    override the tools, and is overridden by the request's add_generation_prompt and continue_final_message
    (chat_completion/protocol.py build_chat_params); renderers/hf.py safe_apply_chat_template then calls
    apply_chat_template with return_dict=False."""
    kwargs = {k: v for k, v in (chat_template_kwargs or {}).items() if v not in (None, "auto")}
    tool_dicts = [vllm_tool(t) for t in tools] if tools is not None else None
    kwargs = {"tools": tool_dicts, **kwargs, "add_generation_prompt": add_generation_prompt, "continue_final_message": False}
    return tokenizer.apply_chat_template(vllm_messages(messages), tokenize=False, return_dict=False, **kwargs)


def render_as_vllm(tokenizer, messages: list[dict], tools: list[dict] | None, chat_template_kwargs: dict | None) -> list[int]:
    """The prompt token ids vLLM's OpenAI server samples from for a chat request: its text (vllm_prompt_text)
    encoded without special tokens, as renderers/base.py _tokenize_prompt does with the request's
    add_special_tokens (default False, chat_completion/protocol.py ChatCompletionRequest)."""
    return _encode(tokenizer, vllm_prompt_text(tokenizer, messages, tools, chat_template_kwargs))


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def render_prompt(tokenizer, messages: list[dict], tools: list[dict] | None, add_generation_prompt: bool = True,
                  chat_template_kwargs: dict | None = None) -> list[int]:  # fmt: skip
    """Token ids of the prompt: vLLM's, token for token, where the template renders tools, so a run samples the
    same prompts on either back-end. A template that ignores `tools` gets the calls flattened into the text the
    model is taught to write and the compact tool listing in the system message. Without the generation prompt
    it is the conversation as the template closes it (what a demonstration's assistant turns are cut from)."""
    if renders_tools(tokenizer):
        return _encode(tokenizer, vllm_prompt_text(tokenizer, messages, tools, chat_template_kwargs, add_generation_prompt))
    msgs = [_template_message(m) for m in messages]
    if tools:
        # The listing goes first: prompts that share it share a cacheable prefix (prefix_cache.py).
        system = TOOL_INSTRUCTIONS.format(tools=tool_listing(tools))
        if msgs and msgs[0]["role"] == "system":
            msgs[0] = {"role": "system", "content": system + "\n\n" + msgs[0]["content"]}
        else:
            msgs.insert(0, {"role": "system", "content": system})
    ids = tokenizer.apply_chat_template(
        msgs, add_generation_prompt=add_generation_prompt, tokenize=True, **(chat_template_kwargs or {})
    )
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return list(ids)
