"""Training: judged turns and GRPO groups → a LoRA adapter, by Binary RL, On-Policy Distillation
or both, and GRPO (design §7).

  samples.py  rows → samples (recorded token ids, reward, hinted teacher prompt)
  batches.py  GRPO groups → samples, and the minibatch plans
  loss.py     the PPO clipped surrogate with the combined advantage, OPD's top-K KL, GRPO's loss
  backend.py  the model: transformers + peft (CPU), Unsloth QLoRA (CUDA)
  memory.py   the memory plan (pure)
  scoring.py  what a round holds fixed per sample (log π_old, teacher, base, importance weights)
              and what it records
  loop.py     one round: select, score, step, checkpoint, write adapters/NNNN/
  runner.py   that round in a child process the daemon can pause, resume and stop

Imports nothing heavy here: the daemon's scheduler uses `Trainer`, `ready_turns` (how many turns
wait for training) and `trains_turns` without loading torch.
"""

from .runner import Trainer
from .samples import ready_turns, trains_turns

__all__ = ["Trainer", "ready_turns", "trains_turns"]
