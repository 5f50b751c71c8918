"""A GBNF grammar applied inside clawd's own sampling loop (engine.Engine.generate).

llama.cpp's grammar sampler computes which tokens may come next; here its verdict is read back as
a mask over the logits, so the token is sampled in numpy from the model's distribution
renormalized over the allowed tokens, and that token's logprob is the one it was sampled from.
A grammar can also take over mid-answer: `accept` the tokens already produced, after `allows`
says each fits (llama.cpp aborts the process when asked to accept a token its grammar rejects,
so nothing is accepted unchecked).

Asking the grammar about every token of a 152k vocabulary takes 23 ms inside a JSON string
(Qwen2.5, measured by bench/tools/toolcall.py's model on 2 cores), as long as a whole decode step. So
it is asked about the likeliest 256 tokens first, then 4096, and only then all of them: a tier
answers when the tokens outside it could hold at most MASS_TOL of the allowed mass found in it.
The normalizer, and so each logprob, is then exact to within MASS_TOL (1e-3 nats).
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from .sampling import log_softmax

TIERS = (256, 4096)
MASS_TOL = 1e-3
# llama_token_data {int32 id; float logit; float p}: 12 bytes, the layout llama.cpp reads
_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
assert _TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)


class GrammarError(ValueError):
    """The GBNF does not parse, or leaves no token to sample."""


class GrammarMask:
    def __init__(self, vocab: llama_cpp.llama_vocab_p, n_vocab: int, gbnf: str):
        self._smpl = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
        if not self._smpl:
            raise GrammarError("llama.cpp could not parse the grammar")
        self._all = self._array(n_vocab)  # (V,) every token, its logit written before each apply
        self._tiers = [self._array(k) for k in TIERS if k < n_vocab]  # (K,) the likeliest K tokens of a step
        self._one = self._array(1)  # (1,) one token, to ask whether it fits

    @staticmethod
    def _array(n: int) -> tuple[np.ndarray, llama_cpp.llama_token_data_array]:
        data = np.zeros(n, dtype=_TOKEN_DATA)
        ptr = ctypes.cast(data.ctypes.data, ctypes.POINTER(llama_cpp.llama_token_data))
        return data, llama_cpp.llama_token_data_array(data=ptr, size=n, selected=-1, sorted=False)

    def _apply(self, arr: tuple[np.ndarray, llama_cpp.llama_token_data_array]) -> np.ndarray:
        data, c = arr
        c.size, c.selected, c.sorted = len(data), -1, False
        llama_cpp.llama_sampler_apply(self._smpl, ctypes.byref(c))
        return data["logit"]

    def _allowed(self, arr: tuple[np.ndarray, llama_cpp.llama_token_data_array], ids: np.ndarray) -> np.ndarray:
        """The tokens of `ids` the grammar allows next."""
        data = arr[0]
        data["id"], data["logit"] = ids, 0.0
        return data["id"][np.isfinite(self._apply(arr))]  # llama.cpp may reorder what it is given

    def apply(self, logits: np.ndarray) -> np.ndarray:
        """(V,) float32 logits → a (V,) copy with -inf wherever the grammar forbids the token."""
        lp = log_softmax(logits)  # (V,) float64
        allowed = np.empty(0, dtype=np.int32)
        if self._tiers:  # the likeliest tokens of the widest tier, likeliest first
            widest = len(self._tiers[-1][0])
            part = np.argpartition(logits, -widest)[-widest:]
            order = part[np.argsort(-logits[part])]
        for tier in self._tiers:
            top = order[: len(tier[0])]
            allowed = self._allowed(tier, top)
            inside = float(np.exp(lp[allowed]).sum())  # allowed mass in this tier
            outside = max(0.0, 1.0 - float(np.exp(lp[top]).sum()))  # all mass beyond it, allowed or not
            if allowed.size and outside <= MASS_TOL * inside:
                break
        else:
            allowed = self._allowed(self._all, np.arange(len(logits), dtype=np.int32))
        if not allowed.size:
            raise GrammarError("the grammar allows no token here")
        out = np.full(len(logits), -np.inf, dtype=np.float32)
        out[allowed] = logits[allowed]
        return out

    def allows(self, token: int) -> bool:
        return self._allowed(self._one, np.array([token], dtype=np.int32)).size > 0

    def accept(self, token: int) -> None:
        """Advance the grammar past `token`, which `allows` must have said fits."""
        llama_cpp.llama_sampler_accept(self._smpl, token)

    def take_over(self, tokens: list[int]) -> bool:
        """Accept tokens already produced, one by one, each checked first; False at the first that
        does not fit (the grammar is then of no use for this answer)."""
        for t in tokens:
            if not self.allows(t):
                return False
            self.accept(t)
        return True

    def close(self) -> None:
        if self._smpl:
            llama_cpp.llama_sampler_free(self._smpl)
            self._smpl = None
