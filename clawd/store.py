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

from .records import (Feedback, Judgment, NextState, RewardBucket, SessionView, ToolCall, Turn, TurnView,
                      Vote)

# Append only: a released migration is never edited, a change is a new entry.
MIGRATIONS: list[tuple[str, str]] = [
    (
        "001_sessions_turns",
        """
        CREATE TABLE sessions (
            id INTEGER PRIMARY KEY,
            key TEXT NOT NULL UNIQUE,          -- X-Session-Id, or generated when linked by content
            first_seen REAL NOT NULL,
            last_seen REAL NOT NULL,
            closed INTEGER NOT NULL DEFAULT 0
        );
        CREATE TABLE turns (
            id INTEGER PRIMARY KEY,
            session_id INTEGER NOT NULL REFERENCES sessions(id),
            idx INTEGER NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('main', 'side')),
            completion_id TEXT NOT NULL UNIQUE,
            request TEXT NOT NULL,             -- JSON: messages, tools, sampling parameters
            prompt_ids BLOB NOT NULL,          -- int32 little-endian
            completion_ids BLOB NOT NULL,      -- int32 little-endian
            logprobs BLOB NOT NULL,            -- float32, log p of each sampled token
            text TEXT NOT NULL DEFAULT '',
            tool_calls TEXT NOT NULL DEFAULT '[]',
            finish_reason TEXT,
            adapter_version INTEGER,
            timings TEXT NOT NULL DEFAULT '{}',
            status TEXT NOT NULL CHECK (status IN ('running', 'ok', 'aborted', 'error')),
            output_key TEXT,                   -- digest of text + tool calls, for linking by content
            created REAL NOT NULL
        );
        CREATE INDEX turns_output_key ON turns(output_key);
        CREATE INDEX turns_session ON turns(session_id, idx);
        CREATE TABLE next_states (
            turn_id INTEGER PRIMARY KEY REFERENCES turns(id),
            role TEXT NOT NULL CHECK (role IN ('user', 'tool')),
            content TEXT NOT NULL,
            messages TEXT NOT NULL,
            created REAL NOT NULL
        );
        """,
    ),
    (
        "002_judgments_feedback_training",
        """
        CREATE TABLE judgments (
            turn_id INTEGER PRIMARY KEY REFERENCES turns(id),   -- a turn is judged exactly once
            method TEXT NOT NULL CHECK (method IN ('vote', 'score')),
            score INTEGER NOT NULL CHECK (score IN (-1, 0, 1)),
            votes TEXT NOT NULL DEFAULT '[]',  -- JSON: [{"kind": "eval"|"hint", "raw": str, "value": int|null}]
            probs TEXT,                        -- JSON: {"1": p, "-1": p, "0": p} for method 'score'
            hint TEXT,                         -- chosen OPD hint, or NULL
            judge_model TEXT NOT NULL,
            judge_adapter INTEGER,             -- NULL: base weights
            timings TEXT NOT NULL DEFAULT '{}',
            created REAL NOT NULL
        );
        CREATE TABLE feedback (
            turn_id INTEGER PRIMARY KEY REFERENCES turns(id),   -- the latest explicit feedback wins
            score INTEGER NOT NULL CHECK (score IN (-1, 1)),
            comment TEXT,
            created REAL NOT NULL
        );
        CREATE TABLE train_runs (
            id INTEGER PRIMARY KEY,
            method TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed')),
            turn_ids TEXT NOT NULL DEFAULT '[]',
            adapter_version INTEGER,           -- what it produced
            parent_version INTEGER,            -- what it continued from
            metrics TEXT NOT NULL DEFAULT '{}',
            error TEXT,
            started REAL NOT NULL,
            finished REAL
        );
        CREATE TABLE train_uses (              -- which turns a finished run consumed
            turn_id INTEGER NOT NULL REFERENCES turns(id),
            run_id INTEGER NOT NULL REFERENCES train_runs(id),
            PRIMARY KEY (turn_id, run_id)
        );
        CREATE TABLE adapters (
            version INTEGER PRIMARY KEY,
            path TEXT NOT NULL,
            parent INTEGER,
            status TEXT NOT NULL CHECK (status IN ('trained', 'published', 'rejected', 'retired')),
            gate TEXT,                         -- JSON gate results
            meta TEXT NOT NULL DEFAULT '{}',
            created REAL NOT NULL
        );
        """,
    ),
    (
        # The judge's method 'ask' (issue 12); a feedback comment becomes the turn's OPD hint,
        # stored beside it once checked (it must not quote a tool's result).
        "003_judge_ask_feedback_hint",
        """
        CREATE TABLE judgments_new (
            turn_id INTEGER PRIMARY KEY REFERENCES turns(id),
            method TEXT NOT NULL CHECK (method IN ('vote', 'score', 'ask')),
            score INTEGER NOT NULL CHECK (score IN (-1, 0, 1)),
            votes TEXT NOT NULL DEFAULT '[]',
            probs TEXT,                        -- JSON: P of each verdict ("1", "0", "-1") and the raw features
            hint TEXT,                         -- OPD hint from the evidence, or NULL
            judge_model TEXT NOT NULL,
            judge_adapter INTEGER,
            timings TEXT NOT NULL DEFAULT '{}',
            created REAL NOT NULL
        );
        INSERT INTO judgments_new SELECT turn_id, method, score, votes, probs, hint, judge_model, judge_adapter,
            timings, created FROM judgments;
        DROP TABLE judgments;
        ALTER TABLE judgments_new RENAME TO judgments;
        ALTER TABLE feedback ADD COLUMN hint TEXT;
        """,
    ),
    (
        # The dashboard (issue 17): a session the user keeps out of training (something private
        # was pasted), and the user's switch that stops training and publishing.
        "004_dashboard_controls",
        """
        ALTER TABLE sessions ADD COLUMN excluded INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE flags (
            name TEXT PRIMARY KEY,             -- 'learning_paused'
            value TEXT NOT NULL,
            updated REAL NOT NULL
        );
        -- status counts turns by kind and status on every poll of the dashboard; with this index
        -- it reads the index alone (10,000 OpenClaw-sized turns: 128 ms without, 3 ms with)
        CREATE INDEX turns_kind_status ON turns(kind, status);
        -- the reward trend scans every verdict's score: from this index, not the rows with their votes
        CREATE INDEX judgments_score ON judgments(turn_id, score);
        """,
    ),
]


# Main turns that finished, have a next state and no judgment yet.
_UNJUDGED = ("FROM turns t JOIN next_states n ON n.turn_id = t.id LEFT JOIN judgments j ON j.turn_id = t.id"
             " WHERE t.kind = 'main' AND t.status = 'ok' AND j.turn_id IS NULL")


def _ints(blob: bytes) -> list[int]:
    a = array("i")
    a.frombytes(blob)
    return a.tolist()


def _floats(blob: bytes) -> list[float]:
    a = array("f")
    a.frombytes(blob)
    return a.tolist()


class StorageError(RuntimeError):
    """The database cannot be written (disk full, read-only file system, permissions). The write
    was rolled back whole; the daemon keeps running and writes again once the cause is fixed."""


def _storage_error(path: Path, e: sqlite3.Error) -> StorageError:
    return StorageError(f"cannot write the database {path}: {e}. Free disk space or fix the permissions of "
                        "that file and its directory; clawd carries on by itself once it can write.")


class Store:
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

    def _read(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
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

    def session(self, session_id: int) -> dict[str, Any]:
        return dict(self._read("SELECT * FROM sessions WHERE id = ?", (session_id,))[0])

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

    def integrity_ok(self) -> bool:
        return self._read("PRAGMA integrity_check")[0][0] == "ok"

    # -- adapters (publish) ---------------------------------------------------------------------
    def add_adapter(self, version: int, path: str, parent: int | None, meta: dict[str, Any],
                    status: str = "trained") -> bool:
        """Register an adapter directory; False when the version is already known."""
        cur = self._write(
            "INSERT OR IGNORE INTO adapters (version, path, parent, status, meta, created) VALUES (?, ?, ?, ?, ?, ?)",
            (version, path, parent, status, json.dumps(meta), time.time()))
        return cur.rowcount == 1

    def set_adapter_status(self, version: int, status: str, gate: dict[str, Any] | None = None) -> None:
        """Change an adapter's status; `gate` (when given) replaces its stored gate results."""
        if gate is None:
            self._write("UPDATE adapters SET status = ? WHERE version = ?", (status, version))
        else:
            self._write("UPDATE adapters SET status = ?, gate = ? WHERE version = ?", (status, json.dumps(gate), version))

    def adapters(self) -> list[dict[str, Any]]:
        """Every registered adapter, oldest first, gate and meta decoded."""
        rows = self._read("SELECT * FROM adapters ORDER BY version")
        return [{**dict(r), "gate": json.loads(r["gate"]) if r["gate"] else None, "meta": json.loads(r["meta"])}
                for r in rows]

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


    # -- the dashboard (issue 17): paginated reads that never load token arrays, and its controls --
    # Keyset pagination (id < before) walks a primary key down from the newest row, so a page costs
    # the same on 10,000 turns as on 10. Long texts are cut in SQL: an OpenClaw tool result can be
    # megabytes, and a page shows a few thousand characters of it.
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
