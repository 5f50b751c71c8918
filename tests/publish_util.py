"""Helpers for the publish tests: a real peft LoRA on the bundled model, made by hand until the
trainer lands. The dequantized base is loaded once per test process (≈20–50 s on 2 cores)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from clawd.config import bundled_model_path

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@functools.lru_cache(maxsize=1)
def peft_model():
    """transformers' dequantized fp32 copy of the bundled GGUF, wrapped in an r=16, α=32 LoRA."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(2)
    path = bundled_model_path()
    base = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    base.eval()
    cfg = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS)
    return get_peft_model(base, cfg)


def make_adapter(out: Path, sigma: float = 0.0, seed: int = 0, scale_b: float = 1.0, nan: bool = False,
                 train_ids: list[list[int]] | None = None, steps: int = 1, lr: float = 1e-3) -> Path:
    """Save a peft adapter to `out`. B (zero at init) gets N(0, sigma) noise, or `steps` Adam steps
    on next-token loss over `train_ids`; then B is multiplied by `scale_b`; `nan` puts a NaN in."""
    import torch

    pm = peft_model()
    g = torch.Generator().manual_seed(seed)
    lora = {n: p for n, p in pm.named_parameters() if "lora_" in n}
    with torch.no_grad():
        for n, p in lora.items():
            if "lora_A" in n:  # peft's kaiming init, made reproducible
                bound = 1 / p.shape[1] ** 0.5
                p.copy_(torch.rand(p.shape, generator=g) * 2 * bound - bound)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * sigma)
    if train_ids:
        opt = torch.optim.Adam(lora.values(), lr=lr)
        for _ in range(steps):
            for ids in train_ids:
                x = torch.tensor([ids])
                loss = pm(input_ids=x, labels=x).loss
                loss.backward()
            opt.step()
            opt.zero_grad()
    with torch.no_grad():
        for n, p in lora.items():
            if "lora_B" in n:
                p.mul_(scale_b)
        if nan:
            next(p for n, p in lora.items() if "lora_B" in n)[0, 0] = float("nan")
    pm.save_pretrained(str(out))
    meta = out / "meta.json"
    if not meta.exists():
        meta.write_text(json.dumps({"made_by": "tests/publish_util.py", "sigma": sigma, "seed": seed}))
    return out


def hf_logprobs(ids: list[int]):
    """log softmax of the next-token logits after `ids` under the adapter last saved/made, shape (vocab,)."""
    import torch

    with torch.no_grad():
        logits = peft_model()(input_ids=torch.tensor([ids])).logits[0, -1].double()
    return torch.log_softmax(logits, -1).numpy()
