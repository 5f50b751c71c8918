"""The judge: the served model scores each main turn from what came next (design §6).

  judge.py        Judge: the prompts, the verdict read from the verdict words and the hidden state,
                  judgments written to the store
  calibration.py  how far to trust it, per model file, from the shipped labeled cases (data/)
  rollouts.py     GRPO's groups made in idle time: hindsight pairs, K answers sampled with the live adapter
  scorer.py       would this user accept this answer, from their own words; fitted and trusted per model
  data/           judge_cases.jsonl and scorer_cases.jsonl, the labeled corpora's tuning splits

Reads turn rows, writes judgment rows; never imports serve, train or publish.
"""
