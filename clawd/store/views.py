"""The dashboard's reads and controls (issue 17), part of Store (it mixes this in): the SQL stays
in the store's files and runs on its one connection and lock (`_read`, `_write`).

Keyset pagination (id < before) walks a primary key down from the newest row, so a page costs
the same on 10,000 turns as on 10. Long texts are cut in SQL: an OpenClaw tool result can be
megabytes, and a page shows a few thousand characters of it.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from .records import RewardBucket, SessionView, TurnView


class DashboardQueries:
    def _read(self, sql: str, args: tuple | dict[str, Any] = ()) -> list[sqlite3.Row]:
        raise NotImplementedError  # Store's

    def _write(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        raise NotImplementedError  # Store's

    def turn_views(self, before: int | None = None, limit: int = 20, session_id: int | None = None,
                   cut: int = 4000) -> list[TurnView]:
        """The newest turns with an id below `before` (of one session, if given), newest first."""
        rows = self._read(
            "SELECT t.id, t.completion_id, t.session_id, t.idx, t.kind, t.status, t.created, t.adapter_version,"
            " substr(t.text, 1, :cut) AS text, length(t.text) AS text_len, t.tool_calls,"
            # the last user message, picked by SQLite's JSON functions: the request is never decoded in Python
            " (SELECT m.value FROM json_each(t.request, '$.messages') m WHERE json_extract(m.value, '$.role') = 'user'"
            "  ORDER BY m.key DESC LIMIT 1) AS user_msg,"
            " n.role AS next_role, substr(n.content, 1, :cut) AS next_content, length(n.content) AS next_len,"
            " j.score AS j_score, j.hint AS j_hint, f.score AS f_score, f.comment AS f_comment,"
            " f.hint IS NOT NULL AS f_hint, s.excluded,"
            " EXISTS (SELECT 1 FROM train_uses u JOIN train_runs r ON r.id = u.run_id"
            "         WHERE u.turn_id = t.id AND r.status = 'done') AS trained"
            " FROM turns t JOIN sessions s ON s.id = t.session_id LEFT JOIN next_states n ON n.turn_id = t.id"
            " LEFT JOIN judgments j ON j.turn_id = t.id LEFT JOIN feedback f ON f.turn_id = t.id"
            # one session: through its (session_id, idx) index, not a walk down every turn
            f" WHERE t.id < :before{' AND t.session_id = :session' if session_id is not None else ''}"
            " ORDER BY t.id DESC LIMIT :limit",
            {"cut": cut, "before": before if before is not None else 2**62, "session": session_id, "limit": limit})
        out = []
        for r in rows:
            user, user_cut = _user_text(r["user_msg"], cut)
            cuts = {"user": user_cut, "answer": r["text_len"] > cut, "next_state": (r["next_len"] or 0) > cut}
            out.append(TurnView(
                id=r["id"], completion_id=r["completion_id"], session_id=r["session_id"], index=r["idx"],
                kind=r["kind"], status=r["status"], created=r["created"], adapter_version=r["adapter_version"],
                user=user, answer=r["text"],
                tool_calls=[{"name": c["name"], "arguments": c["arguments"]} for c in json.loads(r["tool_calls"])],
                next_role=r["next_role"], next_state=r["next_content"], judge_score=r["j_score"],
                judge_hint=r["j_hint"], feedback_score=r["f_score"], feedback_comment=r["f_comment"],
                feedback_hint=bool(r["f_hint"]), trained=bool(r["trained"]), session_excluded=bool(r["excluded"]),
                truncated=[k for k, over in cuts.items() if over]))
        return out

    def session_views(self, before: int | None = None, limit: int = 20) -> list[SessionView]:
        """The newest sessions with an id below `before`, newest first, with their turns' rewards.
        Their turns are found through the (session_id, idx) index: no turn row is read."""
        rows = self._read(
            "SELECT s.id, s.key, s.first_seen, s.last_seen, s.closed, s.excluded, COUNT(t.id) AS turns,"
            " COUNT(COALESCE(f.score, j.score)) AS scored, AVG(COALESCE(f.score, j.score)) AS mean,"
            " COALESCE(SUM(COALESCE(f.score, j.score) = 1), 0) AS pos,"
            " COALESCE(SUM(COALESCE(f.score, j.score) = -1), 0) AS neg,"
            " COALESCE(SUM(EXISTS (SELECT 1 FROM train_uses u JOIN train_runs r ON r.id = u.run_id"
            "                      WHERE u.turn_id = t.id AND r.status = 'done')), 0) AS trained"
            " FROM (SELECT * FROM sessions WHERE id < ? ORDER BY id DESC LIMIT ?) s"
            " LEFT JOIN turns t ON t.session_id = s.id LEFT JOIN judgments j ON j.turn_id = t.id"
            " LEFT JOIN feedback f ON f.turn_id = t.id GROUP BY s.id ORDER BY s.id DESC",
            (before if before is not None else 2**62, limit))
        return [SessionView(id=r["id"], key=r["key"], first_seen=r["first_seen"], last_seen=r["last_seen"],
                            closed=bool(r["closed"]), excluded=bool(r["excluded"]), turns=r["turns"],
                            scored=r["scored"], trained=r["trained"], mean=r["mean"], positive=r["pos"],
                            negative=r["neg"]) for r in rows]

    def reward_trend(self, buckets: int = 48) -> list[RewardBucket]:
        """Every scored turn (explicit feedback over the judge), oldest first, in up to `buckets`
        runs that split the span of their turn ids evenly (a run with no scored turn is left out).
        One pass over the judgments and feedback tables; the turns table is visited only for each
        run's first and last time (ranking the turns instead cost 4x as much on 10,000 turns)."""
        row = self._read("SELECT (SELECT MIN(turn_id) FROM judgments), (SELECT MAX(turn_id) FROM judgments),"
                         " (SELECT MIN(turn_id) FROM feedback), (SELECT MAX(turn_id) FROM feedback)")[0]
        edges = [e for e in row if e is not None]
        if not edges:
            return []
        lo, hi = min(edges), max(edges)
        rows = self._read(
            "WITH s AS (SELECT j.turn_id AS id, COALESCE(f.score, j.score) AS score FROM judgments j"
            "           LEFT JOIN feedback f ON f.turn_id = j.turn_id"
            "           UNION ALL SELECT f.turn_id, f.score FROM feedback f"
            "           WHERE NOT EXISTS (SELECT 1 FROM judgments j WHERE j.turn_id = f.turn_id))"
            " SELECT (id - ?) * ? / ? AS b, MIN(id) AS first, MAX(id) AS last, COUNT(*) AS n, AVG(score) AS mean,"
            " SUM(score = 1) AS pos, SUM(score = -1) AS neg FROM s GROUP BY b ORDER BY b",
            (lo, buckets, hi - lo + 1))
        ends = sorted({r["first"] for r in rows} | {r["last"] for r in rows})
        marks = ",".join("?" * len(ends))
        created = {r["id"]: r["created"] for r in self._read(f"SELECT id, created FROM turns WHERE id IN ({marks})",
                                                             tuple(ends))}
        return [RewardBucket(first_turn=r["first"], last_turn=r["last"], start=created.get(r["first"], 0.0),
                             end=created.get(r["last"], 0.0), n=r["n"], mean=r["mean"], positive=r["pos"],
                             negative=r["neg"]) for r in rows]

    def set_session_excluded(self, session_id: int, excluded: bool) -> bool:
        """Keep a session's turns out of training (and out of the gate's replay), or let them back
        in; False when there is no such session."""
        return self._write("UPDATE sessions SET excluded = ? WHERE id = ?", (int(excluded), session_id)).rowcount == 1

    def excluded_turns(self, turn_ids: list[int]) -> list[int]:
        """Those of `turn_ids` whose session is excluded from training (a round checks its turns)."""
        if not turn_ids:
            return []
        marks = ",".join("?" * len(turn_ids))
        rows = self._read(f"SELECT t.id FROM turns t JOIN sessions s ON s.id = t.session_id WHERE s.excluded = 1"
                          f" AND t.id IN ({marks}) ORDER BY t.id", tuple(turn_ids))
        return [r["id"] for r in rows]

    def learning_paused(self) -> bool:
        rows = self._read("SELECT value FROM flags WHERE name = 'learning_paused'")
        return bool(rows) and rows[0]["value"] == "1"

    def set_learning_paused(self, paused: bool) -> None:
        """The user's switch: while set, the scheduler neither trains nor publishes (it still judges)."""
        self._write("INSERT INTO flags (name, value, updated) VALUES ('learning_paused', ?, ?) ON CONFLICT(name)"
                    " DO UPDATE SET value = excluded.value, updated = excluded.updated",
                    (str(int(paused)), time.time()))


def _user_text(message: str | None, cut: int) -> tuple[str, bool]:
    """The text of a stored user message (a JSON object whose content is a string or a list of
    parts), cut to `cut` characters; and whether it was cut."""
    if message is None:
        return "", False
    content = json.loads(message).get("content")
    if isinstance(content, list):
        content = "\n".join(p.get("text") or "" for p in content if isinstance(p, dict))
    text = content if isinstance(content, str) else ""
    return text[:cut], len(text) > cut
