"""Does it learn? (issue 27; docs/learning.md)

- run.py: the bench (base, told, oracle and loop columns over scenarios and seeds);
- scenarios.py: the simulated users and their reactions; checkers.py: their pure checkers;
  prompts.py and data/: the conversation and held-out prompts; probes.py: the bench's own probes;
- evaluate.py: a daemon run and its greedy scoring; oracle.py: the oracle column;
- measures.py: continuous measures and bootstrap intervals; report.py: summaries and plots;
- reach.py: which preferences the model's own samples already meet.
"""
