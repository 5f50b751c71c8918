"""The store: the one SQLite database every stage meets through (design §3).

  records.py     the typed records the stages pass on (Turn, NextState, Judgment, ...); imports
                 nothing of clawd, the ground floor
  store.py       Store: open, migrate, typed reads and writes; the only place SQL runs
  views.py       the dashboard's reads and controls (part of Store, on its connection)
  migrations.py  the schema as named, append-only migrations
"""
