"""clawd: a local model daemon that learns from being used."""

__version__ = "0.1.0"
