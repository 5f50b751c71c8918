"""Tool calls in `auto` mode: free text until a call begins, then a grammar of the offered tools
(tool_calls.CallTrigger, grammar.GrammarMask, engine.Engine._constrained) on the bundled model.

The start is forced with a few-shot prompt: the model has just answered `{"name": "execute", …}`
and is asked again, so it begins the same object. `execute` is not offered; `exec` is. This is
the failure seen with stock OpenClaw (issue 14): free, the answer is an unusable `execute`
object; under the grammar it is an `exec` call.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import MODEL, Daemon

from clawd.engine import tool_calls
from clawd.engine.engine import Engine, GenInfo, Sampling
from clawd.engine.grammar import GrammarMask
from clawd.engine.sampling import log_softmax

TOOLS = [
    {"type": "function", "function": {"name": "exec", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
        "required": ["command"]}}},
    {"type": "function", "function": {"name": "read", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
]
OFFERED = {"exec", "read"}
SHOT = '{"name": "execute", "arguments": {"command": "ls"}}'
RAW = ("<|im_start|>user\nList the files.<|im_end|>\n<|im_start|>assistant\n" + SHOT + "<|im_end|>\n"
       "<|im_start|>user\nList the files again.<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.fast
def test_trigger_finds_where_a_call_begins():
    start = tool_calls.CallTrigger.start
    assert start(b"Sure.\n<tool_call>") == (6, "clawd-tagged")
    assert start(b'  {"name"') == (2, "clawd-call")
    assert start(b'{\n    "name"') == (0, "clawd-call")  # pretty-printed
    assert start(b'Run it:\n```json\n{"name": "ex') == (8, "clawd-fenced")
    # after a turn header the model wrote itself (Qwen2.5-0.5B under OpenClaw)
    assert start(b'<|im_start|>\n{"name"') == (13, "clawd-call")
    assert start(b'<|im_start|>assistant\n{"name"') == (22, "clawd-call")
    # not (yet) a call: a partial key, another key, JSON inside prose, a plain fence
    for text in (b'{"na', b'{"query": 1}', b'The object {"name": 1} is', b"```python\nprint(1)\n```", b"Hello"):
        assert start(text) is None, text


@pytest.mark.fast
def test_trigger_fires_once_with_the_text_before_as_a_literal():
    trig = tool_calls.CallTrigger(TOOLS)
    assert trig(b"Let me look.") is None
    g = trig(b'Let me look: "ok"\n<tool_call>')
    assert g is not None and g.startswith('root ::= "Let me look: \\"ok\\"\\n" clawd-tagged\n')
    assert trig.fired_at == len('Let me look: "ok"\n')
    assert trig(b"<tool_call><tool_call>") is None  # one grammar per answer
    assert tool_calls.CallTrigger(TOOLS)("é {".encode()[:1]) is None  # half a UTF-8 character: no call


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(MODEL, n_ctx=1024, threads=2)


def _generate(engine: Engine, sampling: Sampling) -> tuple[str, list, GenInfo]:
    info = GenInfo()
    with engine.lock.user():
        steps = list(engine.generate(engine.tokenize(RAW), sampling, info))
    return b"".join(s.piece for s in steps).decode("utf-8", "replace"), steps, info


def test_an_unoffered_name_becomes_an_offered_call(engine):
    free, _, info = _generate(engine, Sampling(temperature=0, max_tokens=60))
    assert free.startswith('{"name": "execute"') and info.grammar_from is None
    assert tool_calls.parse_tool_calls(free, OFFERED)[1] == []  # what stock OpenClaw got: no call

    text, steps, info = _generate(engine, Sampling(temperature=0, max_tokens=60, lazy=tool_calls.CallTrigger(TOOLS)))
    assert info.grammar_from is not None and 0 < info.grammar_from <= 4  # at `"name"`, before the name
    content, calls = tool_calls.parse_tool_calls(text, OFFERED)
    assert content == "" and [c.name for c in calls] == ["exec"]
    assert json.loads(calls[0].arguments)["command"] == "ls"
    assert info.finish == "stop" and info.eog is not None  # a bare call ends the answer


def test_a_call_after_a_turn_header_the_model_wrote_is_a_call(engine):
    """Qwen2.5-0.5B under OpenClaw once opened its answer with the template's own `<|im_start|>`
    token, then the object, and the call stayed text. The trigger fires there, the grammar takes
    the header token over as its literal prefix (llama.cpp's grammar matches a special token by
    its text), only offered names follow, and the parsed call has no content."""
    header = engine.llm.tokenize(b"<|im_start|>\n", add_bos=False, special=True)
    assert len(header) == 2 and engine.llm.detokenize(header[:1], special=True) == b"<|im_start|>"  # one token
    body = engine.llm.tokenize(b'{"name": "', add_bos=False, special=False)
    gbnf = tool_calls.CallTrigger(TOOLS)(engine.llm.detokenize(header + body, special=True))
    assert gbnf is not None and gbnf.startswith('root ::= "<|im_start|>\\n" clawd-call')
    mask = GrammarMask(engine._vocab, engine.n_vocab, gbnf)
    assert mask.take_over(header + body)
    allowed = np.flatnonzero(np.isfinite(mask.apply(np.zeros(engine.n_vocab, np.float32))))
    pieces = {engine.llm.detokenize([int(t)]).decode("utf-8", "replace") for t in allowed}
    assert pieces and all(any((n + '"').startswith(p) or p.startswith(n + '"') for n in OFFERED) for p in pieces), pieces
    mask.close()
    content, calls = tool_calls.parse_tool_calls('<|im_start|>\n{"name": "exec", "arguments": {"command": "ls"}}', OFFERED)
    assert content == "" and [c.name for c in calls] == ["exec"]
    assert tool_calls.hold_from("<|im_start|>") == 0  # a stream holds it back: it may become a call


def test_constrained_logprobs_are_renormalized_over_what_the_grammar_allows(engine):
    """Each recorded logprob under the grammar is log p(token) − log Σ p(allowed), computed here
    again from a fresh evaluation of the same prefix and the grammar's own mask. A fresh
    evaluation in one batch rounds differently from the generation's chunks and single steps
    (0.004 nats measured here), hence the tolerance; the renormalization itself is larger."""
    trig = tool_calls.CallTrigger(TOOLS)
    _, steps, info = _generate(engine, Sampling(temperature=0, max_tokens=60, lazy=trig))
    prompt, tokens = engine.tokenize(RAW), [s.token for s in steps]
    gbnf = tool_calls.CallTrigger(TOOLS)(engine.llm.detokenize(tokens[: info.grammar_from]))
    mask = GrammarMask(engine._vocab, engine.n_vocab, gbnf)
    assert mask.take_over(tokens[: info.grammar_from])
    llm = engine.llm
    checked, effect = 0, 0.0
    with engine.lock.user():
        for j in range(info.grammar_from, len(tokens)):
            llm.reset()
            llm.eval(prompt + tokens[:j])  # fresh: nothing reused from the generation
            raw = log_softmax(engine._last_logits().copy())
            allowed = np.isfinite(mask.apply(engine._last_logits().copy()))
            expect = raw[tokens[j]] - np.log(np.exp(raw[allowed]).sum())
            assert steps[j].logprob == pytest.approx(expect, abs=0.02), j
            effect = max(effect, expect - raw[tokens[j]])
            mask.accept(tokens[j])
            checked += 1
            if checked == 6:
                break
    mask.close()
    assert checked == 6 and effect > 0.2  # the grammar removed real mass at some step


def test_no_name_outside_the_offered_ones_can_follow(engine):
    """After `{"name": "`, every token the grammar allows spells the start of an offered name."""
    prefix = engine.llm.tokenize(b'{"name": "', add_bos=False, special=False)
    mask = GrammarMask(engine._vocab, engine.n_vocab, tool_calls.CallTrigger(TOOLS)(b'{"name"'))
    assert mask.take_over(prefix)
    allowed = np.flatnonzero(np.isfinite(mask.apply(np.zeros(engine.n_vocab, np.float32))))
    pieces = {engine.llm.detokenize([int(t)]).decode("utf-8", "replace") for t in allowed}
    assert pieces and all(any((n + '"').startswith(p) or p.startswith(n + '"') for n in OFFERED) for p in pieces), pieces
    assert "execute" not in pieces and "exe" in {p[:3] for p in pieces}
    mask.close()


def test_fuzz_every_call_made_under_the_grammar_is_well_formed(engine):
    """Hot sampling (temperature 1.3, 16 seeds): whatever the model writes once the call began,
    every call names an offered tool and its arguments parse with the required keys and types."""
    made = 0
    for seed in range(16):
        text, _, info = _generate(engine, Sampling(temperature=1.3, seed=seed, max_tokens=100,
                                                   lazy=tool_calls.CallTrigger(TOOLS)))
        content, calls = tool_calls.parse_tool_calls(text, OFFERED)
        if info.grammar_from is None or info.finish == "length":
            continue  # never began a call, or a string ran to max_tokens: text, not a malformed call
        assert calls, text  # the grammar finished, so the call parses
        for c in calls:
            args = json.loads(c.arguments)
            assert c.name in OFFERED
            required = {"exec": {"command": str}, "read": {"path": str}}[c.name]
            assert all(isinstance(args.get(k), t) for k, t in required.items()), args
            assert set(args) <= {"command", "timeout", "path"}
            assert not isinstance(args.get("timeout", 0), bool) and isinstance(args.get("timeout", 0), int)
        made += 1
    assert made >= 4  # not vacuous: hot, many strings ramble on to max_tokens, but calls do finish


def test_auto_mode_streams_the_constrained_call(daemon: Daemon):
    """Through the API: tools offered, tool_choice left to `auto`; the model begins the `execute`
    object again and the client gets a call of an offered tool in `delta.tool_calls`."""
    messages = [{"role": "user", "content": "List the files."}, {"role": "assistant", "content": SHOT},
                {"role": "user", "content": "List the files again."}]
    chunks = list(daemon.client().chat.completions.create(
        model="clawd", messages=messages, tools=TOOLS, max_tokens=80, temperature=0, stream=True))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    (name,) = [d.function.name for d in deltas if d.function.name]
    args = json.loads("".join(d.function.arguments or "" for d in deltas))
    assert name in OFFERED and set(args) >= {"exec": {"command"}, "read": {"path"}}[name]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)  # nothing leaked as text
