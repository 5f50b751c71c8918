"""The judge's llama.cpp context: a second KV cache on the served weights (design §2, §12).

Split from engine.py, which owns the weights and the compute lock this context shares.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from typing import Protocol

import llama_cpp
import numpy as np
from llama_cpp import _internals as llama_internals  # not public API: pinned version, see tests/test_judge_engine.py
from llama_cpp._ctypes_extensions import load_shared_library

from .compute_lock import PriorityLock
from .sampling import log_softmax, sample

log = logging.getLogger("clawd.background")


class _Tensor(ctypes.Structure):
    """The head of ggml's `struct ggml_tensor` (ggml.h of the pinned llama.cpp), up to its name:
    what the eval callback reads of a graph node."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64)]


GGML_TYPE_F32 = 0


def _ggml_base() -> ctypes.CDLL:
    """ggml's base library, found as llama_cpp finds its own (already in memory with libllama):
    its ggml_backend_tensor_get copies a node's data from whatever device holds it."""
    lib = load_shared_library("ggml-base", llama_cpp.llama_cpp._base_path)
    lib.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    lib.ggml_backend_tensor_get.restype = None
    return lib


def layer_name(layer: int | None) -> str:
    """The graph node of a layer's output (the residual stream after block `layer`, before any
    norm), as llama.cpp's model graphs name it; None: the final hidden state (after the output
    norm, the lm head's input)."""
    return "result_norm" if layer is None else f"l_out-{layer}"


def apply_lora(ctx, adapter) -> None:
    """Set `adapter` (a llama_adapter_lora_p, at scale 1) as the only LoRA of the llama.cpp context
    `ctx`, or none (None): llama_set_adapters_lora replaces the whole set."""
    if adapter is not None:
        llama_cpp.llama_set_adapters_lora(ctx, (llama_cpp.llama_adapter_lora_p_ctypes * 1)(adapter), 1,
                                          (ctypes.c_float * 1)(1.0))
    else:
        llama_cpp.llama_set_adapters_lora(ctx, None, 0, None)


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
    per context and publishing sets them only on the serving context, so this one runs the base
    weights (the policy cannot drift its own judge), except while idle-time rollouts sample with
    the live adapter (`Engine.live_background`), which hand it back to the base weights after.

    Every decode step (one sampled token, or one batch of at most `batch` prompt tokens) takes the
    engine lock as background work and releases it after, so the KV cache stays as it was while a
    user request runs, and the work resumes where it stopped. A prompt batch would make a user wait
    too long (256 tokens: ~1-2 s on 2 CPU cores), so llama.cpp's abort callback stops it as soon
    as a user waits: the user gets the engine within one graph node (measured: at most 20 ms on 2
    busy cores, bench/judge/run.py), and the aborted batch is decoded again afterwards. (A GPU backend
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
        # The layer tap: llama.cpp calls this for every graph node of a decode, asking whether we
        # want its data (ask) and then handing it over. It wants nothing unless `_tap` names nodes.
        self._tap: dict[bytes, np.ndarray | None] = {}
        self._tap_error: BaseException | None = None  # raised in the callback, where ctypes would swallow it
        self.tapped: dict[str, np.ndarray] = {}  # the last tapped decode's rows: name -> (n_embd,)
        self._eval_cb = llama_cpp.ggml_backend_sched_eval_callback(self._on_eval)
        params.cb_eval = self._eval_cb
        self._ggml = _ggml_base()
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
        self.n_layer = llama_cpp.llama_model_n_layer(engine.llm._model.model)
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
                tap: tuple[str, ...] = ()) -> np.ndarray | None:
        """Append `tokens` (at most `batch`) to the KV cache. Returns the logits of the last
        token, shape (n_vocab,), or of every token, shape (len(tokens), n_vocab); with `tap` it
        also leaves the last token's state at each named graph node (`layer_name`) in `tapped`,
        shape (n_embd,) each. None when a user request (or `cancel`) stopped the decode: nothing
        was appended, try again."""
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        t0 = time.perf_counter()
        with self.engine.lock.background():
            self.waited_s += time.perf_counter() - t0
            self._batch.set_batch(tokens, n_past=len(self.tokens), logits_all=logits_all)
            self._tap, self._tap_error = {name.encode(): None for name in tap}, None
            try:
                out = self._run(tokens, logits_all, cancel)
                taps = {k.decode(): v for k, v in self._tap.items()}
            finally:
                self._tap = {}
            if out is None:
                return None
            missing = sorted(k for k, v in taps.items() if v is None)
            if self._tap_error is not None or missing:
                self._ctx.kv_cache_seq_rm(-1, len(self.tokens), -1)  # the decode happened: take it back
                if self._tap_error is not None:
                    raise RuntimeError("reading the model's graph failed") from self._tap_error
                raise RuntimeError(f"the model's graph has no f32 node {missing}: no layer tap for this architecture")
            self.tapped = {k: v[-1] for k, v in taps.items() if v is not None}  # the last token's rows
        self.tokens.extend(tokens)
        self.steps += 1
        self.evaluated += len(tokens)
        return out

    def _on_eval(self, node: int, ask: bool, _user: int | None) -> bool:
        """llama.cpp's eval callback, for every graph node of a decode in this context. Asked
        (`ask`), say whether the node is tapped: True cuts the graph there. Handed a tapped node
        once computed, copy it as (tokens, n_embd) and return True (False would cancel the rest
        of the graph, and the decode would still report success)."""
        if not self._tap:
            return not ask
        try:
            t = _Tensor.from_address(node)
            if ask:
                return t.name in self._tap
            if t.type == GGML_TYPE_F32 and t.nb[1] == 4 * t.ne[0]:  # f32 rows, contiguous: a layer output
                buf = np.empty((t.ne[1], t.ne[0]), np.float32)  # (tokens in the node, n_embd)
                self._ggml.ggml_backend_tensor_get(node, buf.ctypes.data, 0, buf.nbytes)
                self._tap[t.name] = buf
        except BaseException as e:  # ctypes would print it and return False: cancel, silently
            self._tap_error = e
        return True

    def _run(self, tokens: list[int], logits_all: bool, cancel: threading.Event | None) -> np.ndarray | None:
        """The decode itself, under the lock, the batch set: `_decode`'s result."""
        # Only multi-token decodes can be aborted: one token is short. (Every decode here already
        # makes a GIL round trip per graph node for the layer tap's callback, about 800 for Qwen:
        # the judge decodes a few times a turn, its 0.75 s a turn did not move.)
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
        rows = range(len(tokens)) if logits_all else [len(tokens) - 1]
        out = np.stack([np.ctypeslib.as_array(self._ctx.get_logits_ith(i), shape=(self.engine.n_vocab,)).copy()
                        for i in rows])
        return out if logits_all else out[0]

    def _decode_all(self, tokens: list[int], logits_all: bool, cancel: threading.Event | None,
                    tap: tuple[str, ...] = ()) -> np.ndarray:
        """`_decode`, again after each abort (a user request ran in between)."""
        while True:
            out = self._decode(tokens, logits_all, cancel, tap)
            if out is not None:
                return out

    def _truncate(self, n: int) -> None:
        if n < len(self.tokens):
            self._ctx.kv_cache_seq_rm(-1, n, -1)
            del self.tokens[n:]

    def _prefill(self, prompt: list[int], cancel: threading.Event | None, tap: tuple[str, ...] = ()) -> np.ndarray:
        """Bring the KV cache to `prompt`, reusing the longest common prefix (the m votes on one
        turn share their prompt), and return the logits after its last token; with `tap` the
        states of those graph nodes there are left in `tapped` (the last token decoded alone)."""
        if len(prompt) >= self.n_ctx:
            raise ValueError(f"background prompt of {len(prompt)} tokens does not fit {self.n_ctx}")
        keep = 0
        for a, b in zip(self.tokens, prompt):
            if a != b:
                break
            keep += 1
        self._truncate(min(keep, len(prompt) - 1))  # the last token is evaluated again for fresh logits
        out = None
        end = len(prompt) - 1 if tap else len(prompt)
        while len(self.tokens) < end:
            n = len(self.tokens)
            out = self._decode_all(prompt[n:min(n + self.batch, end)], False, cancel)
        if tap:
            out = self._decode_all(prompt[-1:], False, cancel, tap)
        return out  # type: ignore[return-value]

    # -- the weights it runs -------------------------------------------------------------------
    lora_version: int | None = None  # the adapter set on this context (None: the base weights)

    def set_lora(self, adapter, version: int | None) -> None:
        """Run `adapter` (a llama_adapter_lora_p the engine loaded and owns; None: the base weights)
        from the next decode on. The caller holds the engine lock. The KV cache is dropped: its
        prefix was computed under the other weights."""
        apply_lora(self._ctx.ctx, adapter)
        self.lora_version = version
        self._truncate(0)

    # -- what the judge uses ----------------------------------------------------------------------
    def generate(self, prompt: list[int], temperature: float, max_tokens: int, seed: int | None = None,
                 cancel: threading.Event | None = None, logprobs: list[float] | None = None) -> list[int]:
        """Sample up to `max_tokens` tokens after `prompt`; with `logprobs`, append each sampled
        token's log p at T = 1 to it (as the engine records them). An answer that ends keeps its
        end-of-generation token last, as a served turn's completion does: training on it is what
        teaches the model when to stop."""
        rng = np.random.default_rng(seed)
        logits = self._prefill(prompt, cancel)
        out: list[int] = []
        limit = min(max_tokens, self.n_ctx - len(prompt))
        while len(out) < limit:
            token = sample(logits, temperature, rng)
            out.append(token)
            if logprobs is not None:
                logprobs.append(float(log_softmax(logits)[token]))
            if self.engine.is_eog(token):
                break
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

    def hidden(self, prompt: list[int], layers: tuple[int | None, ...] = (None,),
               cancel: threading.Event | None = None) -> dict[int | None, np.ndarray]:
        """The model's state at the last token of `prompt` after each of `layers` (an index: that
        block's output, the residual stream; None: the final hidden state, after the output norm),
        shape (n_embd,) each: what the model knows there, before the lm head turns it into one
        next-token distribution. Read from the decode itself through llama.cpp's eval callback.
        The rest of the prompt is reused from the KV cache (after `score` on the same prompt: one token)."""
        for layer in layers:
            if layer is not None and not 0 <= layer < self.n_layer - 1:
                # the last block's output keeps only the rows that get logits: use None for it
                raise ValueError(f"layer {layer} is not a tappable block of this {self.n_layer}-layer model")
        self._prefill(prompt, cancel, tuple(layer_name(x) for x in layers))
        return {x: self.tapped[layer_name(x)] for x in layers}
