"""Training: judged turns → a LoRA adapter, by Binary RL, On-Policy Distillation or both (design §7).

  samples.py  rows → samples (recorded token ids, reward, hinted teacher prompt)
  loss.py     the PPO clipped surrogate with the combined advantage
  backend.py  the model: transformers + peft (CPU), Unsloth QLoRA (CUDA)
  loop.py     one round: select, score, step, checkpoint, write adapters/NNNN/
  runner.py   that round in a child process the daemon can pause, resume and stop

Imports nothing heavy here: the daemon's scheduler uses `Trainer` and `ready_turns` (how many turns
wait for training) without loading torch.
"""

from .runner import Trainer
from .samples import ready_turns

__all__ = ["Trainer", "ready_turns"]
