"""The loaded GGUF: tokenize, render, generate token by token with each sampled token's logprob.

One `Llama` (model + serving context). llama-cpp-python objects are not thread-safe, so every
use goes through one compute lock; a user request always gets it before background work
(`PriorityLock`). The serving context keeps its KV cache between requests, and `Llama.generate`
reuses the longest common prefix: OpenClaw re-sends a ~12k-token prefix every turn, and only the
tokens after it are evaluated again.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp import Llama, LlamaGrammar

from .chat_template import ChatTemplate

log = logging.getLogger("clawd.engine")


class PriorityLock:
    """A mutex where user requests overtake background work.

    Background holders call `should_yield()` between tokens and release when it is true; a user
    waiter then gets the lock within one decoding step. Users are served in arrival order.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held = False
        self._users_waiting = 0

    @contextmanager
    def user(self):
        with self._cond:
            self._users_waiting += 1
            while self._held:
                self._cond.wait()
            self._users_waiting -= 1
            self._held = True
        try:
            yield
        finally:
            with self._cond:
                self._held = False
                self._cond.notify_all()

    @contextmanager
    def background(self):
        with self._cond:
            while self._held or self._users_waiting:
                self._cond.wait()
            self._held = True
        try:
            yield
        finally:
            with self._cond:
                self._held = False
                self._cond.notify_all()

    def should_yield(self) -> bool:
        return self._users_waiting > 0


@dataclass
class Sampling:
    temperature: float = 0.8
    top_p: float = 0.95
    seed: int | None = None
    max_tokens: int = 2048
    grammar: str | None = None  # GBNF; constrains the whole completion


@dataclass
class Step:
    token: int
    logprob: float  # log p(token) under the model's raw distribution (temperature 1)
    piece: bytes  # the token's bytes; may hold part of a UTF-8 character


@dataclass
class GenInfo:
    n_prompt: int = 0
    n_cached: int = 0  # prompt tokens reused from the KV cache (not evaluated again)
    finish: str = "stop"  # "stop" (end-of-generation token) or "length" (limit or full context)


class Engine:
    def __init__(self, model_path: Path, n_ctx: int = 0, threads: int = 0, batch: int = 512, gpu_layers: int = -1):
        self.model_path = Path(model_path)
        threads = threads or os.cpu_count() or 1
        log.info("loading model %s", self.model_path)
        t0 = time.perf_counter()
        self.llm = Llama(
            model_path=str(self.model_path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
            n_batch=batch, n_ubatch=batch, n_gpu_layers=gpu_layers, verbose=False,
        )
        self.load_seconds = time.perf_counter() - t0
        self.n_ctx = self.llm.n_ctx()
        self.n_vocab = self.llm.n_vocab()
        self._vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        meta = self.llm.metadata
        self.n_ctx_train = int(meta.get(f"{meta.get('general.architecture', 'llama')}.context_length", self.n_ctx))
        self.template = ChatTemplate(
            meta.get("tokenizer.chat_template") or _CHATML,
            bos_token=self._piece(self.llm.token_bos()), eos_token=self._piece(self.llm.token_eos()),
        )
        self.lock = PriorityLock()
        log.info("model loaded in %.1fs: context %d tokens, vocabulary %d, %d threads",
                 self.load_seconds, self.n_ctx, self.n_vocab, threads)

    def _piece(self, token: int) -> str:
        return self.llm.detokenize([token], special=True).decode("utf-8", "replace") if token >= 0 else ""

    def tokenize(self, text: str) -> list[int]:
        ids = self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        bos = self.llm.token_bos()
        if len(ids) > 1 and ids[0] == bos and ids[1] == bos:  # the template wrote BOS and so did the tokenizer
            ids = ids[1:]
        return ids

    def detokenize(self, ids: list[int]) -> str:
        return self.llm.detokenize(ids, special=True).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def cached_prefix(self, prompt: list[int]) -> int:
        """How many leading prompt tokens the serving context already holds."""
        n = 0
        for a, b in zip(self.llm.input_ids[: self.llm.n_tokens], prompt):
            if a != b:
                break
            n += 1
        return min(n, len(prompt) - 1)  # the last prompt token is always evaluated again for fresh logits

    def generate(self, prompt: list[int], sampling: Sampling, info: GenInfo) -> Iterator[Step]:
        """Yield sampled tokens until an end-of-generation token, `max_tokens` or a full context.

        The caller holds `self.lock` (user or background). Closing the iterator stops decoding
        at once; the KV cache keeps what was evaluated, so the next request still reuses it.
        """
        llm = self.llm
        info.n_prompt, info.n_cached = len(prompt), self.cached_prefix(prompt)
        if sampling.seed is not None:
            llm.set_seed(sampling.seed)
        else:
            llm.set_seed(int.from_bytes(os.urandom(4), "little"))
        grammar = LlamaGrammar.from_string(sampling.grammar, verbose=False) if sampling.grammar else None
        room = self.n_ctx - len(prompt)
        limit = min(sampling.max_tokens, room)
        temp = max(sampling.temperature, 0.0)
        produced = 0
        info.finish = "stop"
        if limit <= 0:
            info.finish = "length"
            return
        for token in llm.generate(prompt, temp=temp, top_p=sampling.top_p, top_k=0 if temp > 0 else 40,
                                  min_p=0.0, repeat_penalty=1.0, grammar=grammar):
            if self.is_eog(token):
                return
            # logits that produced `token`, shape (n_vocab,); a view into llama.cpp's buffer
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(self.n_vocab,))
            top = float(logits.max())
            logprob = float(logits[token]) - top - math.log(float(np.exp(logits - top).sum()))
            yield Step(token, logprob, llm.detokenize([token], special=True))
            produced += 1
            if produced >= limit:
                info.finish = "length"
                return


_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
