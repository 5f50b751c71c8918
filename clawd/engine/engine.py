"""The loaded GGUF: tokenize, render, generate token by token with each sampled token's logprob.

One `Llama` (model + serving context), plus on demand a background context on the same weights
for the judge (`background.BackgroundContext`). llama-cpp-python objects are not thread-safe, so every
use goes through one compute lock; a user request always gets it before background work
(`PriorityLock`). The serving context keeps its KV cache between requests and each request reuses
the longest common prefix: OpenClaw re-sends a ~12k-token prefix every turn, and only the tokens
after it are evaluated again. With a prompt cache (`prompt_cache.PromptCache`) that prefix may come
from the state of another session or of a side call kept in memory or on disk. The engine evaluates
prompts itself, in the aligned chunks that make a reused prefix compute exactly what a cold run
computes (see prompt_cache.py).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import Llama

from .background import BackgroundContext, apply_lora
from .chat_template import from_llama
from .compute_lock import PriorityLock
from .grammar import GrammarMask
from .prompt_cache import ALIGN, PromptCache, chunks, common_prefix, reusable
from .sampling import log_softmax, sample

log = logging.getLogger("clawd.engine")


@dataclass
class Sampling:
    temperature: float = 0.8
    top_p: float = 0.95
    seed: int | None = None
    max_tokens: int = 2048
    grammar: str | None = None  # GBNF; constrains the whole completion
    # the answer so far (bytes) → a GBNF for the whole answer once a tool call has begun in it,
    # else None; called after each free token until it returns one (tool_calls.CallTrigger)
    lazy: Callable[[bytes], str | None] | None = None
    top_logprobs: int = 0  # the most likely tokens to report at each step (OpenAI's top_logprobs)


@dataclass
class Step:
    token: int
    logprob: float  # log p(token) at temperature 1: the model's distribution, under a grammar renormalized over what it allows
    piece: bytes  # the token's bytes; may hold part of a UTF-8 character
    top: tuple[tuple[int, float], ...] = ()  # the Sampling.top_logprobs likeliest (token, logprob), likeliest first


def top_tokens(row: np.ndarray, k: int) -> tuple[tuple[int, float], ...]:
    """The k likeliest (token, logprob) of a (n_vocab,) logprob row, likeliest first; tokens a
    grammar forbids (-inf) are not alternatives, so under a grammar there may be fewer than k."""
    if k <= 0:
        return ()
    ids = np.argpartition(row, -k)[-k:]
    ids = ids[np.argsort(row[ids])[::-1]]
    return tuple((int(i), float(row[i])) for i in ids if np.isfinite(row[i]))


@dataclass
class GenInfo:
    n_prompt: int = 0
    n_cached: int = 0  # prompt tokens reused from the KV cache (not evaluated again)
    cache: str = "none"  # where they came from: "live" (the context), "memory" or "disk" (a prompt cache entry), "none"
    finish: str = "stop"  # "stop" (end-of-generation token), "length" (limit or full context), "cancelled"
    n_evaluated: int | None = None  # prompt tokens actually evaluated, when cancelled before the end
    eog: Step | None = None  # the end-of-generation token the answer ended on, with its logprob
    grammar_from: int | None = None  # index of the first answer token sampled under a grammar; None: all free


# What makes a KV state: a prompt cache entry is restored only into a context that matches these.
CONTEXT_KEY = ("n_ctx", "n_batch", "n_ubatch", "type_k", "type_v", "flash_attn_type", "rope_scaling_type",
               "rope_freq_base", "rope_freq_scale", "yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast",
               "yarn_beta_slow", "yarn_orig_ctx", "offload_kqv", "op_offload", "swa_full", "kv_unified")


def _file_key(path: Path) -> dict[str, Any]:
    """A weights file as a cache key: path, size and mtime (hashing a 500 MB GGUF per start is not cheap)."""
    st = path.stat()
    return {"path": str(path.resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


class Engine:
    def __init__(self, model_path: Path, n_ctx: int = 0, threads: int = 0, batch: int = 512, gpu_layers: int = -1,
                 cache_mb: int = 0, cache_dir: Path | None = None, cache_disk_mb: int = 0):
        self.model_path = Path(model_path)
        threads = threads or os.cpu_count() or 1
        log.info("loading model %s", self.model_path)
        t0 = time.perf_counter()
        self.llm = Llama(
            model_path=str(self.model_path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
            n_batch=batch, n_ubatch=batch, n_gpu_layers=gpu_layers, verbose=False,
        )
        self.load_seconds = time.perf_counter() - t0
        self.threads = threads
        self._background: BackgroundContext | None = None
        self.n_ctx = self.llm.n_ctx()
        self.n_vocab = self.llm.n_vocab()
        self._vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        meta = self.llm.metadata
        # max_token_bytes: a prompt of more than n_ctx times this many bytes cannot fit, so it is
        # refused without tokenizing it (32 on SmolLM2; 10 MB take 4 s to tokenize here)
        self.template, self.max_token_bytes = from_llama(self.llm)
        self.n_ctx_train = int(meta.get(f"{meta.get('general.architecture', 'llama')}.context_length", self.n_ctx))
        self.lock = PriorityLock()
        self._live = 0  # leading positions of the serving context evaluated as prompt; the last answer follows
        self.cache = PromptCache(cache_mb, cache_dir, cache_disk_mb) if cache_mb and self._cuttable else None
        self._rekey()
        log.info("model loaded in %.1fs: context %d tokens, vocabulary %d, %d threads",
                 self.load_seconds, self.n_ctx, self.n_vocab, threads)

    def tokenize(self, text: str) -> list[int]:
        ids = self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        bos = self.llm.token_bos()
        if len(ids) > 1 and ids[0] == bos and ids[1] == bos:  # the template wrote BOS and so did the tokenizer
            ids = ids[1:]
        return ids

    def detokenize(self, ids: list[int]) -> str:
        return self.llm.detokenize(ids, special=True).decode("utf-8", "replace")

    def piece(self, token: int) -> bytes:
        """One token's bytes (part of a UTF-8 character, for some)."""
        return self.llm.detokenize([token], special=True)

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    @property
    def _cuttable(self) -> bool:
        """A recurrent or hybrid model keeps one state per sequence that cannot be cut at a position: it reuses nothing."""
        return not (llama_cpp.llama_model_is_recurrent(self.llm.model) or llama_cpp.llama_model_is_hybrid(self.llm.model))

    def cached_prefix(self, prompt: list[int]) -> int:
        """How many leading prompt tokens the serving context holds that a request would reuse
        (prompt positions only, in multiples of ALIGN, at least 2 left to evaluate: prompt_cache.reusable)."""
        if not self._cuttable:
            return 0
        live = self.llm.input_ids[: min(self._live, self.llm.n_tokens)]  # a caller may have reset the Llama itself
        return reusable(common_prefix(live, np.asarray(prompt, np.int32)), len(prompt))

    def _reuse(self, prompt: list[int]) -> tuple[int, str]:
        """Bring the serving context to the best cached prefix of `prompt`: how many tokens, from where."""
        if self.cache is None:
            n = self.cached_prefix(prompt)
            return n, "live" if n else "none"
        llm = self.llm
        self._live = min(self._live, llm.n_tokens)
        held, source = self.cache.prepare(llm.ctx, llm.input_ids[: self._live], llm.input_ids[self._live: llm.n_tokens],
                                          np.asarray(prompt, np.int32))
        if held is not None:  # the context was cut to what it kept, or holds a restored entry
            llm.input_ids[: len(held)] = held
            llm.n_tokens = self._live = len(held)
        return self.cached_prefix(prompt), source

    def generate(self, prompt: list[int], sampling: Sampling, info: GenInfo,
                 cancel: threading.Event | None = None) -> Generator[Step, None, None]:
        """Yield sampled tokens until an end-of-generation token, `max_tokens` or a full context.

        The caller holds `self.lock` (user or background). Closing the iterator stops decoding
        at once; the KV cache keeps what was evaluated, so the next request still reuses it.
        `cancel` is also checked between prompt batches: a client that leaves during a long
        prefill (12k tokens of OpenClaw prompt take minutes on a CPU) frees the engine at once.

        Free text is sampled by llama.cpp. Under a grammar (`sampling.grammar` from the start, or
        the one `sampling.lazy` returns once a tool call begins) clawd samples itself from the
        masked logits (`_constrained`).
        """
        llm = self.llm
        info.n_prompt = len(prompt)
        info.n_cached, info.cache = self._reuse(prompt)
        if not self._prefill(prompt, info.n_cached, cancel):
            info.finish = "cancelled"
            info.n_evaluated = self.llm.n_tokens - info.n_cached
            return
        seed = sampling.seed if sampling.seed is not None else int.from_bytes(os.urandom(4), "little")
        llm.set_seed(seed)
        limit = min(sampling.max_tokens, self.n_ctx - len(prompt))
        temp = max(sampling.temperature, 0.0)
        info.finish = "stop"
        if limit <= 0:
            info.finish = "length"
            return
        produced: list[int] = []
        text = b""
        grammar = sampling.grammar
        if grammar is None:
            gen = llm.generate(prompt, temp=temp, top_p=sampling.top_p, top_k=0 if temp > 0 else 40,
                               min_p=0.0, repeat_penalty=1.0)
            try:
                for token in gen:
                    row = log_softmax(self._last_logits())  # (n_vocab,)
                    logprob = float(row[token])
                    if self.is_eog(token):
                        # kept for training (the model must learn when to stop), never shown as text
                        info.eog = Step(token, logprob, b"")
                        return
                    piece = self.piece(token)
                    yield Step(token, logprob, piece, top_tokens(row, sampling.top_logprobs))
                    produced.append(token)
                    if len(produced) >= limit:
                        info.finish = "length"
                        return
                    if sampling.lazy is not None:
                        text += piece
                        grammar = sampling.lazy(text)
                        if grammar is not None:
                            break  # `token` is sampled but not evaluated yet: _constrained evaluates it
            finally:
                gen.close()
            if grammar is None:
                return
        yield from self._constrained(grammar, produced, sampling, seed, limit, info)

    def _last_logits(self) -> np.ndarray:
        """(n_vocab,) float32 logits of the last evaluated position: a view into llama.cpp's buffer."""
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.llm.ctx, -1), shape=(self.n_vocab,))

    def _constrained(self, grammar: str, produced: list[int], sampling: Sampling, seed: int, limit: int,
                     info: GenInfo) -> Generator[Step, None, None]:
        """Continue the answer (`produced` so far, its last token not evaluated yet) under `grammar`.

        The grammar first takes over what was produced; if any of it does not fit (a lazy trigger
        fired on text the grammar spells differently), the answer goes on free. Each token is
        sampled from the model's logits with the grammar's -inf mask, so its logprob is the
        renormalized one it was actually drawn from.
        """
        mask: GrammarMask | None = GrammarMask(self._vocab, self.n_vocab, grammar)
        try:
            if mask is not None and not mask.take_over(produced):
                log.warning("the tool-call grammar does not fit the %d tokens already produced; the answer goes on free",
                            len(produced))
                mask.close()
                mask = None
            else:
                info.grammar_from = len(produced)
            rng = np.random.default_rng(seed)
            temp = max(sampling.temperature, 0.0)
            while True:
                if produced:
                    self.llm.eval(produced[-1:])
                logits = self._last_logits()
                if mask is not None:
                    logits = mask.apply(logits)
                token = sample(logits, temp, rng, sampling.top_p)
                row = log_softmax(logits)  # (n_vocab,), -inf where the grammar forbids
                logprob = float(row[token])
                if mask is not None:
                    mask.accept(token)
                if self.is_eog(token):
                    info.eog = Step(token, logprob, b"")
                    return
                yield Step(token, logprob, self.piece(token), top_tokens(row, sampling.top_logprobs))
                produced.append(token)
                if len(produced) >= limit:
                    info.finish = "length"
                    return
        finally:
            if mask is not None:
                mask.close()

    def _prefill(self, prompt: list[int], cached: int, cancel: threading.Event | None) -> bool:
        """Evaluate the prompt after its cached prefix in aligned chunks (prompt_cache.chunks),
        checking `cancel` in between; `Llama.generate` then finds all of it evaluated and samples
        from the last chunk's logits. False when cancelled (what was evaluated stays cached for a
        retry)."""
        llm = self.llm
        llm._ctx.kv_cache_seq_rm(-1, cached, -1)
        llm.n_tokens = self._live = cached
        for a, b in chunks(cached, len(prompt), llm.n_batch):
            if cancel is not None and cancel.is_set():
                return False
            llm.eval(prompt[a:b])
            self._live = llm.n_tokens
        return True

    def background_context(self, n_ctx: int) -> BackgroundContext:
        """The judge's context on these weights, created on first use (its KV cache costs memory
        only once something judges). Asking for more room than it has makes a larger one."""
        n_ctx = min(n_ctx, self.n_ctx_train or n_ctx)
        if self._background is None or self._background.n_ctx < n_ctx:
            if self._background is not None:
                self._background.close()
            self._background = BackgroundContext(self, n_ctx)
        return self._background

    @contextmanager
    def live_background(self, n_ctx: int) -> Iterator[BackgroundContext]:
        """The background context running the live adapter (the one serving now), for idle-time
        rollouts (GRPO samples the policy being trained); the base weights again after, so the
        judge never reads with the policy. An adapter swap meanwhile hands the context back to the
        base weights at once (set_adapter): the caller compares `lora_version` before and after."""
        bg = self.background_context(n_ctx)
        with self.lock.background():
            bg.set_lora(self._adapter, self.adapter_version)
        try:
            yield bg
        finally:
            with self.lock.background():
                if bg.lora_version is not None:  # (None: it ran the base weights, as served)
                    bg.set_lora(None, None)

    def footprint(self, judge_ctx: int) -> dict[str, Any]:
        """The sizes the trainer's memory plan needs (clawd.train.memory.llama_serving): the model
        file, the share of its layers on the GPU, its attention shapes, and each context's (n_ctx,
        ubatch, allocated yet): this serving context, and the judge's (`judge_ctx`, until made)."""
        meta = self.llm.metadata
        arch = meta.get("general.architecture", "llama")
        layers, heads = int(meta[f"{arch}.block_count"]), int(meta[f"{arch}.attention.head_count"])
        n_gpu = self.llm.model_params.n_gpu_layers  # -1 arrives as INT_MAX: all of them
        gpu = bool(llama_cpp.llama_supports_gpu_offload()) and n_gpu != 0
        bg = self._background
        return {"device": "cuda" if gpu else "cpu", "model_bytes": self.model_path.stat().st_size,
                "offloaded": min(1.0, n_gpu / (layers + 1)) if gpu else 0.0,  # + 1: the output layer
                "layers": layers, "heads": heads, "kv_heads": int(meta.get(f"{arch}.attention.head_count_kv", heads)),
                "head_dim": int(meta.get(f"{arch}.attention.key_length") or int(meta[f"{arch}.embedding_length"]) // heads),
                "vocab": self.n_vocab,
                "contexts": [(self.n_ctx, self.llm.n_batch, True),
                             (bg.n_ctx, bg.batch, True) if bg else (judge_ctx, BackgroundContext.BATCH, False)]}

    # -- LoRA adapter on the serving context (publish; design §8, §12) ---------------------------
    adapter_version: int | None = None  # what the serving context runs: None = base weights
    adapter_path: Path | None = None
    _adapter = None  # llama_adapter_lora_p of the applied adapter

    def set_adapter(self, path: Path | None, version: int | None) -> dict[str, float]:
        """Serve `path` (a GGUF LoRA for this model) from the next request on; None = base weights.

        Taken as a user of the lock, in arrival order: a request generating now finishes on the
        adapter it started with, and the one after this call uses the new one. Only the serving
        context changes; the background context keeps the base weights. The KV cache is dropped
        (its prefix was computed under the old weights) and the replaced adapter freed. Returns
        the time of each part in seconds; raises ValueError (nothing changed) if llama.cpp refuses
        the file."""
        with self.lock.user():
            t0 = time.perf_counter()
            new = None
            if path is not None:
                new = llama_cpp.llama_adapter_lora_init(self.llm.model, str(path).encode())
                if not new:
                    raise ValueError(f"llama.cpp could not load the adapter {path} (made for another base model?)")
            t1 = time.perf_counter()
            apply_lora(self.llm.ctx, new)
            self.llm.reset()  # the next request re-evaluates its whole prompt under the new weights
            self._live = 0
            t2 = time.perf_counter()
            old, self._adapter = self._adapter, new
            if self._background is not None and self._background.lora_version is not None:
                self._background.set_lora(None, None)  # rollouts sampling with `old`: never with a freed adapter
            if old is not None:
                llama_cpp.llama_adapter_lora_free(old)
            self.adapter_version, self.adapter_path = version, Path(path) if path is not None else None
            self._rekey()  # no state computed under the old weights is restored from now on
            t3 = time.perf_counter()
        log.info("serving adapter %s (load %.1f ms, set %.1f ms, free %.1f ms)", version if path else "none (base)",
                 (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3)
        return {"load_s": t1 - t0, "set_s": t2 - t1, "free_s": t3 - t2, "total_s": t3 - t0}

    _previous: Llama | None = None  # the model before the last reload (see reload)

    def reload(self, model_path: Path) -> float:
        """Serve another GGUF with the same tokenizer (a merge of this one) from the next request
        on, dropping none: it loads beside the current one, then the switch queues on the lock as
        a user, so the request generating now finishes on the old weights. The adapter is cleared
        (a merge holds it). The judge's background context is rebuilt on the new weights at its
        next use; one it is in the middle of keeps the old model alive (`_previous`, freed at the
        next reload). Returns the load time in seconds."""
        t0 = time.perf_counter()
        old = self.llm
        new = Llama(model_path=str(model_path), n_ctx=self.n_ctx, n_threads=self.threads, n_threads_batch=self.threads,
                    n_batch=old.n_batch, n_ubatch=old.context_params.n_ubatch,
                    n_gpu_layers=old.model_params.n_gpu_layers, verbose=False)
        load = time.perf_counter() - t0
        with self.lock.user():
            if self._adapter is not None:
                apply_lora(old.ctx, None)
                llama_cpp.llama_adapter_lora_free(self._adapter)
                self._adapter = None
            self.adapter_version, self.adapter_path = None, None
            self._previous, self.llm = old, new
            self._background = None
            self._vocab = llama_cpp.llama_model_get_vocab(new.model)
            self.model_path, self.load_seconds = Path(model_path), load
            self._live = 0
            self._rekey()
        log.info("now serving %s (loaded in %.1fs beside the old model)", model_path, load)
        return load

    # -- prompt cache (prompt_cache.py) ------------------------------------------------------------
    def _rekey(self) -> None:
        """Tell the prompt cache what computes KV states now (after a load, a swap, a reload)."""
        if self.cache is not None:
            cp, mp = self.llm.context_params, self.llm.model_params
            self.cache.set_key({"llama_cpp": llama_cpp.__version__, "align": ALIGN, "model": _file_key(self.model_path),
                                "adapter": _file_key(self.adapter_path) if self.adapter_path else None,
                                "context": {f: getattr(cp, f) for f in CONTEXT_KEY},
                                "weights": {"n_gpu_layers": mp.n_gpu_layers, "use_extra_bufts": mp.use_extra_bufts}})

    def close(self) -> None:
        """At shutdown: keep the serving context's prompt state and write the prompt cache to disk."""
        if self.cache is None:
            return
        with self.lock.user():
            llm = self.llm
            llm.n_tokens = self._live = self.cache.keep_live(llm.ctx, llm.input_ids[: self._live],
                                                             llm.input_ids[self._live: llm.n_tokens])
            self.cache.flush()
