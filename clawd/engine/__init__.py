"""The engine: the loaded GGUF in llama.cpp, and everything that decides which token comes next.

  engine.py         Engine: tokenize, render, generate token by token with each token's logprob,
                    adapters swapped between requests (the serving context)
  background.py     the judge's second context on the same weights, and its layer tap
  compute_lock.py   the one priority lock both contexts share (a user request goes first)
  prompt_cache.py   KV states of recent prompts, in memory and on disk
  chat_template.py  the model's own Jinja chat template (pure Python: the trainer renders with it too)
  tool_calls.py     what models write as tool calls, parsed; the call grammar and its lazy trigger
  grammar.py        a GBNF grammar as a mask inside clawd's own sampling loop
  sampling.py       log-softmax and sampling from a row of logits (pure numpy)

Nothing here imports the stages; the stages import from here. This file imports nothing, so a
light module (chat_template, sampling) does not load llama.cpp with it.
"""
