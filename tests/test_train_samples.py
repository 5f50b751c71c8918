"""Samples from recorded turns: normalization as served, the hinted teacher prompt, left truncation
keeping the system prompt (or saying why not), hints lost to the cut, the sampling temperature,
reward precedence. Tokenized with llama.cpp's vocabulary, like the engine."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from llama_cpp import Llama

from clawd.config import bundled_model_path
from clawd.engine.chat_template import normalize
from clawd.serve import protocol
from clawd.store.hints import null_hint
from clawd.store.records import Feedback, Judgment, Turn
from clawd.store.store import Store
from clawd.train import samples as S

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "openclaw"  # real OpenClaw requests (README there)


@pytest.fixture(scope="module")
def engine_encode():
    llm = Llama(str(bundled_model_path()), vocab_only=True, verbose=False)

    def encode(text: str) -> list[int]:  # what clawd.engine.Engine.tokenize does
        ids = llm.tokenize(text.encode(), add_bos=True, special=True)
        return ids[1:] if len(ids) > 1 and ids[0] == ids[1] == llm.token_bos() else ids

    encode.llm = llm
    return encode


@pytest.fixture(scope="module")
def template():
    return S.gguf_template(bundled_model_path())


@pytest.mark.parametrize("name", ["tool_followup_request", "turn2_same_session", "compaction_request"])
def test_recorded_request_normalizes_as_served(name):
    """A request read back from its JSON record normalizes to the messages serve rendered (the
    round trip through SQLite must not change a tool call's arguments or a content part)."""
    body = json.loads((FIXTURES / f"{name}.json").read_text())["body"]
    req = protocol.parse_request(json.dumps(body).encode())
    recorded = [m.model_dump(exclude_none=True) for m in req.messages]  # what serve stores in turns.request
    assert normalize(json.loads(json.dumps(recorded))) == protocol.normalize_messages(req)


def test_teacher_prompt_appends_the_hint_to_the_last_user_message(template):
    req = {"messages": [{"role": "developer", "content": "Be brief."},
                        {"role": "user", "content": [{"type": "text", "text": "first"}]},
                        {"role": "assistant", "content": "ok"},
                        {"role": "user", "content": "second"}], "tools": [], "tool_choice": "none"}
    plain, hinted = S.render(template, req), S.render(template, req, "Use a list.")
    assert "<|im_start|>system\nBe brief.<|im_end|>" in plain
    assert hinted == plain.replace("second<|im_end|>", "second\n\n[user's hint]\nUse a list.<|im_end|>")
    assert hinted.count("[user's hint]") == 1


def test_fit_cuts_history_from_the_left_keeping_the_system_prompt():
    prompt, completion = list(range(1000)), list(range(5000, 5010))
    p, c, cut, head = S.fit(prompt, completion, keep=100, limit=300)
    assert c == completion and len(p) + len(c) == 300 and cut == 1000 - 290 and head == 100
    assert p[:100] == prompt[:100] and p[100:] == prompt[-190:]
    assert S.fit(prompt, completion, keep=100, limit=2000) == (prompt, completion, 0, 100)
    # the system prompt alone leaves under MIN_PROMPT: the conversation keeps its last half of the
    # room (290 // 2 = 145), the system prompt its first 145 tokens
    p, _, cut, head = S.fit(prompt, completion, keep=280, limit=300)
    assert head == 145 and p == prompt[:145] + prompt[-145:] and cut == 710
    # a short conversation after a long system prompt keeps at least MIN_PROMPT tokens of it
    p, _, _, head = S.fit(prompt, completion, keep=990, limit=300)
    assert head == 290 - S.MIN_PROMPT and p == prompt[:head] + prompt[-S.MIN_PROMPT:]
    p, c, _, _ = S.fit(prompt, list(range(400)), keep=0, limit=300)  # a completion too long loses its end
    assert len(c) == 300 - S.MIN_PROMPT and p == prompt[-S.MIN_PROMPT:]


def test_sampling_temperature_is_the_recorded_one():
    from clawd.store.records import DEFAULT_TEMPERATURE

    assert S.sampling_temperature({"temperature": 0.6}) == 0.6
    assert S.sampling_temperature({}) == S.sampling_temperature({"temperature": None}) == DEFAULT_TEMPERATURE == 0.8
    assert S.sampling_temperature({"temperature": 0}) == 1.0  # greedy: scored at the model's own distribution


def test_build_truncates_student_and_teacher_alike(template, engine_encode):
    history = []
    for i in range(30):
        history += [{"role": "user", "content": f"Question {i}: tell me about the number {i}."},
                    {"role": "assistant", "content": f"The number {i} is a fine number, bigger than {i - 1}."}]
    req = {"messages": [{"role": "system", "content": "You are a counting assistant."}, *history,
                        {"role": "user", "content": "And 31?"}], "tools": [], "tool_choice": "none"}
    prompt = engine_encode(S.render(template, req))
    completion = engine_encode.llm.tokenize(b"31 is prime.", add_bos=False, special=False)
    turn = Turn(session_id=1, index=0, kind="main", completion_id="c", request=req, prompt_ids=prompt,
                completion_ids=completion, id=7)
    system = engine_encode(template.render(req["messages"][:1], add_generation_prompt=False))
    s = S.build(turn, 1.0, "Say why.", template, engine_encode, limit=200)
    assert len(s.ids) == 200 and s.cut == len(prompt) + len(completion) - 200
    assert s.prompt_ids[: len(system)] == system and s.prompt_ids[len(system):] == prompt[-(200 - len(completion) - len(system)):]
    assert len(s.teacher_ids) == 200 and s.teacher_ids[-len(completion):] == completion
    assert s.teacher_prompt_ids[: len(system)] == system
    teacher_tail = engine_encode.llm.detokenize(s.teacher_prompt_ids[-20:], special=True).decode()
    assert "[user's hint]\nSay why.<|im_end|>\n<|im_start|>assistant\n" in teacher_tail
    assert not s.hint_cut and s.system_cut == 0
    short = S.build(turn, -1.0, None, template, engine_encode, limit=8192)
    assert short.prompt_ids == prompt and short.completion_ids == completion and short.teacher_ids is None


def long_turn(template, engine_encode, system: str, after_user: str) -> Turn:
    """A turn whose last user message is followed by a long tool result (an agent's loop)."""
    req = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "Read the log. " * 20},
                        {"role": "assistant", "content": "Reading it. " * 20}, {"role": "user", "content": "Now fix it."},
                        {"role": "assistant", "content": "", "tool_calls": [
                            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
                        {"role": "tool", "tool_call_id": "c1", "content": after_user}],
           "tools": [], "tool_choice": "none", "temperature": 0.7}
    completion = engine_encode.llm.tokenize(b"Fixed.", add_bos=False, special=False)
    return Turn(session_id=1, index=0, kind="main", completion_id="c", request=req,
                prompt_ids=engine_encode(S.render(template, req)), completion_ids=completion,
                logprobs=[-0.5] * len(completion), id=9, adapter_version=3)


def test_a_hint_cut_away_is_not_opd(template, engine_encode, caplog):
    """The hint sits in the last user message; 600 tokens of tool output after it push it past a
    300-token cut. The teacher prompt would then be the student's: not OPD, the reward alone."""
    turn = long_turn(template, engine_encode, "Be brief.", "line of log output " * 150)
    with caplog.at_level(logging.INFO, logger="clawd.train"):
        s = S.build(turn, 1.0, "Say which line broke.", template, engine_encode, limit=300)
    assert s.hint_cut and s.hint is None and s.teacher_ids is None and s.reward == 1.0
    assert "hint did not survive" in caplog.text
    # with room for it, the same hint survives the cut of the history before it
    kept = S.build(turn, 1.0, "Say which line broke.", template, engine_encode, limit=len(turn.prompt_ids) - 10)
    assert not kept.hint_cut and kept.hint is not None and kept.cut > 0 and len(kept.teacher_ids) == len(kept.ids)
    assert "Say which line broke." in engine_encode.llm.detokenize(kept.teacher_prompt_ids, special=True).decode()
    # what the engine sampled at and recorded travels with the sample
    assert s.temperature == 0.7 and s.adapter_version == 3 and s.rollout_logprobs == [-0.5] * len(s.completion_ids)


def test_a_system_prompt_too_long_is_cut_in_the_middle_and_said(template, engine_encode, caplog):
    turn = long_turn(template, engine_encode, "You are a careful agent. " * 80, "ok")
    system = engine_encode(template.render(S.normalize(turn.request["messages"])[:1], add_generation_prompt=False))
    assert len(system) > 300
    with caplog.at_level(logging.INFO, logger="clawd.train"):
        s = S.build(turn, 1.0, None, template, engine_encode, limit=300)
    assert 0 < s.system_cut < len(system) and s.prompt_ids[: len(system) - s.system_cut] == system[: len(system) - s.system_cut]
    assert s.prompt_ids[-10:] == turn.prompt_ids[-10:] and len(s.ids) == 300
    assert "system prompt" in caplog.text and "Raise max_train_tokens" in caplog.text


def test_reward_feedback_first_then_judge(tmp_path):
    store = Store(tmp_path / "clawd.db")
    sid = store.open_session("s")
    ids = []
    for i in range(3):
        t = Turn(session_id=sid, index=i, kind="main", completion_id=f"c{i}", request={"messages": []}, prompt_ids=[1])
        ids.append(store.insert_turn(t))
    store.add_judgment(Judgment(turn_id=ids[0], method="vote", score=1, judge_model="m", hint="  Be shorter. "))
    store.add_judgment(Judgment(turn_id=ids[1], method="vote", score=1, judge_model="m", hint="   "))
    store.set_feedback(Feedback(turn_id=ids[1], score=-1))
    store.set_feedback(Feedback(turn_id=ids[2], score=1))
    assert S.turn_signal(store, ids[0]) == (1.0, "  Be shorter. ")
    assert S.turn_signal(store, ids[1]) == (-1.0, None)  # explicit feedback overrides the judge; a blank hint is none
    assert S.turn_signal(store, ids[2]) == (1.0, None)
    store.close()


def test_the_turn_baseline_centers_a_rounds_rewards_by_hand():
    # seven rejected, one accepted: mean −0.75, so −1 + 0.75 = −0.25 and +1 + 0.75 = +1.75
    rounds = [S.Sample(i, [1, 2], [3], r) for i, r in enumerate([-1.0] * 7 + [1.0])]
    out, mean = S.centered(rounds)
    assert mean == -0.75 and [s.reward for s in out] == [-0.25] * 7 + [1.75]
    assert [s.turn_id for s in out] == list(range(8)) and rounds[0].reward == -1.0  # the originals untouched
    assert S.centered([S.Sample(0, [1], [2], -1.0)] * 3)[0][0].reward == 0.0  # all alike: nothing by reward
    assert S.centered([]) == ([], 0.0)


def test_the_null_hint_keeps_the_frame_and_empties_the_users_words(template, engine_encode):
    said = 'The user answered this reply with: "Too long — say "one paragraph" please.". Write the reply so that this answer would not have been needed.'
    assert null_hint(said) == ('The user answered this reply with: "That\'s not right.". Write the reply so that this '
                               'answer would not have been needed.')
    assert null_hint('The user said about this reply: "use metres"') == 'The user said about this reply: "That\'s not right."'
    assert null_hint("The tool call read({}) made in this reply failed. Choose the tool carefully.") is None
    req = {"messages": [{"role": "user", "content": "How tall is Everest?"}], "tools": [], "tool_choice": "none"}
    completion = engine_encode.llm.tokenize(b"Very tall.", add_bos=False, special=False)
    turn = Turn(session_id=1, index=0, kind="main", completion_id="c", request=req,
                prompt_ids=engine_encode(S.render(template, req)), completion_ids=completion, id=3)
    s = S.build(turn, -1.0, said, template, engine_encode, limit=8192, contrast=True)
    text = engine_encode.llm.detokenize(s.null_prompt_ids, special=True).decode()
    assert "That's not right." in text and "one paragraph" not in text and s.null_ids[-len(completion):] == completion
    assert text == engine_encode.llm.detokenize(s.teacher_prompt_ids, special=True).decode().replace(
        'Too long — say "one paragraph" please.', "That's not right.")
    assert S.build(turn, -1.0, said, template, engine_encode, limit=8192).null_prompt_ids is None  # off by default
    assert S.build(turn, -1.0, None, template, engine_encode, limit=8192, contrast=True).null_prompt_ids is None
