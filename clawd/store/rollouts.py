"""GRPO's rows (issue 28), part of Store (it mixes this in): groups of answers to recorded turns'
prompts, their scores, and the evidence they are scored against: what the user said.

A group and its answers are written in one transaction, and so are its scores: a kill leaves a
group whole or absent, scored or not, never half of either.
"""

from __future__ import annotations

import json
import sqlite3
import time
from array import array
from typing import Any

from .records import NextState, Rollout, RolloutGroup, Turn

# A main turn the user reacted to (a verdict or feedback), finished, with an answer, from a
# session they did not exclude: what the loop may learn from, and so what it may replay.
_TRAINABLE = ("t.kind = 'main' AND t.status = 'ok' AND length(t.completion_ids) > 0"
              " AND t.session_id NOT IN (SELECT id FROM sessions WHERE excluded = 1)")
_EFFECTIVE = "COALESCE(f.score, j.score)"  # explicit feedback over the judge
_JOINS = "FROM turns t LEFT JOIN judgments j ON j.turn_id = t.id LEFT JOIN feedback f ON f.turn_id = t.id"
# The user's verdicts on answers, newest first: text, tool calls or both (a call judged by what its
# tool returned is a verdict on the model's action, and a group sampled on that turn is calls to rank);
# an empty answer is not one.
_JUDGED = (f"{_JOINS} WHERE {_TRAINABLE} AND {_EFFECTIVE} IN (1, -1)"
           f" AND (trim(COALESCE(t.text, '')) != '' OR COALESCE(t.tool_calls, '[]') != '[]') ORDER BY t.id DESC")
# What GRPO may replay under adapter :v: trainable turns the user reacted to, not yet sampled under
# :v, sampled fewer than :replays times in all (the conditions on turns t, judgments j, feedback f).
_REPLAYABLE = (f"{_TRAINABLE} AND (j.turn_id IS NOT NULL OR f.turn_id IS NOT NULL)"
               " AND NOT EXISTS (SELECT 1 FROM rollout_groups g WHERE g.turn_id = t.id AND g.source = 'sampled'"
               "                 AND g.adapter_version IS :v)"
               " AND (SELECT COUNT(*) FROM rollout_groups g WHERE g.turn_id = t.id AND g.source = 'sampled') < :replays")
_USED = "SELECT g.group_id FROM group_uses g JOIN train_runs r ON r.id = g.run_id WHERE r.status = 'done'"


class RolloutQueries:
    def _read(self, sql: str, args: tuple | dict[str, Any] = ()) -> list[sqlite3.Row]:
        raise NotImplementedError  # Store's

    def _write(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        raise NotImplementedError  # Store's

    def _transaction(self, steps: list[tuple[str, tuple | list[tuple]]]) -> int | None:
        raise NotImplementedError  # Store's

    def _turn(self, r: sqlite3.Row) -> Turn:
        raise NotImplementedError  # Store's

    # -- sampling ---------------------------------------------------------------------------------
    def rollout_candidates(self, adapter_version: int | None, limit: int, replays: int) -> list[Turn]:
        """Trainable main turns with no sampled group under `adapter_version` yet (None: the base
        weights) and fewer than `replays` in all: old turns are replayed too, once per adapter, up
        to `replays` times. Spread over conversations: first the sessions with the fewest groups
        under this adapter, newest session first, and in a session its earliest turn first. So a
        round's groups come from as many conversations as there are, each from where the user first
        asked: newest-first alone gave a tool-learning round all 8 of its groups from one task's
        consecutive calls (seed 1, 2026-12-06: the gate rejected it, replay 1.32 nats/token down,
        3 probes lost), and in chat it replays a retry, whose prompt holds the complaint, before
        the first try that the preference is about. It reads every candidate (20 ms at 5,000
        turns): `has_rollout_candidates` is the scheduler's cheap question."""
        rows = self._read(
            "WITH done AS (SELECT t2.session_id AS session_id, COUNT(*) AS n FROM rollout_groups g2"
            "              JOIN turns t2 ON t2.id = g2.turn_id"
            "              WHERE g2.source = 'sampled' AND g2.adapter_version IS :v GROUP BY t2.session_id)"
            # pass: the round of the spread a turn falls in (its session's groups so far, plus its rank
            # among the session's candidates): what taking them one at a time would give
            " SELECT * FROM (SELECT t.*, COALESCE(done.n, 0)"
            "                + ROW_NUMBER() OVER (PARTITION BY t.session_id ORDER BY t.idx, t.id) AS pass"
            f" {_JOINS} LEFT JOIN done ON done.session_id = t.session_id WHERE {_REPLAYABLE})"
            " ORDER BY pass, session_id DESC, idx, id LIMIT :limit",
            {"v": adapter_version, "replays": replays, "limit": limit})
        return [self._turn(r) for r in rows]

    def has_rollout_candidates(self, adapter_version: int | None, replays: int) -> bool:
        return bool(self._read(f"SELECT 1 {_JOINS} WHERE {_REPLAYABLE} LIMIT 1", {"v": adapter_version, "replays": replays}))

    def add_group(self, g: RolloutGroup) -> int:
        """Store a group with its answers (and their rewards, if scored) in one transaction."""
        group_id = self._transaction([
            ("INSERT INTO rollout_groups (turn_id, source, adapter_version, temperature, scorer, evidence, created,"
             " scored) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
             (g.turn_id, g.source, g.adapter_version, g.temperature, g.scorer, json.dumps(g.evidence), time.time(),
              time.time() if g.scorer is not None else None)),
            # inside BEGIN IMMEDIATE no other writer runs: the newest group is the one just inserted
            ("INSERT INTO rollouts (group_id, k, completion_ids, logprobs, text, reward, refused)"
             " VALUES ((SELECT MAX(id) FROM rollout_groups), ?, ?, ?, ?, ?, ?)",
             [(k, array("i", r.completion_ids).tobytes(), array("f", r.logprobs).tobytes(), r.text, r.reward, int(r.refused))
              for k, r in enumerate(g.rollouts)]),
        ])
        assert group_id is not None
        g.id = group_id
        return group_id

    def group(self, group_id: int) -> RolloutGroup | None:
        rows = self._read("SELECT * FROM rollout_groups WHERE id = ?", (group_id,))
        if not rows:
            return None
        r = rows[0]
        answers = self._read("SELECT * FROM rollouts WHERE group_id = ? ORDER BY k", (group_id,))
        return RolloutGroup(
            turn_id=r["turn_id"], source=r["source"], adapter_version=r["adapter_version"], temperature=r["temperature"],
            rollouts=[Rollout(completion_ids=_ints(a["completion_ids"]), text=a["text"], logprobs=_floats(a["logprobs"]),
                              reward=a["reward"], refused=bool(a["refused"]), id=a["id"]) for a in answers],
            scorer=r["scorer"], evidence=json.loads(r["evidence"]), id=r["id"])

    # -- scoring ----------------------------------------------------------------------------------
    def unscored_groups(self, limit: int) -> list[RolloutGroup]:
        """Sampled groups not scored yet, oldest first, none of an excluded session."""
        rows = self._read(
            "SELECT g.id FROM rollout_groups g JOIN turns t ON t.id = g.turn_id WHERE g.scorer IS NULL"
            " AND t.session_id NOT IN (SELECT id FROM sessions WHERE excluded = 1) ORDER BY g.id LIMIT ?", (limit,))
        return [g for r in rows if (g := self.group(r[0])) is not None]

    def score_group(self, group_id: int, rewards: list[float], scorer: str, evidence: list[str],
                    refused: list[bool] | None = None) -> None:
        """Every answer's reward, whether the scorer refused it (Rollout.refused; none by default),
        and the group's scorer, in one transaction."""
        ids = [r[0] for r in self._read("SELECT id FROM rollouts WHERE group_id = ? ORDER BY k", (group_id,))]
        refused = refused if refused is not None else [False] * len(rewards)
        if not len(ids) == len(rewards) == len(refused):
            raise ValueError(f"group {group_id} has {len(ids)} answers, not {len(rewards)} ({len(refused)} refusals)")
        self._transaction([
            ("UPDATE rollouts SET reward = ?, refused = ? WHERE id = ?",
             [(w, int(no), i) for w, no, i in zip(rewards, refused, ids)]),
            ("UPDATE rollout_groups SET scorer = ?, evidence = ?, scored = ? WHERE id = ?",
             (scorer, json.dumps(evidence), time.time(), group_id)),
        ])

    def corrections(self, limit: int) -> list[tuple[Turn, NextState | None, str]]:
        """What the user said about answers they did not want, newest first: the message they sent
        next (a user's, never a tool's) after a turn whose effective score is -1, and the checked
        comment of their negative feedback (feedback.hint). Each as (the turn, its next state or
        None, the words)."""
        rows = self._read(
            "SELECT t.*, n.role AS n_role, n.content AS n_content, n.messages AS n_messages, f.score AS f_score,"
            " f.hint AS f_hint FROM turns t LEFT JOIN judgments j ON j.turn_id = t.id"
            " LEFT JOIN feedback f ON f.turn_id = t.id LEFT JOIN next_states n ON n.turn_id = t.id"
            f" WHERE {_TRAINABLE} AND {_EFFECTIVE} = -1 AND (n.role = 'user' OR trim(COALESCE(f.hint, '')) != '')"
            " ORDER BY t.id DESC LIMIT ?", (limit,))
        out = []
        for r in rows:
            ns = (NextState(turn_id=r["id"], role=r["n_role"], content=r["n_content"],
                            messages=json.loads(r["n_messages"])) if r["n_role"] is not None else None)
            words = r["f_hint"] if r["f_score"] is not None and (r["f_hint"] or "").strip() else None
            if words is None and ns is not None and ns.role == "user":
                words = ns.content
            if words and words.strip():
                out.append((self._turn(r), ns, words.strip()))
        return out

    def judged_answers(self, limit: int) -> list[tuple[Turn, int]]:
        """The user's verdicts on answers, newest first: trainable main turns with text or tool calls
        (not empty) and an effective score of +1 or -1, each as (turn, score). What GRPO's scorer
        fits this user's preference on."""
        rows = self._read(f"SELECT t.*, {_EFFECTIVE} AS eff {_JUDGED} LIMIT ?", (limit,))
        return [(self._turn(r), int(r["eff"])) for r in rows]

    def judged_counts(self, limit: int) -> tuple[int, int]:
        """Of the user's `limit` most recent judged answers (`judged_answers`): (accepted, rejected)."""
        rows = self._read(f"SELECT eff, COUNT(*) AS n FROM (SELECT {_EFFECTIVE} AS eff {_JUDGED} LIMIT ?) GROUP BY eff",
                          (limit,))
        n = {r["eff"]: r["n"] for r in rows}
        return n.get(1, 0), n.get(-1, 0)

    def hindsight_pairs(self, limit: int) -> list[tuple[int, int]]:
        """(corrected turn, accepted retry): a turn scored -1 whose next state is the user's, and the
        next main turn of its session scored +1, with no hindsight group yet; oldest first."""
        rows = self._read(
            "SELECT a.id AS a, (SELECT b.id FROM turns b WHERE b.session_id = a.session_id AND b.idx > a.idx"
            "                   AND b.kind = 'main' ORDER BY b.idx LIMIT 1) AS b"
            " FROM turns a JOIN next_states n ON n.turn_id = a.id AND n.role = 'user'"
            " LEFT JOIN judgments j ON j.turn_id = a.id LEFT JOIN feedback f ON f.turn_id = a.id"
            f" WHERE {_TRAINABLE.replace('t.', 'a.')} AND {_EFFECTIVE} = -1"
            " AND NOT EXISTS (SELECT 1 FROM rollout_groups g WHERE g.turn_id = a.id AND g.source = 'hindsight')"
            " ORDER BY a.id LIMIT ?", (limit * 4,))
        out = []
        for r in rows:
            if r["b"] is None:
                continue
            s = self._read("SELECT COALESCE(f.score, j.score) FROM turns t LEFT JOIN judgments j ON j.turn_id = t.id"
                           " LEFT JOIN feedback f ON f.turn_id = t.id WHERE t.id = ? AND t.status = 'ok'"
                           " AND length(t.completion_ids) > 0", (r["b"],))
            if s and s[0][0] == 1:
                out.append((r["a"], r["b"]))
            if len(out) >= limit:
                break
        return out

    # -- training ---------------------------------------------------------------------------------
    def ready_groups(self, adapter_version: int | None, limit: int) -> list[int]:
        """Groups a round may train on, oldest first: scored by a trusted scorer whose margin they
        pass ('trusted') or hindsight pairs, sampled by `adapter_version` (GRPO is on-policy;
        hindsight pairs are off-policy by nature), unused by any finished run, none of an excluded
        session, their answers' rewards not all equal (such a group teaches nothing)."""
        rows = self._read(
            "SELECT g.id FROM rollout_groups g JOIN turns t ON t.id = g.turn_id JOIN rollouts r ON r.group_id = g.id"
            " WHERE g.scorer IN ('trusted', 'hindsight') AND (g.source = 'hindsight' OR g.adapter_version IS ?)"
            f" AND g.id NOT IN ({_USED}) AND t.session_id NOT IN (SELECT id FROM sessions WHERE excluded = 1)"
            " GROUP BY g.id HAVING MAX(r.reward) > MIN(r.reward) ORDER BY g.id LIMIT ?", (adapter_version, limit))
        return [r[0] for r in rows]

    def group_counts(self) -> dict[str, Any]:
        """For status: groups sampled, scored, by scorer, and trained on."""
        r = self._read(
            "SELECT COUNT(*) AS groups, SUM(source = 'sampled') AS sampled, SUM(source = 'hindsight') AS hindsight,"
            " SUM(scorer IS NOT NULL) AS scored, SUM(scorer = 'trusted') AS trusted,"
            f" (SELECT COUNT(DISTINCT group_id) FROM ({_USED})) AS trained,"
            " (SELECT COUNT(*) FROM rollouts) AS answers FROM rollout_groups")[0]
        return {k: int(r[k] or 0) for k in r.keys()}


# the BLOB codecs of token ids and logprobs (Store's too)
def _ints(blob: bytes) -> list[int]:
    a = array("i")
    a.frombytes(blob)
    return a.tolist()


def _floats(blob: bytes) -> list[float]:
    a = array("f")
    a.frombytes(blob)
    return a.tolist()
