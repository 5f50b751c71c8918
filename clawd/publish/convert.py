"""peft LoRA → GGUF LoRA adapter that llama.cpp loads on the served base, written with the PyPI
`gguf` package (llama.cpp's own converter needs its vendored gguf-py; design §12).

What llama.cpp expects (src/llama-adapter.cpp, convert_lora_to_gguf.py):
- metadata: general.architecture = the base's, general.type = "adapter", adapter.type = "lora",
  adapter.lora.alpha (float32). At run time the delta is scale · alpha/r · B(A x), r = B's ne[0].
- tensors: blk.N.{attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down}.weight.lora_{a,b}.
  A base weight W is (out, in) as numpy (ggml ne = [in, out]); lora_a is peft's lora_A.weight
  as is, (r, in); lora_b is peft's lora_B.weight as is, (out, r). No transpose.
- llama architecture only: the GGUF stores q and k with the rows of each head interleaved for
  llama.cpp's rotary embedding (HF's rotate_half pairs dim i with i + d/2; GGUF pairs 2i, 2i+1).
  transformers undoes that permutation when it loads the GGUF, so a peft adapter trained on it is
  in HF row order. The delta B·A must get the same row permutation as W; permuting rows of B is
  enough: P(B·A) = (P·B)·A. Qwen2, Gemma and the like use the NeoX layout: nothing to permute.

Needs numpy and safetensors only (no torch): it runs in the daemon.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

log = logging.getLogger("clawd.publish")

# HF module name → GGUF tensor name (per block)
MODULES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
# architectures whose GGUF q/k rows are permuted (convert_hf_to_gguf's LlamaModel); the others
# listed convert with names alone. Anything else is refused rather than converted wrongly.
PERMUTED_QK = {"llama"}
UNPERMUTED = {"qwen2", "qwen3", "gemma", "gemma2", "gemma3", "mistral3", "phi3", "olmo2", "granite"}

_NAME = re.compile(r"(?:^|\.)layers\.(\d+)\.(self_attn\.[qkvo]_proj|mlp\.(?:gate|up|down)_proj)\.lora_([AB])\.weight$")


class ConvertError(ValueError):
    pass


@dataclass
class BaseInfo:
    """What conversion needs to know of the served GGUF (read by llama.cpp from its header)."""

    arch: str
    n_head: int
    n_head_kv: int

    @classmethod
    def of(cls, model_path: Path) -> BaseInfo:
        from llama_cpp import Llama

        meta = Llama(str(model_path), vocab_only=True, verbose=False).metadata  # header only: fast
        arch = meta["general.architecture"]
        n_head = int(meta[f"{arch}.attention.head_count"])
        return cls(arch, n_head, int(meta.get(f"{arch}.attention.head_count_kv", n_head)))


def permute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF row order → GGUF (llama) row order for q or k: within each head of d rows, rows
    [0..d/2) and [d/2..d) are interleaved. w: (n_head·d, k) → same shape."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def load_peft(adapter_dir: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """adapter_config.json and the adapter's tensors as float32 numpy arrays."""
    adapter_dir = Path(adapter_dir)
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    path = adapter_dir / "adapter_model.safetensors"
    if not path.is_file():
        raise ConvertError(f"{path} not found (save the adapter with safe_serialization=True)")
    try:
        from safetensors.numpy import load_file

        tensors = load_file(str(path))
    except (TypeError, ValueError):  # bf16 has no numpy dtype: go through torch
        from safetensors.torch import load_file as load_torch

        tensors = {k: v.float().numpy() for k, v in load_torch(str(path)).items()}
    return cfg, {k: v.astype(np.float32) for k, v in tensors.items()}


def effective_alpha(cfg: dict) -> float:
    """llama.cpp scales by alpha/r. peft's rsLoRA scales by alpha/sqrt(r): write the alpha that
    gives the same scale."""
    r, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    if cfg.get("rank_pattern") or cfg.get("alpha_pattern"):
        raise ConvertError("per-module rank/alpha patterns are not supported")
    return alpha * math.sqrt(r) if cfg.get("use_rslora") else alpha


def convert_adapter(adapter_dir: Path, base: BaseInfo, out: Path, dtype: str = "f32") -> dict:
    """Write `out` (atomically: a temp file renamed into place). Returns a summary for meta.

    f32 by default: with f16 LoRA tensors llama.cpp also rounds the activations that meet them
    to f16, which on the bundled model tripled the disagreement with peft (KL 0.009 → 0.03);
    the price is twice the file (20 MB for the 135M model at r=16) and a few ms more per swap."""
    cfg, tensors = load_peft(adapter_dir)
    if cfg.get("use_dora"):
        raise ConvertError("DoRA adapters cannot be converted to a llama.cpp LoRA")
    if cfg.get("modules_to_save"):
        raise ConvertError(f"modules_to_save {cfg['modules_to_save']} are full weights, not LoRA: not supported")
    if base.arch not in PERMUTED_QK | UNPERMUTED:
        raise ConvertError(f"architecture {base.arch!r} is not known to convert correctly; known: "
                           f"{sorted(PERMUTED_QK | UNPERMUTED)}")
    pairs: dict[tuple[int, str], dict[str, np.ndarray]] = {}
    for name, t in tensors.items():
        m = _NAME.search(name)
        if m is None:
            raise ConvertError(f"unexpected tensor {name!r}: only {sorted(MODULES)} LoRA weights are supported")
        pairs.setdefault((int(m.group(1)), m.group(2)), {})[m.group(3)] = t
    np_dtype = {"f16": np.float16, "f32": np.float32}[dtype]
    alpha = effective_alpha(cfg)
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    try:  # a disk that fills mid-write leaves no partial file behind
        w = gguf.GGUFWriter(str(tmp), base.arch)
        w.add_type(gguf.GGUFType.ADAPTER)  # general.type = "adapter"
        w.add_string(gguf.Keys.Adapter.TYPE, "lora")
        w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
        for (layer, module), ab in sorted(pairs.items()):
            if set(ab) != {"A", "B"}:
                raise ConvertError(f"layer {layer} {module}: lora_A or lora_B missing")
            a, b = ab["A"], ab["B"]  # a: (r, in), b: (out, r)
            if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
                raise ConvertError(f"layer {layer} {module}: shapes {a.shape} and {b.shape} do not make a LoRA pair")
            if base.arch in PERMUTED_QK and module == "self_attn.q_proj":
                b = permute_rows(b, base.n_head)
            elif base.arch in PERMUTED_QK and module == "self_attn.k_proj":
                b = permute_rows(b, base.n_head_kv)
            stem = f"blk.{layer}.{MODULES[module]}.weight"
            w.add_tensor(stem + ".lora_a", np.ascontiguousarray(a, dtype=np_dtype))
            w.add_tensor(stem + ".lora_b", np.ascontiguousarray(b, dtype=np_dtype))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):  # numpy's short write carries no errno: report the space left
            raise ConvertError(f"cannot write the adapter {out}: {e} ({shutil.disk_usage(out.parent).free // 2**20} MiB "
                               "free on that disk); nothing was written") from e
        raise
    os.replace(tmp, out)
    summary: dict[str, Any] = {"arch": base.arch, "r": int(cfg["r"]), "alpha": alpha, "modules": sorted({m for _, m in pairs}),
               "layers": len({n for n, _ in pairs}), "dtype": dtype, "bytes": out.stat().st_size}
    log.info("converted %s → %s (%d tensor pairs, %.1f MB)", adapter_dir, out, len(pairs), summary["bytes"] / 1e6)
    return summary
