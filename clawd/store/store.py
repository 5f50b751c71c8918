"""SQLite: one database file, WAL, named append-only migrations, typed reads and writes.

Every write is its own transaction with synchronous=FULL, so a row a client was answered
from survives kill -9 and power loss alike. One connection behind a lock: writes are a few
per request, far below what would need a pool.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from array import array
from pathlib import Path
from typing import Any

from .migrations import MIGRATIONS
from .records import Adapter, Feedback, GateResult, Judgment, NextState, ToolCall, Turn, Vote
from .rollouts import RolloutQueries, _floats, _ints
from .views import DashboardQueries

# Main turns that finished, have a next state and no judgment yet.
_UNJUDGED = ("FROM turns t JOIN next_states n ON n.turn_id = t.id LEFT JOIN judgments j ON j.turn_id = t.id"
             " WHERE t.kind = 'main' AND t.status = 'ok' AND j.turn_id IS NULL")


class StorageError(RuntimeError):
    """The database cannot be written (disk full, read-only file system, permissions). The write
    was rolled back whole; the daemon keeps running and writes again once the cause is fixed."""


def _storage_error(path: Path, e: sqlite3.Error) -> StorageError:
    return StorageError(f"cannot write the database {path}: {e}. Free disk space or fix the permissions of "
                        "that file and its directory; clawd carries on by itself once it can write.")


class Store(DashboardQueries, RolloutQueries):
    def __init__(self, path: Path):
        self.path = Path(path)
        new = not self.path.exists()
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=30)
            if new:
                os.chmod(self.path, 0o600)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.OperationalError as e:
            raise _storage_error(self.path, e) from e

    def _migrate(self) -> None:
        with self._lock:
            self._db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied REAL NOT NULL)")
            done = {r[0] for r in self._db.execute("SELECT name FROM _migrations")}
            for name, sql in MIGRATIONS:
                if name in done:
                    continue
                # executescript commits on its own; the migration and its record go in one script.
                self._db.executescript(
                    f"BEGIN; {sql}; INSERT INTO _migrations VALUES ('{name}', {time.time()}); COMMIT;"
                )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _write(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        with self._lock:
            try:
                return self._db.execute(sql, args)
            except sqlite3.OperationalError as e:  # SQLITE_FULL, READONLY, IOERR, CANTOPEN: not the caller's fault
                if self._db.in_transaction:
                    try:
                        self._db.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass  # SQLite rolled back by itself
                raise _storage_error(self.path, e) from e

    def _transaction(self, steps: list[tuple[str, tuple | list[tuple]]]) -> int | None:
        """Several writes as one transaction: all of them or none (a list of argument tuples runs
        its statement once per tuple). Returns the row id the first statement inserted, if any."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                first = None
                for i, (sql, args) in enumerate(steps):
                    if isinstance(args, list):
                        self._db.executemany(sql, args)
                    else:
                        cur = self._db.execute(sql, args)
                        first = cur.lastrowid if i == 0 else first
                self._db.execute("COMMIT")
                return first
            except BaseException as e:
                if self._db.in_transaction:
                    try:
                        self._db.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass  # SQLite rolled back by itself
                if isinstance(e, sqlite3.OperationalError):
                    raise _storage_error(self.path, e) from e
                raise

    def _read(self, sql: str, args: tuple | dict[str, Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # -- sessions ---------------------------------------------------------------------------
    def session_by_key(self, key: str) -> int | None:
        rows = self._read("SELECT id FROM sessions WHERE key = ?", (key,))
        return rows[0]["id"] if rows else None

    def open_session(self, key: str) -> int:
        now = time.time()
        self._write(
            "INSERT INTO sessions (key, first_seen, last_seen) VALUES (?, ?, ?) "
            "ON CONFLICT(key) DO UPDATE SET last_seen = excluded.last_seen, closed = 0",
            (key, now, now),
        )
        return self.session_by_key(key)  # type: ignore[return-value]

    def touch_session(self, session_id: int, closed: bool = False) -> None:
        self._write("UPDATE sessions SET last_seen = ?, closed = ? WHERE id = ?", (time.time(), int(closed), session_id))

    def close_stale_sessions(self, timeout: float) -> int:
        cur = self._write("UPDATE sessions SET closed = 1 WHERE closed = 0 AND last_seen < ?", (time.time() - timeout,))
        return cur.rowcount

    def next_index(self, session_id: int) -> int:
        return self._read("SELECT COUNT(*) FROM turns WHERE session_id = ?", (session_id,))[0][0]

    # -- turns --------------------------------------------------------------------------------
    def insert_turn(self, t: Turn) -> int:
        """Record a turn as it starts (status 'running'), before the first token goes out."""
        cur = self._write(
            "INSERT INTO turns (session_id, idx, kind, completion_id, request, prompt_ids, completion_ids, logprobs,"
            " status, adapter_version, created) VALUES (?, ?, ?, ?, ?, ?, x'', x'', 'running', ?, ?)",
            (t.session_id, t.index, t.kind, t.completion_id, json.dumps(t.request), array("i", t.prompt_ids).tobytes(),
             t.adapter_version, time.time()),
        )
        t.id = cur.lastrowid
        return t.id  # type: ignore[return-value]

    def finish_turn(self, t: Turn) -> None:
        """Write the answer in one transaction: the row is complete or still 'running', never half."""
        self._write(
            "UPDATE turns SET completion_ids = ?, logprobs = ?, text = ?, tool_calls = ?, finish_reason = ?,"
            " timings = ?, status = ?, output_key = ?, adapter_version = ? WHERE id = ?",
            (array("i", t.completion_ids).tobytes(), array("f", t.logprobs).tobytes(), t.text,
             json.dumps([c.__dict__ for c in t.tool_calls]), t.finish_reason, json.dumps(t.timings), t.status,
             t.output_key if t.status == "ok" else None, t.adapter_version, t.id),
        )

    def recover_interrupted(self) -> int:
        """Turns left 'running' by a crash were never answered in full: mark them aborted."""
        return self._write("UPDATE turns SET status = 'aborted' WHERE status = 'running'").rowcount

    def fail_unstaged_runs(self) -> int:
        """At daemon start, with no training checkpoint on disk: runs still 'running' were killed
        before their first step and will never finish (their turns stay ready for the next round)."""
        return self._write("UPDATE train_runs SET status = 'failed', error = 'interrupted before its first checkpoint',"
                           " finished = ? WHERE status = 'running'", (time.time(),)).rowcount

    def turns_by_output(self, key: str, limit: int = 8) -> list[Turn]:
        """The newest turns whose answer has this key, newest first."""
        rows = self._read("SELECT * FROM turns WHERE output_key = ? ORDER BY id DESC LIMIT ?", (key, limit))
        return [self._turn(r) for r in rows]

    def turn(self, turn_id: int) -> Turn | None:
        rows = self._read("SELECT * FROM turns WHERE id = ?", (turn_id,))
        return self._turn(rows[0]) if rows else None

    def turns(self, session_id: int | None = None) -> list[Turn]:
        if session_id is None:
            rows = self._read("SELECT * FROM turns ORDER BY id")
        else:
            rows = self._read("SELECT * FROM turns WHERE session_id = ? ORDER BY idx", (session_id,))
        return [self._turn(r) for r in rows]

    @staticmethod
    def _turn(r: sqlite3.Row) -> Turn:
        return Turn(
            id=r["id"], session_id=r["session_id"], index=r["idx"], kind=r["kind"], completion_id=r["completion_id"],
            request=json.loads(r["request"]), prompt_ids=_ints(r["prompt_ids"]), completion_ids=_ints(r["completion_ids"]),
            logprobs=_floats(r["logprobs"]), text=r["text"], tool_calls=[ToolCall(**c) for c in json.loads(r["tool_calls"])],
            finish_reason=r["finish_reason"], adapter_version=r["adapter_version"], timings=json.loads(r["timings"]),
            status=r["status"],
        )

    # -- next states --------------------------------------------------------------------------
    def add_next_state(self, ns: NextState) -> bool:
        """Attach what came after a turn; the first one recorded wins (a client retry re-sends it)."""
        cur = self._write(
            "INSERT OR IGNORE INTO next_states (turn_id, role, content, messages, created) VALUES (?, ?, ?, ?, ?)",
            (ns.turn_id, ns.role, ns.content, json.dumps(ns.messages), time.time()),
        )
        return cur.rowcount == 1

    def next_state(self, turn_id: int) -> NextState | None:
        rows = self._read("SELECT * FROM next_states WHERE turn_id = ?", (turn_id,))
        if not rows:
            return None
        r = rows[0]
        return NextState(turn_id=r["turn_id"], role=r["role"], content=r["content"], messages=json.loads(r["messages"]))

    # -- judgments and feedback ----------------------------------------------------------------
    def unjudged_turns(self, limit: int = 100) -> list[Turn]:
        """Main turns that finished, have a next state and no judgment yet, oldest first."""
        rows = self._read(f"SELECT t.* {_UNJUDGED} ORDER BY t.id LIMIT ?", (limit,))
        return [self._turn(r) for r in rows]

    def count_unjudged(self) -> int:
        """How many turns `unjudged_turns` would return, without loading them (the scheduler asks every tick)."""
        return self._read(f"SELECT COUNT(*) {_UNJUDGED}")[0][0]

    def add_judgment(self, j: Judgment) -> bool:
        """Store a verdict; False when the turn was already judged (it is judged exactly once)."""
        cur = self._write(
            # ON CONFLICT, not OR IGNORE: a second verdict is dropped, a CHECK violation still raises
            "INSERT INTO judgments (turn_id, method, score, votes, probs, hint, judge_model, judge_adapter,"
            " timings, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(turn_id) DO NOTHING",
            (j.turn_id, j.method, j.score, json.dumps([v.__dict__ for v in j.votes]),
             json.dumps(j.probs) if j.probs is not None else None, j.hint, j.judge_model, j.judge_adapter,
             json.dumps(j.timings), time.time()),
        )
        return cur.rowcount == 1

    def judgment(self, turn_id: int) -> Judgment | None:
        rows = self._read("SELECT * FROM judgments WHERE turn_id = ?", (turn_id,))
        if not rows:
            return None
        r = rows[0]
        return Judgment(turn_id=r["turn_id"], method=r["method"], score=r["score"], judge_model=r["judge_model"],
                        votes=[Vote(**v) for v in json.loads(r["votes"])],
                        probs=json.loads(r["probs"]) if r["probs"] else None, hint=r["hint"],
                        judge_adapter=r["judge_adapter"], timings=json.loads(r["timings"]))

    def turn_by_completion_id(self, completion_id: str) -> Turn | None:
        rows = self._read("SELECT * FROM turns WHERE completion_id = ?", (completion_id,))
        return self._turn(rows[0]) if rows else None

    def set_feedback(self, f: Feedback) -> None:
        self._write(
            "INSERT INTO feedback (turn_id, score, comment, hint, created) VALUES (?, ?, ?, ?, ?) ON CONFLICT(turn_id)"
            " DO UPDATE SET score = excluded.score, comment = excluded.comment, hint = excluded.hint,"
            " created = excluded.created",
            (f.turn_id, f.score, f.comment, f.hint, time.time()),
        )

    def feedback(self, turn_id: int) -> Feedback | None:
        rows = self._read("SELECT * FROM feedback WHERE turn_id = ?", (turn_id,))
        if not rows:
            return None
        r = rows[0]
        return Feedback(turn_id=r["turn_id"], score=r["score"], comment=r["comment"], hint=r["hint"])

    def recent_scores(self, n: int) -> list[int]:
        """The effective scores (explicit feedback over the judge) of the last `n` judged turns, oldest first."""
        rows = self._read(
            "SELECT COALESCE(f.score, j.score) AS s FROM judgments j LEFT JOIN feedback f ON f.turn_id = j.turn_id"
            " ORDER BY j.turn_id DESC LIMIT ?", (n,))
        return [r["s"] for r in reversed(rows)]

    # -- status -------------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        r = self._read(
            "SELECT COUNT(*) AS turns, SUM(kind = 'main') AS main, SUM(kind = 'side') AS side,"
            " SUM(status = 'aborted') AS aborted, SUM(status = 'error') AS errors,"
            " (SELECT COUNT(*) FROM next_states) AS with_next_state,"
            " (SELECT COUNT(*) FROM judgments) AS judged, (SELECT COUNT(*) FROM feedback) AS feedback,"
            " (SELECT COUNT(DISTINCT u.turn_id) FROM train_uses u JOIN train_runs r ON r.id = u.run_id"
            "  WHERE r.status = 'done') AS trained,"
            " (SELECT COUNT(*) FROM sessions) AS sessions FROM turns"
        )[0]
        return {k: int(r[k] or 0) for k in r.keys()}

    # -- adapters (publish) ---------------------------------------------------------------------
    def add_adapter(self, version: int, path: str, parent: int | None, meta: dict[str, Any],
                    status: str = "trained") -> bool:
        """Register an adapter directory; False when the version is already known."""
        cur = self._write(
            "INSERT OR IGNORE INTO adapters (version, path, parent, status, meta, created) VALUES (?, ?, ?, ?, ?, ?)",
            (version, path, parent, status, json.dumps(meta), time.time()))
        return cur.rowcount == 1

    def set_adapter_status(self, version: int, status: str, gate: GateResult | None = None) -> None:
        """Change an adapter's status; `gate` (when given) replaces its stored gate results."""
        if gate is None:
            self._write("UPDATE adapters SET status = ? WHERE version = ?", (status, version))
        else:
            self._write("UPDATE adapters SET status = ?, gate = ? WHERE version = ?", (status, json.dumps(gate.to_json()), version))

    def adapters(self) -> list[Adapter]:
        """Every registered adapter, oldest first."""
        rows = self._read("SELECT * FROM adapters ORDER BY version")
        return [Adapter(version=r["version"], path=r["path"], parent=r["parent"], status=r["status"],
                        meta=json.loads(r["meta"]), gate=GateResult.from_json(json.loads(r["gate"])) if r["gate"] else None,
                        created=r["created"]) for r in rows]

    def max_adapter_version(self) -> int:
        return self._read("SELECT COALESCE(MAX(version), 0) FROM adapters")[0][0]

    # -- training rounds (train) ------------------------------------------------------------------
    def ready_turns(self, rl: bool, opd: bool, limit: int) -> list[int]:
        """Main turns that no finished run has used, none from a session the user excluded, oldest
        first, with a signal: a non-zero score (`rl`) or a hint (`opd`). Explicit feedback overrides the judge; the judge's hint counts
        unless the user's feedback was positive."""
        rows = self._read(
            "SELECT t.id FROM turns t LEFT JOIN judgments j ON j.turn_id = t.id LEFT JOIN feedback f ON f.turn_id = t.id"
            " WHERE t.kind = 'main' AND t.status = 'ok' AND length(t.completion_ids) > 0"
            " AND (j.turn_id IS NOT NULL OR f.turn_id IS NOT NULL)"
            " AND ((? AND COALESCE(f.score, j.score) != 0) OR (? AND trim(COALESCE(f.hint,"
            "      CASE WHEN f.turn_id IS NULL OR f.score < 0 THEN j.hint END, '')) != ''))"
            " AND t.id NOT IN (SELECT u.turn_id FROM train_uses u JOIN train_runs r ON r.id = u.run_id"
            "                  WHERE r.status = 'done')"
            " AND t.session_id NOT IN (SELECT id FROM sessions WHERE excluded = 1)"  # the user kept them out
            " ORDER BY t.id LIMIT ?", (int(rl), int(opd), limit))
        return [r[0] for r in rows]

    def start_run(self, method: str, turn_ids: list[int], parent: int | None) -> int:
        cur = self._write("INSERT INTO train_runs (method, status, turn_ids, parent_version, started)"
                          " VALUES (?, 'running', ?, ?, ?)", (method, json.dumps(turn_ids), parent, time.time()))
        return cur.lastrowid  # type: ignore[return-value]

    def finish_run(self, run_id: int, status: str, error: str | None = None) -> None:
        self._write("UPDATE train_runs SET status = ?, error = ?, finished = ? WHERE id = ?",
                    (status, error, time.time(), run_id))

    def record_round(self, run_id: int, version: int, path: str, parent: int | None, meta: dict[str, Any],
                     turn_ids: list[int], metrics: dict[str, Any], group_ids: list[int] | None = None) -> None:
        """One transaction: the adapter row, the turns and rollout groups consumed, the run done.
        Idempotent, so a round killed after writing its directory records the same rows when it resumes."""
        now = time.time()
        self._transaction([
            ("INSERT OR IGNORE INTO adapters (version, path, parent, status, meta, created)"
             " VALUES (?, ?, ?, 'trained', ?, ?)", (version, path, parent, json.dumps(meta), now)),
            ("INSERT OR IGNORE INTO train_uses (turn_id, run_id) VALUES (?, ?)", [(t, run_id) for t in turn_ids]),
            ("INSERT OR IGNORE INTO group_uses (group_id, run_id) VALUES (?, ?)", [(g, run_id) for g in group_ids or []]),
            ("UPDATE train_runs SET status = 'done', adapter_version = ?, metrics = ?, error = NULL, finished = ?"
             " WHERE id = ?", (version, json.dumps(metrics), now, run_id)),
        ])

    def positive_turns(self, limit: int, exclude: set[int] | None = None) -> list[Turn]:
        """The most recent finished main turns judged +1 (explicit feedback overrides the judge),
        newest first, leaving out `exclude` (the turns an adapter was trained on) and the turns of
        sessions excluded from training (the gate replays these; what is private stays out)."""
        rows = self._read(
            "SELECT t.* FROM turns t LEFT JOIN judgments j ON j.turn_id = t.id LEFT JOIN feedback f ON f.turn_id = t.id"
            " WHERE t.kind = 'main' AND t.status = 'ok' AND COALESCE(f.score, j.score) = 1"
            " AND length(t.completion_ids) > 0 AND t.session_id NOT IN (SELECT id FROM sessions WHERE excluded = 1)"
            " ORDER BY t.id DESC")
        out = []
        for r in rows:
            if exclude and r["id"] in exclude:
                continue
            out.append(self._turn(r))
            if len(out) >= limit:
                break
        return out
