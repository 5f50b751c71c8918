"""Fold LoRA adapters into the base: a new GGUF without the adapter's per-token cost (design §8).

W' = W + Σ (alpha_i / r_i) · B_i · A_i for every adapted projection, on the best weights at hand:
the original base GGUF dequantized (not a previous merge, whose quantization error would pile
up), with every adapter of the chain since it — each `adapters/NNNN` replaces its parent (the
trainer continues its parent's LoRA), so a chain is the live adapter plus the ones already
merged. This is what peft's merge_and_unload computes, done here on the GGUF's own tensors with
numpy: the tokenizer, chat template and every other key are copied as they are, so the merged
file tokenizes exactly like the base.

Written as f16 (or f32) first, then `llama_model_quantize` to the base's file type, but never
below Q8_0: requantizing to 4 bits rounds most of a LoRA delta away. Measured on the bundled
Q4_1 model with a strong adapter, KL(base + adapter ‖ merged) was 0.48 and 0.23 at Q4_1 (the
adapter itself moved it by 2.8 and 0.65) against 0.013 and 0.011 at Q8_0, for 138 MB instead of
93 MB.
"""

from __future__ import annotations

import ctypes
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np

from .convert import (
    _NAME,
    MODULES,
    PERMUTED_QK,
    BaseInfo,
    effective_alpha,
    load_peft,
    permute_rows,
)

log = logging.getLogger("clawd.publish")

Progress = Callable[[str, float], None]  # (stage, fraction done)
# base file types a merge keeps; anything coarser (Q2…Q6, IQ*) becomes Q8_0
KEEP_FTYPES = {int(t) for t in (gguf.LlamaFileType.ALL_F32, gguf.LlamaFileType.MOSTLY_F16,
                                gguf.LlamaFileType.MOSTLY_BF16, gguf.LlamaFileType.MOSTLY_Q8_0)}


def deltas(adapter_dirs: list[Path], base: BaseInfo) -> dict[str, np.ndarray]:
    """GGUF tensor name → summed delta, shape (out, in), in the GGUF's row order."""
    out: dict[str, np.ndarray] = {}
    for d in adapter_dirs:
        cfg, tensors = load_peft(d)
        scale = effective_alpha(cfg) / int(cfg["r"])
        pairs: dict[tuple[int, str], dict[str, np.ndarray]] = {}
        for name, t in tensors.items():
            m = _NAME.search(name)
            if m:
                pairs.setdefault((int(m.group(1)), m.group(2)), {})[m.group(3)] = t
        for (layer, module), ab in pairs.items():
            b = ab["B"]  # (out, r)
            if base.arch in PERMUTED_QK and module in ("self_attn.q_proj", "self_attn.k_proj"):
                b = permute_rows(b, base.n_head if module.endswith("q_proj") else base.n_head_kv)
            key = f"blk.{layer}.{MODULES[module]}.weight"
            delta = scale * (b.astype(np.float32) @ ab["A"].astype(np.float32))  # (out, r) @ (r, in)
            out[key] = out[key] + delta if key in out else delta
    return out


def write_merged(base_path: Path, adapter_dirs: list[Path], out: Path, dtype: str = "f16",
                 progress: Progress | None = None) -> dict:
    """Base + adapters → an unquantized GGUF at `out` (f16 or f32; 1-D tensors stay f32)."""
    progress = progress or (lambda stage, f: None)
    reader = gguf.GGUFReader(str(base_path))
    arch = reader.fields["general.architecture"].contents()
    base = BaseInfo(arch, int(reader.fields[f"{arch}.attention.head_count"].contents()),
                    int(reader.fields.get(f"{arch}.attention.head_count_kv", reader.fields[f"{arch}.attention.head_count"]).contents()))
    add = deltas(adapter_dirs, base)
    np_type, ftype = (np.float16, gguf.LlamaFileType.MOSTLY_F16) if dtype == "f16" else (np.float32, gguf.LlamaFileType.ALL_F32)
    tmp = out.with_name(out.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), arch)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue  # the writer adds these itself
        if field.name == "general.file_type":
            w.add_file_type(ftype)
            continue
        vtype = field.types[0]
        w.add_key_value(field.name, field.contents(), vtype, sub_type=field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None)

    def converted(t) -> np.ndarray:
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            a = np.asarray(t.data, dtype=np.float32)
        else:
            a = gguf.quants.dequantize(t.data, t.tensor_type)  # (out, in) float32
        if t.name in add:
            a = a + add[t.name]
        return a if a.ndim == 1 else a.astype(np_type)

    # header first, then one tensor at a time: the whole model is never in memory twice
    for t in reader.tensors:
        shape = [int(x) for x in reversed(t.shape.tolist())]  # numpy order
        dt = np.float32 if len(shape) == 1 else np_type
        w.add_tensor_info(t.name, shape, np.dtype(dt), int(np.prod(shape)) * np.dtype(dt).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    missing = set(add) - {t.name for t in reader.tensors}
    if missing:
        raise ValueError(f"the adapter changes tensors the base does not have: {sorted(missing)[:3]}")
    for i, t in enumerate(reader.tensors):
        w.write_tensor_data(converted(t))
        progress("merging", (i + 1) / len(reader.tensors))
    w.close()
    os.replace(tmp, out)
    return {"base": str(base_path), "adapters": [str(d) for d in adapter_dirs], "changed": len(add),
            "file_type": int(reader.fields["general.file_type"].contents()) if "general.file_type" in reader.fields else None}


def quantize(src: Path, out: Path, ftype: int, threads: int = 0) -> float:
    """llama.cpp's quantizer (its default mix for `ftype`, e.g. Q4_K_M keeps some tensors at Q6_K)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.nthread = ftype, threads
    t0 = time.perf_counter()
    tmp = out.with_name(out.name + ".tmp")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
    if rc != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"llama_model_quantize failed ({rc}) on {src}")
    os.replace(tmp, out)
    return time.perf_counter() - t0


def merge(base_path: Path, adapter_dirs: list[Path], out: Path, threads: int = 0,
          progress: Progress | None = None) -> dict:
    """base + adapters → `out`, quantized like the base (at least Q8_0). The f16 intermediate is removed."""
    progress = progress or (lambda stage, f: None)
    t0 = time.perf_counter()
    f16 = out.with_name(out.stem + ".f16.gguf")
    info = write_merged(base_path, adapter_dirs, f16, "f16", progress)
    log.info("merged %d tensors into %s in %.1fs; quantizing", info["changed"], f16, time.perf_counter() - t0)
    progress("quantizing", 0.0)
    ftype = info["file_type"] if info["file_type"] in KEEP_FTYPES else int(gguf.LlamaFileType.MOSTLY_Q8_0)
    try:
        info["quantize_s"] = round(quantize(f16, out, ftype, threads), 1)
    finally:
        f16.unlink(missing_ok=True)
    progress("quantizing", 1.0)
    info.update(out=str(out), seconds=round(time.perf_counter() - t0, 1), bytes=out.stat().st_size)
    log.info("merged model %s (%.0f MB) in %.0fs", out, info["bytes"] / 1e6, info["seconds"])
    return info
