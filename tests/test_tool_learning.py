"""Learning from tool outcomes (bench/tools/learn.py): the split, the tools run for real, the
simulated user, and what reaches the daemon: tool results and the user's reply, never the check."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import Daemon

from bench.tools.learn import ASKED, HELD_OUT, THANKS, USE, jail_works, replied, run_task, run_tool, user_reply
from bench.tools.score import judge_call
from bench.tools.task_set import TASKS

BY_NAME = {t.name: t for t in TASKS}


def calls(*names: str) -> list[dict]:
    return [judge_call({"name": n, "arguments": json.dumps({"command": "x", "path": "p", "content": "c", "edits": []})},
                       {n: []}) for n in names]


@pytest.mark.fast
def test_the_split_is_fixed_disjoint_and_covers_every_kind():
    assert len(USE) == 16 and len(HELD_OUT) == 8 and not set(USE) & set(HELD_OUT)
    assert set(USE) | set(HELD_OUT) == set(BY_NAME)
    kinds = lambda names: {BY_NAME[n].kind for n in names}  # noqa: E731
    assert kinds(USE) == kinds(HELD_OUT) == {t.kind for t in TASKS}


@pytest.mark.fast
def test_the_tools_run_for_real_and_stay_in_the_workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    assert run_tool(ws, "write", {"path": "out/a.txt", "content": "hello World"}) == "Successfully wrote 11 bytes to out/a.txt"
    assert run_tool(ws, "read", {"path": "out/a.txt"}) == "hello World"
    assert run_tool(ws, "edit", {"path": "out/a.txt", "edits": [{"oldText": "World", "newText": "there"}]}).startswith("Success")
    assert (ws / "out" / "a.txt").read_text() == "hello there"
    assert run_tool(ws, "edit", {"path": "out/a.txt", "edits": [{"oldText": "nope", "newText": "x"}]}) == \
        "Error: oldText not found in out/a.txt"
    assert run_tool(ws, "ls", {}) == '"out"/' and run_tool(ws, "ls", {"path": "out"}) == '"a.txt"'
    assert run_tool(ws, "read", {"path": "missing.txt"}).startswith("Error: ENOENT")
    assert run_tool(ws, "read", {"path": "../../etc/passwd"}) == "Error: ../../etc/passwd is outside the workspace"
    assert run_tool(ws, "write", {"path": "/etc/x", "content": ""}).endswith("is outside the workspace")
    assert run_tool(ws, "read", None).startswith("Error: the arguments of read")
    assert run_tool(ws, "openclaw", {}) == "Error: tool openclaw is not available"
    assert run_tool(ws, "exec", {"command": "echo hi > b.txt && cat b.txt"}, jail=False) == "hi"
    assert "(Command exited with code 3)" in run_tool(ws, "exec", {"command": "echo no; exit 3"}, jail=False)


@pytest.mark.fast
def test_commands_run_in_a_jail_where_only_tmp_is_writable(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    if not jail_works(ws):
        pytest.skip("no mount namespace here (unshare --mount needs root)")
    assert run_tool(ws, "exec", {"command": "echo jailed > c.txt && cat c.txt"}) == "jailed"
    assert "Read-only file system" in run_tool(ws, "exec", {"command": "touch /usr/clawd-jail-test"})


@pytest.mark.fast
def test_the_user_says_what_a_user_sees():
    echo, chain, ls = BY_NAME["exec_echo"], BY_NAME["chain_write_read"], BY_NAME["ls_csv"]
    assert user_reply(echo, [], []) == ASKED["exec"]
    assert user_reply(echo, calls("write", "read"), ["Successfully wrote", "x"]) == ASKED["exec"]
    assert user_reply(echo, calls("exec"), ["tt-7341-ok"]) == THANKS
    assert user_reply(echo, calls("exec"), ["sh: 1: ech: not found\n\n(Command exited with code 127)"]) == \
        "That failed: sh: 1: ech: not found. Please fix it."
    assert user_reply(chain, calls("write"), ["Successfully wrote 9 bytes to token.txt"]) == ASKED["read"]
    assert user_reply(chain, calls("read", "write"), ["Error: ENOENT", "ok"]) == ASKED["read"]  # in order
    assert user_reply(ls, calls("exec"), ['"alpha.txt"']) == THANKS  # `exec ls` lists too
    # The user never runs the check: a wrong answer after the right tools is thanked.
    assert user_reply(BY_NAME["read_codeword"], calls("read"), ["The code word is marigold-58."]) == THANKS


@pytest.mark.fast
def test_the_reply_follows_what_the_user_saw_an_empty_answer_too():
    task = [{"role": "user", "content": "Run it."}, {"role": "assistant", "content": None, "tool_calls": []},
            {"role": "tool", "content": "ok"}]
    assert replied(task, "", None, "Thanks.") == [*task, {"role": "assistant", "content": ""},
                                                  {"role": "user", "content": "Thanks."}]
    assert replied(task, "Done.", None, "Thanks.")[-2:] == [{"role": "assistant", "content": "Done."},
                                                            {"role": "user", "content": "Thanks."}]
    assert replied(task, "", "call cap: 8 model calls", "Thanks.") == [*task, {"role": "user", "content": "Thanks."}]


def test_only_tool_results_and_the_users_reply_reach_the_daemon(daemon: Daemon, tmp_path):
    """A used task on the real engine: every message the daemon received is the system prompt, the
    task, the model's own calls and answers, a tool's real result or the user's reply; the check's
    verdict is in the bench's result and nowhere in the database."""
    ws = tmp_path / "ws"
    verdict = "settings.json holds the verdict 83b1f0, not what was asked"  # a check that always fails, findable
    task = dataclasses.replace(BY_NAME["write_json"], check=lambda outcome: verdict)
    before = daemon.rows("SELECT COALESCE(MAX(id), 0) AS last FROM turns")[0]["last"]
    got = run_task(daemon.client(timeout=300), task, ws, seed=0, heldout=False, jail=False, max_calls=2, max_tokens=48)
    assert got["check"] == verdict and not got["success"]
    assert got["reply"] in (THANKS, *ASKED.values()) or got["reply"].startswith("That failed: ")
    rows = daemon.rows("SELECT request, kind FROM turns WHERE id > ?", (before,))
    assert rows and all(r["kind"] == "main" for r in rows)
    said: dict[str, list[str]] = {}
    for r in rows:
        for m in json.loads(r["request"])["messages"]:
            said.setdefault(m["role"], []).append(m.get("content") or "")
    assert set(said["user"]) <= {task.message, got["reply"]}
    assert all("83b1f0" not in text for texts in said.values() for text in texts)
    assert not daemon.rows("SELECT 1 FROM turns WHERE request LIKE '%83b1f0%' OR text LIKE '%83b1f0%'") and \
        not daemon.rows("SELECT 1 FROM next_states WHERE content LIKE '%83b1f0%'")
    # the user's reply reached the daemon as what came after the task's last turn, whatever it ended with
    last = daemon.rows("SELECT MAX(id) AS id FROM turns WHERE id > ? AND request NOT LIKE ?",
                       (before, f"%{json.dumps(got['reply'])[1:-1]}%"))[0]["id"]
    assert [r["content"] for r in daemon.rows("SELECT content FROM next_states WHERE turn_id = ?", (last,))][0].endswith(got["reply"])
