"""The judge's llama.cpp context: a second KV cache on the served weights (design §2, §12).

Split from engine.py, which owns the weights and the compute lock this context shares.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

import llama_cpp
import numpy as np
from llama_cpp import _internals as llama_internals  # not public API: pinned version, see tests/test_judge_engine.py

from .compute_lock import PriorityLock
from .sampling import log_softmax, sample

log = logging.getLogger("clawd.background")


class Cancelled(Exception):
    """Background work was told to stop (the daemon is shutting down)."""


class Weights(Protocol):
    """What this context needs of the engine (engine.Engine), named here so that the engine can
    import this module and not the other way round."""

    llm: llama_cpp.Llama
    lock: PriorityLock
    threads: int
    n_vocab: int

    def is_eog(self, token: int) -> bool: ...


class BackgroundContext:
    """A second llama.cpp context on the loaded weights, with its own KV cache (design §2, §12).

    Decoding here never touches the serving context's cached prefix. llama.cpp sets LoRA adapters
    per context and publishing sets them only on the serving context, so this one always runs the
    base weights: the policy cannot drift its own judge.

    Every decode step (one sampled token, or one batch of at most `batch` prompt tokens) takes the
    engine lock as background work and releases it after, so the KV cache stays as it was while a
    user request runs, and the work resumes where it stopped. A prompt batch would make a user wait
    too long (256 tokens: ~1-2 s on 2 CPU cores), so llama.cpp's abort callback stops it as soon
    as a user waits: the user gets the engine within one graph node (measured: at most 20 ms on 2
    busy cores, bench/judge.py), and the aborted batch is decoded again afterwards. (A GPU backend
    does not check the callback, but its batch takes milliseconds.) Small batches instead would be
    slow: on 2 busy cores, 800 prompt tokens took 98 s in batches of 32 and 24 s in batches of 512.
    """

    BATCH = 256

    def __init__(self, engine: Weights, n_ctx: int, batch: int = BATCH):
        self.engine, self.n_ctx, self.batch = engine, n_ctx, batch
        # The serving context's own parameters, so that both compute alike: llama.cpp's defaults
        # differ from llama-cpp-python's (flash attention "auto", i.e. on, against off; YaRN
        # factors), and with them this context's logprobs were 0.1-0.3 nats off the served ones
        # (tests/test_judge_engine.py). Only the sizes and the thread count are its own.
        params = llama_cpp.llama_context_params.from_buffer_copy(engine.llm.context_params)
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = batch  # one ubatch per decode: an abort leaves nothing half-done
        params.n_threads = params.n_threads_batch = engine.threads
        params.no_perf = True
        with engine.lock.background():  # allocating next to a decode in progress is not worth the risk
            self._ctx = llama_internals.LlamaContext(model=engine.llm._model, params=params, verbose=False)
            self._batch = llama_internals.LlamaBatch(n_tokens=batch, embd=0, n_seq_max=1, verbose=False)
        self._cancel: threading.Event | None = None
        # Called by llama.cpp between graph nodes while a prompt batch decodes; kept referenced
        # here so the ctypes trampoline outlives every decode.
        self._abort_cb = llama_cpp.ggml_abort_callback(
            lambda _: engine.lock.should_yield() or (self._cancel is not None and self._cancel.is_set()))
        self._no_abort = llama_cpp.ggml_abort_callback()
        self.n_embd = llama_cpp.llama_model_n_embd(engine.llm._model.model)
        self.tokens: list[int] = []  # what the KV cache holds, position by position
        self.waited_s = 0.0  # time spent waiting for user requests (and other holders) to finish
        self.steps = 0
        self.evaluated = 0  # tokens decoded (prompt and sampled), aborted batches not counted
        self.aborts = 0  # prompt batches given up for a user request
        log.info("background context: %d tokens", n_ctx)

    def close(self) -> None:
        self._batch.close()
        self._ctx.close()

    # -- one decode step under the lock -----------------------------------------------------
    def _decode(self, tokens: list[int], logits_all: bool, cancel: threading.Event | None,
                hidden: bool = False) -> np.ndarray | None:
        """Append `tokens` (at most `batch`) to the KV cache. Returns the logits of the last
        token, shape (n_vocab,), or of every token, shape (len(tokens), n_vocab), or with `hidden`
        the last token's final hidden state (the last layer after its norm, the lm head's input),
        shape (n_embd,); None when a user request (or `cancel`) stopped the decode: nothing was
        appended, try again."""
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        t0 = time.perf_counter()
        with self.engine.lock.background():
            self.waited_s += time.perf_counter() - t0
            self._batch.set_batch(tokens, n_past=len(self.tokens), logits_all=logits_all)
            # Embeddings on makes llama.cpp output every token of the batch (each through the lm
            # head), so only for the one decode that needs them.
            if hidden:
                llama_cpp.llama_set_embeddings(self._ctx.ctx, True)
            try:
                out = self._run(tokens, logits_all, cancel, hidden)
            finally:
                if hidden:
                    llama_cpp.llama_set_embeddings(self._ctx.ctx, False)
            if out is None:
                return None
        self.tokens.extend(tokens)
        self.steps += 1
        self.evaluated += len(tokens)
        return out

    def _run(self, tokens: list[int], logits_all: bool, cancel: threading.Event | None,
             hidden: bool) -> np.ndarray | None:
        """The decode itself, under the lock, the batch set: `_decode`'s result."""
        # Only multi-token decodes can be aborted: one token is short, and the callback costs
        # a GIL round trip per graph node.
        abortable = len(tokens) > 1
        if abortable:
            self._cancel = cancel
            llama_cpp.llama_set_abort_callback(self._ctx.ctx, self._abort_cb, None)
        try:
            rc = llama_cpp.llama_decode(self._ctx.ctx, self._batch.batch)
        finally:
            if abortable:
                llama_cpp.llama_set_abort_callback(self._ctx.ctx, self._no_abort, None)
        if rc == 2:
            # Aborted. The batch is one ubatch, so none of it should remain; make sure.
            self._ctx.kv_cache_seq_rm(-1, len(self.tokens), -1)
            self.aborts += 1
            return None
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc} in the background context")
        # copies: the buffers are overwritten by the next decode
        if hidden:
            return np.ctypeslib.as_array(llama_cpp.llama_get_embeddings_ith(self._ctx.ctx, len(tokens) - 1),
                                         shape=(self.n_embd,)).copy()
        rows = range(len(tokens)) if logits_all else [len(tokens) - 1]
        out = np.stack([np.ctypeslib.as_array(self._ctx.get_logits_ith(i), shape=(self.engine.n_vocab,)).copy()
                        for i in rows])
        return out if logits_all else out[0]

    def _decode_all(self, tokens: list[int], logits_all: bool, cancel: threading.Event | None,
                    hidden: bool = False) -> np.ndarray:
        """`_decode`, again after each abort (a user request ran in between)."""
        while True:
            out = self._decode(tokens, logits_all, cancel, hidden)
            if out is not None:
                return out

    def _truncate(self, n: int) -> None:
        if n < len(self.tokens):
            self._ctx.kv_cache_seq_rm(-1, n, -1)
            del self.tokens[n:]

    def _prefill(self, prompt: list[int], cancel: threading.Event | None, hidden: bool = False) -> np.ndarray:
        """Bring the KV cache to `prompt`, reusing the longest common prefix (the m votes on one
        turn share their prompt), and return the logits after its last token, or with `hidden`
        the final hidden state there (the last token decoded alone, so that only it goes through
        the lm head with embeddings on)."""
        if len(prompt) >= self.n_ctx:
            raise ValueError(f"background prompt of {len(prompt)} tokens does not fit {self.n_ctx}")
        keep = 0
        for a, b in zip(self.tokens, prompt):
            if a != b:
                break
            keep += 1
        self._truncate(min(keep, len(prompt) - 1))  # the last token is evaluated again for fresh logits
        out = None
        end = len(prompt) - 1 if hidden else len(prompt)
        while len(self.tokens) < end:
            n = len(self.tokens)
            out = self._decode_all(prompt[n:min(n + self.batch, end)], False, cancel)
        if hidden:
            out = self._decode_all(prompt[-1:], False, cancel, hidden=True)
        return out  # type: ignore[return-value]

    # -- what the judge uses ----------------------------------------------------------------------
    def generate(self, prompt: list[int], temperature: float, max_tokens: int, seed: int | None = None,
                 cancel: threading.Event | None = None) -> list[int]:
        """Sample up to `max_tokens` tokens after `prompt`, stopping at end-of-generation."""
        rng = np.random.default_rng(seed)
        logits = self._prefill(prompt, cancel)
        out: list[int] = []
        limit = min(max_tokens, self.n_ctx - len(prompt))
        while len(out) < limit:
            token = sample(logits, temperature, rng)
            if self.engine.is_eog(token):
                break
            out.append(token)
            if len(out) < limit:
                logits = self._decode_all([token], False, cancel)
        return out

    def score(self, prompt: list[int], continuations: list[list[int]],
              cancel: threading.Event | None = None) -> list[float]:
        """log P(continuation | prompt) for each continuation: one forward pass over the prompt,
        then the chain rule over each continuation's tokens (a verdict like "-1" may be several)."""
        first = log_softmax(self._prefill(prompt, cancel))
        base = len(self.tokens)
        out = []
        for cont in continuations:
            lp = float(first[cont[0]])
            if len(cont) > 1:
                rows = self._decode_all(cont[:-1], True, cancel)  # rows[i] predicts cont[i + 1]
                lp += sum(float(log_softmax(rows[i])[cont[i + 1]]) for i in range(len(cont) - 1))
                self._truncate(base)
            out.append(lp)
        return out

    def hidden(self, prompt: list[int], cancel: threading.Event | None = None) -> np.ndarray:
        """The final hidden state at the last token of `prompt`, shape (n_embd,): what the model
        knows there, before the lm head turns it into one next-token distribution. The rest of
        the prompt is reused from the KV cache (after `score` on the same prompt: one token)."""
        return self._prefill(prompt, cancel, hidden=True)
