"""Benchmarks, grouped by subject. Each runs from the checkout's root as a module, e.g.
`python3 -m bench.personalize.run --help` (or `clawd bench personalize --help`), and writes its
summary under bench/results/ (what a doc cites) or bench/out/ (scratch).

- common.py: the `clawd serve` harness (tests/harness.py's), streaming and result writing;
- personalize/: does the daemon learn a user's preference (scenarios, oracle, reach);
- judge/: how well the judge and the GRPO scorer read the user's reaction;
- tools/: tool calls, their grammar's cost and stock OpenClaw on small tasks;
- serving/: latency and throughput of the serving path, the prompt cache, swaps, the dashboard;
- training/: a round's seconds and memory per backend;
- reliability/: kill -9 at random moments.
"""
