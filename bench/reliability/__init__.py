"""Reliability (docs/reliability.md). chaos.py: SIGKILL at random moments; nothing answered is lost."""
