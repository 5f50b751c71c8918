"""Pure pieces: tool-call parsing, stream hold-back, grammar, template preparation, records."""

from __future__ import annotations

import json

import pytest
from llama_cpp import LlamaGrammar

from clawd.engine import tool_calls
from clawd.engine.chat_template import ChatTemplate, merge_same_role
from clawd.store.records import output_key

pytestmark = pytest.mark.fast  # no model, no daemon

OFFERED = {"exec", "read"}


def test_parse_tagged_call_with_text_before():
    text = 'Let me run it.\n<tool_call>\n{"name": "exec", "arguments": {"command": "ls"}}\n</tool_call>'
    content, calls = tool_calls.parse_tool_calls(text, OFFERED)
    assert content.strip() == "Let me run it." and calls[0].name == "exec"
    assert json.loads(calls[0].arguments) == {"command": "ls"}


def test_parse_two_tagged_calls_and_unclosed_tail():
    text = '<tool_call>{"name": "read", "arguments": {"path": "a"}}</tool_call><tool_call>{"name": "exec", "arguments": "{\\"command\\": \\"pwd\\"}"}'
    _, calls = tool_calls.parse_tool_calls(text, OFFERED)
    assert [c.name for c in calls] == ["read", "exec"] and json.loads(calls[1].arguments) == {"command": "pwd"}


def test_parse_bare_fenced_and_list():
    assert tool_calls.parse_tool_calls('{"name": "exec", "arguments": {"command": "ls"}}', OFFERED)[1][0].name == "exec"
    content, calls = tool_calls.parse_tool_calls('Sure:\n```json\n{"name": "read", "parameters": {"path": "x"}}\n```', OFFERED)
    assert content == "Sure:" and calls[0].name == "read"
    _, calls = tool_calls.parse_tool_calls('[{"name": "read", "arguments": {}}, {"name": "exec", "arguments": {}}]', OFFERED)
    assert len(calls) == 2


def test_not_a_call_stays_text():
    for text in ('{"name": "rm_rf", "arguments": {}}', "```python\nprint(1)\n```", '<tool_call>{"name": "exec", broken',
                 '{"answer": 42}'):
        content, calls = tool_calls.parse_tool_calls(text, OFFERED)
        assert calls == [] and content == text
    assert tool_calls.parse_tool_calls('{"name": "exec", "arguments": {}}', set()) == ('{"name": "exec", "arguments": {}}', [])


def test_hold_from():
    assert tool_calls.hold_from("Hello there") == len("Hello there")
    assert tool_calls.hold_from("Hello <tool_") == len("Hello ")
    assert tool_calls.hold_from("ok <tool_call>{") == 3
    assert tool_calls.hold_from('  {"na') == 0
    assert tool_calls.hold_from("see ``") == 4
    assert tool_calls.partial_suffix("abc END", ["ENDING"]) == 3


def test_forced_grammar_compiles_for_openclaw_like_schemas():
    schema = {"type": "object", "required": ["command"], "properties": {
        "command": {"type": "string"}, "env": {"type": "object", "patternProperties": {"^.*$": {"type": "string"}}},
        "yieldMs": {"type": "number"}, "host": {"enum": ["auto", "sandbox"], "type": "string"}}}
    tl = [{"type": "function", "function": {"name": "exec", "parameters": schema}},
          {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
    for name in ("exec", None):
        g = tool_calls.forced_call_grammar(tl, name)
        assert g.startswith('root ::= "<tool_call>\\n" clawd-call')
        LlamaGrammar.from_string(g, verbose=False)


def test_merge_same_role_keeps_tool_structure():
    msgs = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "function": {"name": "x", "arguments": "{}"}}]},
            {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}]
    out = merge_same_role(msgs)
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool"] and out[0]["content"] == "a\n\nb"


CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
NATIVE = ("{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}\n{% endif %}"
          "{% for m in messages %}{{ m.role }}: {{ m.content }}{% if m.tool_calls %}{% for c in m.tool_calls %}"
          "[{{ c.function.name }} {{ c.function.arguments | tojson }}]{% endfor %}{% endif %}\n{% endfor %}")


def test_template_without_tools_gets_hermes_block():
    t = ChatTemplate(CHATML)
    tl = [{"type": "function", "function": {"name": "exec", "parameters": {"type": "object"}}}]
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                                                                 "function": {"name": "exec", "arguments": '{"command": "ls"}'}}]},
            {"role": "tool", "content": "file.txt", "tool_call_id": "c1", "name": "exec"}]
    text = t.render(msgs, tl)
    assert "<tools>" in text and '"name": "exec"' in text
    assert '<tool_call>\n{"name": "exec", "arguments": {"command": "ls"}}\n</tool_call>' in text
    assert "<tool_response>\nfile.txt\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_native_template_gets_mapping_arguments():
    t = ChatTemplate(NATIVE)
    assert t.native_tools
    msgs = [{"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
                                                                 "function": {"name": "exec", "arguments": '{"command": "ü"}'}}]}]
    text = t.render(msgs, [{"type": "function", "function": {"name": "exec"}}], add_generation_prompt=False)
    assert text.startswith("TOOLS:exec;") and '[exec {"command": "ü"}]' in text


def test_output_key_survives_round_trip():
    a = output_key("  Hello\n", [("exec", '{"command": "ls", "x": 1}')])
    b = output_key("Hello", [("exec", '{"x":1,"command":"ls"}')])
    assert a == b and a != output_key("Hello", [("exec", '{"command": "pwd"}')])


def test_identical_short_answers_link_to_the_session_that_asked(tmp_path):
    """Two sessions both answered "ok": a follow-up continues the one whose question it carries."""
    from clawd.serve import sessions
    from clawd.store.records import Turn
    from clawd.store.store import Store

    store = Store(tmp_path / "clawd.db")
    system = {"role": "system", "content": "Be brief."}
    made = {}
    for question in ("Is the oven off?", "Did you save the file?"):
        sid = store.open_session(f"auto:{question}")
        t = Turn(session_id=sid, index=0, kind="main", completion_id=f"chatcmpl-{len(made)}",
                 request={"messages": [system, {"role": "user", "content": question}]}, prompt_ids=[1, 2])
        store.insert_turn(t)
        t.text, t.status = "ok", "ok"
        store.finish_turn(t)
        made[question] = t
    for question, t in made.items():
        follow = [system, {"role": "user", "content": question}, {"role": "assistant", "content": "ok"},
                  {"role": "user", "content": "thanks"}]
        link = sessions.link(store, follow, "main", None)
        assert link.session_id == t.session_id and link.next_state.turn_id == t.id


def test_config_file_comes_from_the_home_in_use(tmp_path, monkeypatch):
    """`--home X` reads X/config.json, not the one under $CLAWD_HOME or the default home."""
    from clawd.config import Settings

    mine, other = tmp_path / "mine", tmp_path / "other"
    for d, ctx in ((mine, 1234), (other, 999)):
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"ctx": ctx}))
    monkeypatch.setenv("CLAWD_HOME", str(other))
    assert Settings(home=mine).ctx == 1234
    assert Settings().ctx == 999


def test_top_tokens_likeliest_first_and_never_a_forbidden_one():
    import math

    import numpy as np

    from clawd.engine.engine import top_tokens

    row = np.array([math.log(0.1), math.log(0.6), -np.inf, math.log(0.3)])  # token 2 forbidden by a grammar
    assert top_tokens(row, 0) == ()
    assert [t for t, _ in top_tokens(row, 2)] == [1, 3]
    got = top_tokens(row, 4)  # asks for all four: the forbidden one is left out, not sent as -Infinity
    assert [t for t, _ in got] == [1, 3, 0] and all(math.isfinite(lp) for _, lp in got)
    assert got[0][1] == pytest.approx(math.log(0.6))
