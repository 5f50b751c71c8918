"""Training cost (docs/training.md). train.py: a round's seconds and peak memory, LoRA steps per
second at two lengths, per backend."""
