"""The store: the one SQLite database every stage meets through (design §3).

  records.py     the typed records the stages pass on (Turn, NextState, Judgment, ...); imports
                 nothing of clawd, the ground floor
  answers.py     what the HTTP API answers with (Status, AdaptersState, ...); the CLI's client decodes them
  store.py       Store: open, migrate, typed reads and writes; the only place SQL runs
  views.py       the dashboard's reads and controls (part of Store, on its connection)
  rollouts.py    GRPO's groups of answers, their scores, and the user's corrections (part of Store)
  hints.py       the user's evidence as OPD hints; none ever quotes a tool's output (judge and serve share it)
  migrations.py  the schema as named, append-only migrations
"""
