import json

from evalrl_trainer.tool_calls import parse_tool_calls


def test_tagged_calls_and_surrounding_text():
    text = 'Let me look.\n<tool_call>\n{"name": "search_emails", "arguments": {"keywords": ["lease"]}}\n</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content == "Let me look."
    assert calls[0]["function"]["name"] == "search_emails"
    assert json.loads(calls[0]["function"]["arguments"]) == {"keywords": ["lease"]}


def test_several_tagged_calls_and_an_unterminated_last_one():
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "parameters": {"x": 1}}'
    _, calls = parse_tool_calls(text)
    assert [c["function"]["name"] for c in calls] == ["a", "b"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"x": 1}


def test_a_last_call_cut_off_by_the_token_limit_is_dropped_and_the_complete_ones_stand():
    # As a warm-started SmolLM2 judge wrote it: its calls, then the next turn's verdict, cut at 160 tokens.
    calls_text = '<tool_call>{"name": "load_skill", "arguments": {"skill": "grounding"}}</tool_call>\n' + \
        '<tool_call>{"name": "run_verifier", "arguments": {"verifier": "sources_are_real"}}</tool_call>\n</tool_call>\n'
    content, calls = parse_tool_calls(calls_text + '<tool_call>{"name": "final_answer", "s')
    assert [c["function"]["name"] for c in calls] == ["load_skill", "run_verifier"]
    assert content is None
    for broken in ('<tool_call>{"name": "final_answer", "s',  # alone: nothing complete, still malformed
                   calls_text + '<tool_call>{broken}</tool_call>'):  # terminated but broken: malformed
        content, calls = parse_tool_calls(broken)
        assert calls == [] and content == broken


def test_near_miss_opening_tags_seen_from_a_warm_started_smollm2():
    for tag in ("<tool_call_en>", "<tool_call_ref_emails>"):
        _, calls = parse_tool_calls(f'{tag}{{"name": "search_emails", "arguments": {{"keywords": ["a"]}}}}</tool_call>')
        assert calls[0]["function"]["name"] == "search_emails"
    content, calls = parse_tool_calls('<tool_call_enron.com"}}</tool_call>')  # no call inside: still malformed
    assert calls == [] and content == '<tool_call_enron.com"}}</tool_call>'


def test_flat_calls_with_the_closing_braces_of_a_skipped_arguments_object():
    # As a warm-started SmolLM2 judge wrote its verdicts and verifier calls in the ladder at a4ba025: 34 of its 40
    # held-out judgements reached no verdict, most of them for this form.
    verdict = ('<tool_call>{"name": "final_answer", "reason": "sources_are_real passed", "satisfied_count": 3, '
               '"total_count": 3, "score": 1, "confidence": 0.8, "used_resources": []}}</tool_call>')
    content, calls = parse_tool_calls(verdict)
    assert content is None and calls[0]["function"]["name"] == "final_answer"
    assert json.loads(calls[0]["function"]["arguments"]) == {
        "reason": "sources_are_real passed", "satisfied_count": 3, "total_count": 3, "score": 1,
        "confidence": 0.8, "used_resources": []}
    _, calls = parse_tool_calls('<tool_call>{"name": "run_verifier", "verifier": "sources_are_real"}}</tool_call>')
    assert json.loads(calls[0]["function"]["arguments"]) == {"verifier": "sources_are_real"}
    for text in ('<tool_call>{"name": "run_verifier", "answer_in_cited_email"}}</tool_call>',  # not an object
                 '<tool_call>{"name": "run_verifier", "verifier": "x"} and more</tool_call>'):  # text after it
        content, calls = parse_tool_calls(text)
        assert calls == [] and content == text


def test_bare_and_fenced_json():
    for text in ('{"name": "read_email", "arguments": {"message_id": "<1@x>"}}',
                 '```json\n{"name": "read_email", "arguments": "{\\"message_id\\": \\"<1@x>\\"}"}\n```'):
        content, calls = parse_tool_calls(text)
        assert content is None and calls[0]["function"]["name"] == "read_email"


def test_malformed_calls_stay_text():
    for text in ("<tool_call>{not json}</tool_call>", '{"arguments": {}}', '{"name": "x", "arguments": [1]}', "plain answer"):
        content, calls = parse_tool_calls(text)
        assert calls == [] and content == text


TOOLS = [
    {"type": "function", "function": {"name": "run_verifier", "parameters": {"properties": {"verifier": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "search_emails", "parameters": {
        "properties": {"keywords": {"type": "array"}, "from": {"type": "string"}}}}},
]


def test_python_style_calls_of_offered_tools():
    # As a shortly warm-started SmolLM2 judge wrote them, after the listing's `run_verifier(verifier: string)`.
    text = '<tool_call>run_verifier("answer_in_cited_email")</tool_call>\n<tool_call>search_emails(keywords=["gas"], from="a@b.com")</tool_call>'
    content, calls = parse_tool_calls(text, TOOLS)
    assert content is None
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [
        {"verifier": "answer_in_cited_email"}, {"keywords": ["gas"], "from": "a@b.com"}]
    _, calls = parse_tool_calls('run_verifier(verifier="sources_are_real")', TOOLS)  # untagged
    assert json.loads(calls[0]["function"]["arguments"]) == {"verifier": "sources_are_real"}


def test_python_style_calls_that_do_not_fit_stay_malformed():
    for text in ('<tool_call>run_verifier("no_verifier", "sources_are_real")</tool_call>',  # more arguments than it has
                 '<tool_call>load_skill("grounding")</tool_call>',  # a tool the request does not offer
                 '<tool_call>run_verifier(open("x"))</tool_call>',  # not a literal
                 '<tool_call>run_verifier(**x)</tool_call>', 'print("hello")', 'run_verifier("x") and more',
                 'run_verifier("x") + run_verifier("y")',  # not one call
                 'run_verifier(b"x")', 'run_verifier({1, 2})', 'run_verifier(1e999)'):  # no JSON form
        content, calls = parse_tool_calls(text, TOOLS)
        assert calls == [] and content == text, text
    assert parse_tool_calls('run_verifier("x")') == ('run_verifier("x")', [])  # no tools offered: text
