from evalrl_trainer.chat import render_prompt, tool_listing

TOOLS = [
    {"type": "function", "function": {"name": "search_emails", "description": "Search the inbox.", "parameters": {
        "type": "object", "required": ["keywords"], "properties": {
            "keywords": {"type": "array", "items": {"type": "string"}},
            "sent_after": {"type": "string", "description": "YYYY-MM-DD"}}}}},
    {"type": "function", "function": {"name": "read_email", "description": "Read one email.", "parameters": {
        "type": "object", "required": ["message_id"], "properties": {"message_id": {"type": "string"}}}}},
]  # fmt: skip


def test_the_tool_listing_is_one_compact_line_per_tool():
    assert tool_listing(TOOLS) == (
        "- search_emails(keywords: string[], sent_after?: string (YYYY-MM-DD)): Search the inbox.\n"
        "- read_email(message_id: string): Read one email."
    )


def test_a_template_that_ignores_tools_gets_the_listing_even_when_the_prompt_names_a_tool(smollm2_folder):
    """SmolLM2's template ignores `tools`; a system prompt that mentions search_emails must not hide that."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder)
    messages = [{"role": "system", "content": "Use search_emails to answer."}, {"role": "user", "content": "hi"}]
    text = tokenizer.decode(render_prompt(tokenizer, messages, TOOLS))
    assert "<tool_call>" in text and "- read_email(message_id: string)" in text
    assert text.index("- search_emails(") < text.index("Use search_emails")  # before the system message's own text
    plain = tokenizer.decode(render_prompt(tokenizer, messages, None))
    assert "<tool_call>" not in plain
