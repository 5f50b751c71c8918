"""Prompt cache: the KV states of recent prompts, so that a request evaluates only what none of them shares (issue 15).

The serving context holds one sequence, the live prompt. A request that leaves it (another
session, a side call: one that neither extends the live prompt nor carries its answer) first
copies the live state out as an entry. Each request then starts from the longest common prefix
among the live context and the entries, restoring an entry into the context when it beats the
live one, and evaluates only the rest. OpenClaw sessions share their system prompt and tools
(~12k tokens), so a new session's first turn evaluates only what differs.

Which copy. Measured by `bench/serving/cache.py` on the bundled SmolLM2-135M, a 4,096-token prefix, 2
busy cores (bench/results/cache.json): `Llama.save_state`/`load_state` keep 186 MiB, the KV and a
copy of the n_batch × n_vocab scores (96 MiB here; 297 MiB with Qwen2.5's vocabulary), in
292/144 ms (save/load). `llama_state_get_data` of the whole context is 90 MiB in 31/24 ms, and
`llama_state_seq_get_data` of one sequence 90 MiB (22.5 KiB a token) in 30/22 ms. The sequence
calls are used: they cost what the whole-context ones cost, restore into one sequence without
touching the rest of the context, and copy exactly the positions kept (the context is cut to
them first). llama.cpp's own server keeps its RAM prompt cache the same way. (A second sequence in
the context's own KV cache would need no copy, but would hold every kept prompt inside n_ctx
cells, allocated up front; it was not measured.)

What is reused is exactly what a cold run computes. llama.cpp's CPU kernels compute a token
differently when it is alone in a batch, or in a partial block of rows (Qwen2.5's repacked Q4_K
weights go by blocks of 4): a prompt evaluated with its prefix from a cache came out up to 0.3
logits away from the same prompt evaluated cold. Aligned, it is bitwise the same (measured on
both models here). So prompt chunks start at multiples of `ALIGN` and no chunk is a lone token
(`chunks`), only positions evaluated as prompt are reused, never the answer's (those were decoded
one at a time), and a prefix is reused in multiples of `ALIGN` (`reusable`). The price: a turn
re-evaluates the previous answer and up to 31 tokens of its prefix.

Entries are keyed by what computed them (`key_info`: the model file by path, size and mtime, the
adapter likewise, the context parameters, llama-cpp-python's version). An adapter swap or a model
reload changes the key, and entries under another key are dropped at the next request, in memory
and on disk, with a log line: none is ever restored under weights it was not computed with.

Memory: least recently used entries go first past `budget`; with a directory, an entry pushed out
of memory is written to disk, and at shutdown every entry in memory and the live state are.
The disk keeps the most recently used under its own cap. A file holds a header (its key, token
ids, sizes, a CRC-32 of all of it), written to a temporary name and renamed; the headers are read
at start, a state only when a request needs it, and one that does not match its header is
deleted, never loaded into the context.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

log = logging.getLogger("clawd.cache")

ALIGN = 32  # a multiple of the row blocks of llama.cpp's CPU kernels (4 for repacked Q4_K; 8, 16 elsewhere)
MIN_KEPT = 128  # shorter prompts are evaluated again in about a second on 2 CPU cores: not worth memory and disk
WINDOW = 8  # answer tokens looked for in a request to tell that it continues that answer's conversation
MAGIC = b"CLAWDKV1"
_HEAD = struct.Struct("<8sII")  # magic, header length, CRC-32 of header + tokens + state
MB = 2**20
_u8p = ctypes.POINTER(ctypes.c_uint8)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def reusable(common: int, n_prompt: int) -> int:
    """How many leading positions of a state sharing `common` tokens with an `n_prompt`-token
    prompt can be reused exactly: a multiple of ALIGN, leaving at least 2 tokens to evaluate (the
    last chunk must not be a lone token, and the last token gives the logits)."""
    return max(0, min(common, n_prompt - 2)) // ALIGN * ALIGN


def chunks(start: int, end: int, n_batch: int) -> list[tuple[int, int]]:
    """Prompt batches from `start` (a multiple of ALIGN) to `end`, each starting at a multiple of
    ALIGN, none of one token (unless the prompt is one token)."""
    step = max(ALIGN, n_batch // ALIGN * ALIGN)
    bounds = [*range(start, end, step), end]
    if len(bounds) > 2 and bounds[-1] - bounds[-2] == 1:
        bounds[-2] -= ALIGN
        if bounds[-2] <= bounds[-3]:
            del bounds[-2]
    return list(zip(bounds, bounds[1:]))


def carries(prompt: np.ndarray, start: int, answer: np.ndarray) -> bool:
    """Whether `prompt[start:]` holds tokens from the middle of `answer`: the client sent that
    answer back, so the request continues its conversation. (The answer's edges may tokenize
    differently once re-rendered, and OpenClaw drops a context block before it.)"""
    if len(answer) < 4:
        return False
    w = min(WINDOW, len(answer) - 2)
    mid = (len(answer) - w) // 2
    window, rest = answer[mid:mid + w], prompt[start:]
    if len(rest) < w:
        return False
    return bool((np.lib.stride_tricks.sliding_window_view(rest, w) == window).all(axis=1).any())


@dataclass(eq=False)
class Entry:
    tokens: np.ndarray  # int32: the prompt positions the state holds (a multiple of ALIGN)
    answer: np.ndarray  # int32: what was generated after that prompt (recognizes the conversation's next request)
    info: dict[str, Any]  # what computed it (PromptCache.key_info)
    key: str
    nbytes: int
    used: float  # last use, wall clock (a file's mtime across restarts)
    data: np.ndarray | None = None  # uint8: llama_state_seq_get_data, when in memory
    path: Path | None = None  # its file, when on disk

    def continued_by(self, tokens: np.ndarray) -> bool:
        """A newer prompt of the same conversation: it makes this entry worthless."""
        n = common_prefix(self.tokens, tokens)
        return n == len(self.tokens) or carries(tokens, n, self.answer)


class PromptCache:
    def __init__(self, budget_mb: int, directory: Path | None = None, disk_mb: int = 0):
        self.budget, self.disk_budget = budget_mb * MB, disk_mb * MB if directory else 0
        self.dir = directory
        self.key = ""
        self.key_info: dict[str, Any] = {}
        self.entries: list[Entry] = []
        self.hits = {"live": 0, "memory": 0, "disk": 0}
        self.misses = 0
        if self.dir is not None and self.disk_budget:
            self.dir.mkdir(parents=True, exist_ok=True)
            os.chmod(self.dir, 0o700)  # prompts hold the user's conversations
            self._index()

    def set_key(self, info: dict[str, Any]) -> None:
        """What computes states from now on; entries under another key are dropped at the next request."""
        self.key_info = info
        self.key = hashlib.sha256(json.dumps(info, sort_keys=True).encode()).hexdigest()[:16]

    # -- before each request --------------------------------------------------------------------
    def prepare(self, ctx, live: np.ndarray, answer: np.ndarray, prompt: np.ndarray) -> tuple[np.ndarray | None, str]:
        """`ctx` holds `live` (prompt positions) then `answer` (decoded after them). Keep the live
        state if `prompt` leaves it, then restore the entry that shares most with `prompt` if that
        beats the live context. Returns what the context holds now (None: unchanged) and where the
        reused prefix comes from: 'live', 'memory', 'disk' or 'none'."""
        self._drop_stale()
        kept = len(live) // ALIGN * ALIGN
        common = common_prefix(live, prompt)
        n_live = reusable(common, len(prompt))
        # the longest; on a tie, in memory before on disk, then the most recent
        ranked = [e for n, _, _, e in sorted(((reusable(common_prefix(e.tokens, prompt), len(prompt)), e.data is not None,
                                               e.used, e) for e in self.entries), key=lambda x: x[:3], reverse=True)
                  if n > n_live]
        if ranked:
            ranked[0].used = time.time()  # keeping the live state must not push out the one this request needs
        held = None
        if kept >= MIN_KEPT and common < kept and not carries(prompt, common, answer):
            self._store(ctx, live[:kept], answer)
            held = live[:kept]
        for e in ranked:
            if e not in self.entries:  # the live state just kept continues it
                continue
            in_memory = e.data is not None
            if self._restore(ctx, e):
                self.hits["memory" if in_memory else "disk"] += 1
                e.used = time.time()
                if e.continued_by(prompt):  # the live context carries this conversation on now
                    self._forget_memory(e)
                return e.tokens, "memory" if in_memory else "disk"
            held, n_live = np.zeros(0, np.int32), 0  # a failed restore leaves the context empty
        if n_live:
            self.hits["live"] += 1
            return held, "live"
        self.misses += 1
        return held, "none"

    def keep_live(self, ctx, live: np.ndarray, answer: np.ndarray) -> int:
        """Store the live state (at shutdown, before `flush`); returns how many positions the context holds now."""
        self._drop_stale()
        kept = len(live) // ALIGN * ALIGN
        if kept >= MIN_KEPT and not any(common_prefix(e.tokens, live) >= kept for e in self.entries):
            self._store(ctx, live[:kept], answer)
        return kept

    def _store(self, ctx, tokens: np.ndarray, answer: np.ndarray) -> None:
        """Copy the context's state, cut to `tokens`, out as an entry; an older entry of the same
        conversation goes (memory and disk)."""
        mem = llama_cpp.llama_get_memory(ctx)
        llama_cpp.llama_memory_seq_rm(mem, -1, len(tokens), -1)
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        if size > self.budget:
            log.info("prompt state of %d tokens (%.0f MiB) exceeds the cache budget (%.0f MiB); not kept",
                     len(tokens), size / MB, self.budget / MB)
            return
        data = np.empty(size, np.uint8)
        if llama_cpp.llama_state_seq_get_data(ctx, data.ctypes.data_as(_u8p), size, 0) != size:
            log.warning("could not copy the prompt state of %d tokens; not kept", len(tokens))
            return
        for e in [e for e in self.entries if e.continued_by(tokens)]:
            self._remove(e)
        self.entries.append(Entry(tokens.copy(), answer.copy(), self.key_info, self.key, size, time.time(), data=data))
        log.debug("kept a prompt state of %d tokens (%.1f MiB)", len(tokens), size / MB)
        self._fit()

    def _restore(self, ctx, e: Entry) -> bool:
        data = e.data if e.data is not None else self._load(e)
        if data is None:
            return False
        mem = llama_cpp.llama_get_memory(ctx)
        llama_cpp.llama_memory_seq_rm(mem, -1, -1, -1)
        if llama_cpp.llama_state_seq_set_data(ctx, data.ctypes.data_as(_u8p), e.nbytes, 0) != e.nbytes:
            log.warning("llama.cpp refused a cached prompt state of %d tokens; dropped", len(e.tokens))
            llama_cpp.llama_memory_seq_rm(mem, -1, -1, -1)
            self._remove(e)
            return False
        if e.data is None:
            e.data = data
            self._fit(keep=e)
        return True

    # -- memory and disk ----------------------------------------------------------------------
    def _fit(self, keep: Entry | None = None) -> None:
        """Past the memory budget, the least recently used leave memory (to disk, when there is one)."""
        for e in sorted(self.entries, key=lambda x: x.used):
            if sum(x.nbytes for x in self.entries if x.data is not None) <= self.budget:
                return
            if e.data is None or e is keep:
                continue
            if e.path is None and self._worth_writing(e):
                self._write(e)
            self._forget_memory(e)

    def _forget_memory(self, e: Entry) -> None:
        e.data = None
        if e.path is None:
            self.entries.remove(e)

    def _remove(self, e: Entry) -> None:
        if e.path is not None:
            e.path.unlink(missing_ok=True)
        if e in self.entries:
            self.entries.remove(e)

    def _drop_stale(self) -> None:
        stale = [e for e in self.entries if e.key != self.key]
        if stale:
            changed = sorted({k for e in stale for k in set(e.info) | set(self.key_info) if e.info.get(k) != self.key_info.get(k)})
            log.info("dropped %d cached prompt state(s) computed under another %s", len(stale), " / ".join(changed))
            for e in stale:
                self._remove(e)

    def flush(self) -> None:
        """Write the entries only in memory to disk, most recently used first, as many as the cap keeps."""
        self._drop_stale()
        written = [e for e in sorted(self.entries, key=lambda x: -x.used)
                   if e.path is None and e.data is not None and self._worth_writing(e) and self._write(e)]
        if written:
            log.info("prompt cache: wrote %d state(s), %.0f MiB, to %s", len(written), sum(e.nbytes for e in written) / MB, self.dir)

    def _worth_writing(self, e: Entry) -> bool:
        """Whether `e` would stay on disk: the files used more recently leave it room under the cap."""
        newer = sum(x.nbytes for x in self.entries if x.path is not None and x.used >= e.used)
        return newer + e.nbytes <= self.disk_budget

    def _write(self, e: Entry) -> bool:
        assert self.dir is not None and e.data is not None
        header = json.dumps({"key": e.key, "info": e.info, "n_tokens": len(e.tokens), "n_answer": len(e.answer),
                             "nbytes": e.nbytes}).encode()
        tokens, answer = e.tokens.astype("<i4").tobytes(), e.answer.astype("<i4").tobytes()
        crc = zlib.crc32(e.data.data, zlib.crc32(answer, zlib.crc32(tokens, zlib.crc32(header))))
        path = self.dir / f"{e.key}-{hashlib.sha256(tokens).hexdigest()[:16]}.kv"
        tmp = path.with_suffix(".tmp")
        try:
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:  # 0600: it holds conversations
                f.write(_HEAD.pack(MAGIC, len(header), crc))
                f.write(header)
                f.write(tokens)
                f.write(answer)
                f.write(e.data.data)
            os.replace(tmp, path)
        except OSError as err:  # a full disk costs the cache, never a request
            log.warning("could not write a prompt state to %s: %s", path, err)
            tmp.unlink(missing_ok=True)
            return False
        e.path = path
        os.utime(path, (e.used, e.used))
        self._fit_disk()
        return True

    def _fit_disk(self) -> None:
        total = 0
        for e in sorted((x for x in self.entries if x.path is not None), key=lambda x: -x.used):
            total += e.nbytes
            if total > self.disk_budget:
                assert e.path is not None
                e.path.unlink(missing_ok=True)
                e.path = None
                if e.data is None:
                    self.entries.remove(e)

    def _index(self) -> None:
        """Read every file's header (not its state), deleting what cannot be one of ours."""
        assert self.dir is not None
        for path in sorted(self.dir.glob("*.kv")):
            try:
                with open(path, "rb") as f:
                    magic, n_header, _ = _HEAD.unpack(f.read(_HEAD.size))
                    h = json.loads(f.read(n_header)) if magic == MAGIC else None
                    if h is None or path.stat().st_size != _HEAD.size + n_header + 4 * (h["n_tokens"] + h["n_answer"]) + h["nbytes"]:
                        raise ValueError("not a complete prompt state file")
                    tokens = np.frombuffer(f.read(4 * h["n_tokens"]), "<i4").astype(np.int32)
                    answer = np.frombuffer(f.read(4 * h["n_answer"]), "<i4").astype(np.int32)
            except (OSError, ValueError, KeyError, TypeError, struct.error) as err:
                log.warning("dropped the cached prompt state %s: %s", path.name, err)
                path.unlink(missing_ok=True)
                continue
            self.entries.append(Entry(tokens, answer, h["info"], h["key"], h["nbytes"], path.stat().st_mtime, path=path))
        for tmp in self.dir.glob("*.tmp"):  # a write cut off by a crash
            tmp.unlink(missing_ok=True)
        if self.entries:
            log.info("prompt cache: %d state(s) on disk (%.0f MiB)", len(self.entries), sum(e.nbytes for e in self.entries) / MB)

    def _load(self, e: Entry) -> np.ndarray | None:
        """The state from `e`'s file, checked against its header and CRC; None (and the file
        deleted) when it does not match."""
        assert e.path is not None
        try:
            with open(e.path, "rb") as f:
                magic, n_header, crc = _HEAD.unpack(f.read(_HEAD.size))
                header = f.read(n_header)
                h = json.loads(header)
                tokens, answer = f.read(4 * h["n_tokens"]), f.read(4 * h["n_answer"])
                data = np.empty(e.nbytes, np.uint8)
                got = f.readinto(data.data)
            ok = (magic == MAGIC and h["key"] == self.key and h["nbytes"] == e.nbytes == got
                  and np.array_equal(np.frombuffer(tokens, "<i4"), e.tokens)
                  and zlib.crc32(data.data, zlib.crc32(answer, zlib.crc32(tokens, zlib.crc32(header)))) == crc)
        except (OSError, ValueError, KeyError, struct.error) as err:
            ok, data = False, None
            log.debug("reading %s: %s", e.path, err)
        if not ok:
            log.warning("dropped the cached prompt state %s: it does not match its header (corrupt or changed)", e.path.name)
            self._remove(e)
            return None
        os.utime(e.path)
        return data

    def status(self) -> dict[str, Any]:
        entries = list(self.entries)  # read from the HTTP thread while a request may change the list
        mem = [e for e in entries if e.data is not None]
        disk = [e for e in entries if e.path is not None]
        return {"entries": len(mem), "bytes": sum(e.nbytes for e in mem), "tokens": sum(len(e.tokens) for e in mem),
                "budget_bytes": self.budget,
                "disk_entries": len(disk), "disk_bytes": sum(e.nbytes for e in disk), "disk_budget_bytes": self.disk_budget,
                "hits": dict(self.hits), "misses": self.misses}
