"""How well the judge reads what came next (docs/judge.md).

- run.py: calibrated verdicts against hand-labeled turns, per method;
- layers.py: which block's hidden state the judge should read (tuning split only);
- scorer_cases.py: builds the GRPO scorer's labeled cases; scorer.py: measures the scorer on them;
- pairwise.py: the scorer's pairwise form (which of two answers does what the user asked), on the same cases.
"""
