"""The sampled answers a GRPO group refuses (rollouts.refused), whatever the scorer reads in them:
reward 0 in their group, and no advantage of their own (test_grpo.py). Pure functions on made-up
token ids: no model."""

from __future__ import annotations

import pytest

from clawd.judge.rollouts import last_calls, refused
from clawd.store.records import Rollout

fast = pytest.mark.fast


@fast
def test_a_sampled_answer_that_says_nothing_runs_in_circles_or_echoes_is_refused():
    """refused: empty, fewer than half of its token trigrams distinct (16 trigrams at least), or the
    question back."""
    q = "Read note.txt and tell me the code word in it."
    assert refused(Rollout([], ""), q) and refused(Rollout([5], "  \n"), q)
    assert refused(Rollout([1, 2, 3] * 10, "x"), q)  # 28 trigrams, 3 distinct
    assert not refused(Rollout(list(range(40)), "x"), q)  # 38 trigrams, all distinct
    assert not refused(Rollout([1, 2, 3] * 5, "x"), q)  # 13 trigrams, 3 distinct: too short to tell
    assert refused(Rollout([1, 2, 3] * 6, "x"), q)  # 16 of them: enough
    # the question repeated back (ranked first of its group by the fit on the tool bench, 0.52)
    assert refused(Rollout(list(range(12)), q), q) and refused(Rollout(list(range(12)), "read note.txt, and tell me the code word"), q)
    assert not refused(Rollout(list(range(12)), "The code word in note.txt is heron."), q)
    assert not refused(Rollout(list(range(12)), '{"name": "read", "arguments": {"path": "note.txt"}}'), q)


@fast
def test_a_sampled_call_that_repeats_the_call_whose_result_the_prompt_ends_with_is_refused():
    """last_calls reads the calls of the last assistant message when only their results follow;
    refused then takes a call of the same tool with the same arguments (however the model wrote
    it, and whatever the client sent the arguments as), and nothing else."""
    ls = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"path": "list.txt"}'}}
    task = {"role": "user", "content": "What is the third line of list.txt?"}
    asked = {"messages": [task, {"role": "assistant", "content": "", "tool_calls": [ls]},
                          {"role": "tool", "tool_call_id": "c1", "content": "list.txt"}]}
    made = last_calls(asked)
    assert made == [("ls", {"path": "list.txt"})]
    q, ids = task["content"], list(range(12))
    # what the adapter repeated until the 8-call cap (stop 59), bare and as Qwen's tagged form
    assert refused(Rollout(ids, '{"name": "ls", "arguments": {"path": "list.txt"}}'), q, made)
    assert refused(Rollout(ids, '<tool_call>\n{"name": "ls", "arguments": {"path":"list.txt"}}\n</tool_call>'), q, made)
    # the next step is not a repeat: other arguments, another tool, or an answer in words
    assert not refused(Rollout(ids, '{"name": "ls", "arguments": {"path": "list.txt", "limit": 3}}'), q, made)
    assert not refused(Rollout(ids, '{"name": "read", "arguments": {"path": "list.txt"}}'), q, made)
    assert not refused(Rollout(ids, "The third line of list.txt is 'pear'."), q, made)
    # arguments sent as an object, not JSON text, read the same
    as_object = {**ls, "function": {"name": "ls", "arguments": {"path": "list.txt"}}}
    assert last_calls({"messages": [task, {"role": "assistant", "tool_calls": [as_object]}, asked["messages"][2]]}) == made
    # no call whose result the prompt ends with: a first turn, a user's word after the result
    # ("run it once more" may ask for the same call), or an assistant message with no call
    assert last_calls({"messages": [task]}) == []
    assert last_calls({"messages": [*asked["messages"], {"role": "user", "content": "Again, please."}]}) == []
    assert last_calls({"messages": [task, {"role": "assistant", "content": "Which file?"}, {"role": "user", "content": "list.txt"}]}) == []
    assert not refused(Rollout(ids, '{"name": "ls", "arguments": {"path": "list.txt"}}'), q, [])
