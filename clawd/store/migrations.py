"""The database schema, as named migrations that Store applies in order at open (design §4).
Each runs in one transaction with its record in `_migrations`, so a kill mid-upgrade leaves the
old schema whole, and an old database upgrades and keeps its rows (tests/test_storage.py)."""

from __future__ import annotations

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
    (
        # GRPO in idle time (issue 28): groups of answers to recorded turns' prompts, each scored
        # against the user's own words, and which finished run trained on which group.
        "005_rollout_groups",
        """
        CREATE TABLE rollout_groups (
            id INTEGER PRIMARY KEY,
            turn_id INTEGER NOT NULL REFERENCES turns(id),
            source TEXT NOT NULL CHECK (source IN ('sampled', 'hindsight')),
            adapter_version INTEGER,           -- what sampled the answers; NULL: the base weights
            temperature REAL NOT NULL,
            scorer TEXT,                       -- NULL until scored; then 'trusted', 'untrusted', 'undecided' (under the margin) or 'hindsight'
            evidence TEXT NOT NULL DEFAULT '[]',  -- JSON: the user's words the scorer read
            created REAL NOT NULL,
            scored REAL
        );
        CREATE INDEX rollout_groups_turn ON rollout_groups(turn_id, adapter_version);
        CREATE UNIQUE INDEX rollout_groups_hindsight ON rollout_groups(turn_id) WHERE source = 'hindsight';
        CREATE TABLE rollouts (
            id INTEGER PRIMARY KEY,
            group_id INTEGER NOT NULL REFERENCES rollout_groups(id),
            k INTEGER NOT NULL,
            completion_ids BLOB NOT NULL,      -- int32 little-endian
            logprobs BLOB NOT NULL,            -- float32, the engine's at T = 1 (empty for hindsight)
            text TEXT NOT NULL,
            reward REAL,
            UNIQUE (group_id, k)
        );
        CREATE TABLE group_uses (              -- which groups a finished run consumed
            group_id INTEGER NOT NULL REFERENCES rollout_groups(id),
            run_id INTEGER NOT NULL REFERENCES train_runs(id),
            PRIMARY KEY (group_id, run_id)
        );
        """,
    ),
    (
        "006_rollout_refused",
        """
        -- an answer the scorer refused (empty, looping, echoing, a repeated call: judge/rollouts.refused):
        -- reward 0, counted in its group's mean, its own tokens never trained on
        ALTER TABLE rollouts ADD COLUMN refused INTEGER NOT NULL DEFAULT 0;
        """,
    ),
]
