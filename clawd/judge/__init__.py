"""The judge: the served model scores each main turn from what came next (design §6).

  judge.py        Judge: the prompts, the verdict read from the verdict words and the hidden state,
                  judgments written to the store
  calibration.py  how far to trust it, per model file, from the shipped labeled cases (data/)
  hints.py        OPD hints built from the evidence; none ever quotes a tool's output
  data/           judge_cases.jsonl, the labeled corpus's tuning split

Reads turn rows, writes judgment rows; never imports serve, train or publish.
"""
