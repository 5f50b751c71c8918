"""Tool calls (docs/serving.md, scripts/openclaw-tools.sh).

- toolcall.py: the tool-call grammar's cost in generation speed; limits.py: its cost against the
  number of tools offered;
- task_set.py: small tasks for OpenClaw's own tools; selftest.py: the set checked without a model;
- tasks.py: runs the tasks through stock OpenClaw and summarizes; score.py: scores one task's calls;
- wire.py: a proxy that logs what goes over the wire.
"""
