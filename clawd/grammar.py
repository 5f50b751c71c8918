"""A GBNF grammar applied inside clawd's own sampling loop (engine.Engine.generate).

llama.cpp's grammar sampler computes which tokens may come next; here its verdict is read back as
a mask over the logits, so the token is sampled in numpy from the model's distribution
renormalized over the allowed tokens, and that token's logprob is the one it was sampled from.
A grammar can also take over mid-answer: `accept` the tokens already produced, after `allows`
says each fits (llama.cpp aborts the process when asked to accept a token its grammar rejects,
so nothing is accepted unchecked).
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

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

    def apply(self, logits: np.ndarray) -> np.ndarray:
        """(V,) float32 logits → a (V,) copy with -inf wherever the grammar forbids the token."""
        data = self._all[0]
        data["id"] = np.arange(len(data), dtype=np.int32)  # llama.cpp may reorder what it is given
        data["logit"] = logits
        masked = self._apply(self._all)
        out = np.full(len(data), -np.inf, dtype=np.float32)
        out[data["id"]] = masked
        if not np.isfinite(out).any():
            raise GrammarError("the grammar allows no token here")
        return out

    def allows(self, token: int) -> bool:
        data = self._one[0]
        data["id"], data["logit"] = token, 0.0
        return bool(np.isfinite(self._apply(self._one)[0]))

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
