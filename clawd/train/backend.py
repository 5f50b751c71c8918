"""The model being trained: a causal LM with one LoRA adapter, behind one interface.

- `PeftBackend` ("full"): transformers + peft on the full-precision base (CPU: fp32; CUDA: bf16).
- `QLoRABackend` ("qlora"): transformers + peft on a base quantized to 4-bit NF4 by bitsandbytes
  (double quantization; compute in bf16 on CUDA, fp32 on CPU). Runs wherever bitsandbytes does,
  its CPU backend included, so the 4-bit path is tested in CI.
- `UnslothBackend` ("unsloth", CUDA): Unsloth's FastLanguageModel, also 4-bit NF4 — the fast path.

`train_backend = auto` picks Unsloth on CUDA when it imports, else QLoRA on CUDA, and the full
fp32 base on a CPU (measured on the bundled model: QLoRA is slower per round there and saves
memory only on the base weights; docs/training.md).

All train on the same base weights: `train_base` if configured, else the served GGUF itself,
dequantized by transformers once and kept as a Hugging Face checkpoint under
`$CLAWD_HOME/train/base-<sha256>/` (later rounds load it in seconds instead of re-dequantizing;
Unsloth and bitsandbytes quantize from that checkpoint). Only the trainer child imports this module
(torch at the top; transformers, peft, bitsandbytes and unsloth where used); the daemon never pays
for them.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import os
import resource
import shutil
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from ..config import Settings
from .prompt_cache import cache_under_checkpointing, probe_shared_prompts, prompt_cache

log = logging.getLogger("clawd.train")
# bitsandbytes' CPU backend (imported by peft whenever it is installed) warns at import that a fused
# kernel for batch-1 inference (gemv) is missing unless fetched from the Hub at run time; training
# never uses it, and fetching code is not clawd's to do.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# max_train_tokens = 0 means: 8192 on a CPU (a micro-step of 8k tokens already takes minutes on
# 2 cores), 16384 on CUDA (OpenClaw's prompt is ~12k tokens with its tools, plus the answer).
TRAIN_TOKENS_CPU, TRAIN_TOKENS_CUDA = 8192, 16384


def train_tokens(setting: int, cuda: bool) -> int:
    """The longest training sequence: `max_train_tokens`, or by device when it is 0."""
    if 0 < setting < 128:
        raise ValueError(f"max_train_tokens={setting} leaves no room for a prompt: set 0 (by device) or at least 128")
    return setting or (TRAIN_TOKENS_CUDA if cuda else TRAIN_TOKENS_CPU)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def hf_base(settings: Settings, model_path: Path, sha256: str) -> Path:
    """A Hugging Face checkpoint of the training base: `train_base`, or the served GGUF
    dequantized once into $CLAWD_HOME/train/base-<sha256[:16]> (bf16 safetensors + tokenizer)."""
    if settings.train_base is not None:
        return settings.train_base.expanduser()
    out = settings.home / "train" / f"base-{sha256[:16]}"
    if (out / "config.json").is_file():
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("dequantizing %s into %s (once per base model)", model_path.name, out)
    model = AutoModelForCausalLM.from_pretrained(str(model_path.parent), gguf_file=model_path.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(model_path.parent), gguf_file=model_path.name)
    # Save it as a plain checkpoint (design §12): no GGUF quantizer, a real architecture name.
    model.hf_quantizer = None  # type: ignore[assignment]  # transformers types it as always set
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.architectures = [type(model).__name__]
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(  # type: ignore[arg-type]  # transformers' decorated .to
        str(tmp), safe_serialization=True)
    tok.save_pretrained(str(tmp))
    (tmp / "clawd.json").write_text(json.dumps({"gguf": str(model_path), "sha256": sha256}))
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(out)
    except OSError:  # another process made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def is_oom(e: BaseException) -> bool:
    text = str(e).lower()
    return isinstance(e, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in text or "can't allocate" in text


class Backend:
    """What a training round needs from a model: token logprobs (student with the adapter,
    teacher with it off), the trainable LoRA parameters and their state."""

    name = "?"

    def __init__(self, model: Any, tokenizer: Any, device: torch.device, base_dir: Path):
        self.model, self.tokenizer, self.device, self.base_dir = model, tokenizer, device, base_dir
        self.lora = [p for n, p in model.named_parameters() if "lora_" in n]
        for p in self.lora:
            p.requires_grad_(True)
        self._init = self.lora_state()  # the fresh adapter (B = 0), for rounds with no parent

    # -- tokens ------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Like the engine: BOS when the tokenizer adds one, never twice (templates write it too)."""
        ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
        bos = self.tokenizer.bos_token_id
        if len(ids) > 1 and bos is not None and ids[0] == bos and ids[1] == bos:
            ids = ids[1:]
        return ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    # -- scoring -----------------------------------------------------------------------------
    def logprobs(self, ids: list[int], n_prompt: int, adapter: bool = True, temperature: float = 1.0) -> torch.Tensor:
        """log softmax(z / T)[ids[t]] for the completion positions t ≥ n_prompt, z the logits given ids[:t].
        Shape (C,), C = len(ids) - n_prompt; carries gradient when grad is enabled."""
        return self.logprobs_at(ids, n_prompt, (temperature,), adapter)[0]

    def logprobs_at(self, ids: list[int], n_prompt: int, temperatures: tuple[float, ...],
                    adapter: bool = True) -> torch.Tensor:
        """`logprobs` at several temperatures from one forward pass. Shape (K, C), K = len(temperatures)."""
        return _tempered(*self._completion(ids, n_prompt, adapter), temperatures)  # (K, C)

    @torch.no_grad()
    def teacher_topk(self, ids: list[int], n_prompt: int, k: int, temperature: float) -> tuple[torch.Tensor, ...]:
        """The base weights' (adapter off) log softmax(z / T) at each completion position: of the
        token that follows, (C,); and its K likeliest tokens, their ids (C, K) and logprobs (C, K)."""
        logits, target = self._completion(ids, n_prompt, adapter=False)
        lp = torch.log_softmax(logits / temperature, -1)  # (C, V)
        top = lp.topk(k, -1)
        return lp.gather(-1, target).squeeze(-1), top.indices, top.values

    @torch.no_grad()
    def greedy(self, ids: list[int], n: int, stop: set[int]) -> list[int]:
        """The base weights' (adapter off) greedy continuation of `ids`: at most `n` tokens, through
        the first of `stop`. With the KV cache: each step reads one new token, (1, 1)."""
        out: list[int] = []
        x, past = torch.tensor([ids], device=self.device), None  # (1, T), then (1, 1)
        with self.model.disable_adapter():
            while len(out) < n and (not out or out[-1] not in stop):
                logits, past = self._logits(x, 1, past, cache=True)
                out.append(int(logits[0, -1].argmax()))
                x = torch.tensor([out[-1:]], device=self.device)
        return out

    def logprobs_and_at(self, ids: list[int], n_prompt: int, temperature: float,
                        at: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The adapter's log softmax(z / T) at each completion position, from one forward pass with
        gradient: of the token that follows, (C,); and of the tokens `at` (C, K) names, (C, K)."""
        logits, target = self._completion(ids, n_prompt, adapter=True)
        lp = torch.log_softmax(logits / temperature, -1)  # (C, V)
        return lp.gather(-1, target).squeeze(-1), lp.gather(-1, at.to(lp.device))

    # Whether `shared_logprobs` may stand in for reading each answer whole: PeftBackend tries it once
    # at load (prompt_cache.probe_shared_prompts). Unsloth's patched forward is not tried: it reads each whole.
    shares_prompts = False

    def shared_logprobs(self, prompt: list[int], completions: list[list[int]], temperatures: tuple[float, ...],
                        adapter: bool = True) -> list[torch.Tensor]:
        """`logprobs_at(prompt + c, len(prompt), temperatures)` for each completion c of one prompt,
        the prompt read once (a GRPO group: K answers to one question). One pass over prompt[:-1]
        keeps its keys and values, (1, kv_heads, P − 1, d) per layer; one batched pass reads
        [prompt[-1]] + c[:-1] for every answer, right-padded to the longest, (B, C), over those keys,
        so each answer attends to the prompt and to itself, never to another answer. Carries
        gradient when grad is enabled; the prompt's share of it flows back through its keys and
        values once. Returns one (len(temperatures), len(c)) tensor per completion."""
        assert len(prompt) >= 2 and completions and all(completions)
        longest = max(len(c) for c in completions)
        rows = [[prompt[-1], *c[:-1]] + [prompt[-1]] * (longest - len(c)) for c in completions]  # (B, C)
        with (nullcontext() if adapter else self.model.disable_adapter()), cache_under_checkpointing(self.model):
            recorded = prompt_cache()()
            self._logits(torch.tensor([prompt[:-1]], device=self.device), 1, recorded, cache=True)
            logits = self._logits(torch.tensor(rows, device=self.device), longest, recorded.frozen(), cache=True)[0]
        if logits.shape[:2] != (len(completions), longest):
            raise RuntimeError(f"{self.name}: the model returned logits of shape {tuple(logits.shape)} "
                               f"for {len(completions)} answers of {longest} tokens")
        return [_tempered(row[:len(c)].float(), torch.tensor(c, device=self.device)[:, None], temperatures)
                for row, c in zip(logits, completions)]  # each (len(temperatures), C)

    def _completion(self, ids: list[int], n_prompt: int, adapter: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits predicting each completion token, (C, V) float32, and those tokens (C, 1)."""
        x = torch.tensor([ids], device=self.device)  # (1, T)
        n = len(ids) - n_prompt
        with (nullcontext() if adapter else self.model.disable_adapter()):
            logits = self._logits(x, n + 1)[0][0, :-1].float()  # (C, V): position t predicts token t+1
        if logits.shape[0] != n:  # e.g. a fused-loss forward that returns no logits
            raise RuntimeError(f"{self.name}: the model returned logits of shape {tuple(logits.shape)} for {n} tokens")
        return logits, x[0, n_prompt:, None]

    def _logits(self, x: torch.Tensor, keep: int, past: Any = None, cache: bool = False) -> tuple[torch.Tensor, Any]:
        """Logits of the last `keep` positions, (1, keep, V): never the whole (T, V) matrix. With
        `cache`, `x` continues the KV cache `past` (None: from nothing), and the new cache comes back
        beside the logits; without, no cache is kept (None)."""
        kw = {self._cache_arg: past, "use_cache": True} if cache else {"use_cache": False}
        try:
            out = self.model(input_ids=x, logits_to_keep=keep, **kw)
            logits = out.logits
        except TypeError:  # a forward without logits_to_keep
            out = self.model(input_ids=x, **kw)
            logits = out.logits[:, -keep:]
        return logits, (out.past_key_values if cache else None)

    @functools.cached_property
    def _cache_arg(self) -> str:
        """What the model's forward calls its KV cache: `cache` from transformers 5.x (where
        `past_key_values` is deprecated, to be removed), `past_key_values` before."""
        forward = self.model.get_base_model().forward if hasattr(self.model, "get_base_model") else self.model.forward
        return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"

    # -- adapter state ----------------------------------------------------------------------
    def lora_state(self) -> dict[str, torch.Tensor]:
        from peft import get_peft_model_state_dict

        return {k: v.detach().to("cpu", copy=True) for k, v in get_peft_model_state_dict(self.model).items()}

    def set_lora_state(self, state: dict[str, torch.Tensor]) -> None:
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(self.model, state)
        missing = [k for k in getattr(result, "missing_keys", []) if "lora_" in k]
        if missing or getattr(result, "unexpected_keys", None):
            raise ValueError(f"adapter state does not fit this model: missing {missing[:3]}, "
                             f"unexpected {list(getattr(result, 'unexpected_keys', []))[:3]}")

    def reset_lora(self) -> None:
        self.set_lora_state(self._init)

    def load_lora(self, adapter_dir: Path) -> None:
        """Continue from a saved peft adapter (same rank, alpha and modules)."""
        from safetensors.torch import load_file

        cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
        mine = self.model.peft_config["default"]
        if int(cfg["r"]) != mine.r or float(cfg["lora_alpha"]) != float(mine.lora_alpha):
            raise ValueError(f"the adapter in {adapter_dir} has r={cfg['r']}, alpha={cfg['lora_alpha']}; the settings say "
                             f"lora_r={mine.r}, lora_alpha={mine.lora_alpha}. Set them back, or train from the base "
                             "weights by switching to no adapter first.")
        self.set_lora_state(load_file(str(adapter_dir / "adapter_model.safetensors")))

    def save_lora(self, out: Path) -> None:
        self.model.save_pretrained(str(out), safe_serialization=True)

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "device": str(self.device), "base": str(self.base_dir),
                "trainable_params": sum(p.numel() for p in self.lora)}

    def resident_bytes(self) -> int:
        """What the loaded model (base and adapter) holds in memory."""
        return int(self.model.get_memory_footprint())

    def peak_memory_mb(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated() / 2**20
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _tempered(logits: torch.Tensor, target: torch.Tensor, temperatures: tuple[float, ...]) -> torch.Tensor:
    """log softmax(z / T)[target] at each temperature T: logits (C, V), target (C, 1) → (K, C)."""
    out = []
    for t in temperatures:
        z = logits if t == 1 else logits / t  # (C, V)
        out.append(z.gather(-1, target).squeeze(-1) - torch.logsumexp(z, -1))  # (C,)
    return torch.stack(out)


def _lora_config(settings: Settings):
    from peft import LoraConfig

    return LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha, lora_dropout=0.0, bias="none",
                      target_modules=TARGETS, task_type="CAUSAL_LM")


class PeftBackend(Backend):
    """transformers + peft on the base weights in full precision."""

    name = "full"

    @classmethod
    def load(cls, settings: Settings, base_dir: Path, device: str = "cpu") -> PeftBackend:
        from peft import get_peft_model
        from transformers import AutoTokenizer

        model = cls._base(base_dir, device)
        model.config.use_cache = False
        if hasattr(model, "activation_checkpointing_enable"):  # transformers ≥ 5's name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        torch.manual_seed(0)  # the same fresh adapter every time
        model = get_peft_model(model, _lora_config(settings))  # LoRA weights in fp32 whatever the base's dtype
        model.train()
        backend = cls(model, AutoTokenizer.from_pretrained(str(base_dir)), torch.device(device), base_dir)
        backend.shares_prompts = probe_shared_prompts(backend)
        return backend

    @staticmethod
    def compute_dtype(device: str) -> torch.dtype:
        return torch.float32 if device == "cpu" else torch.bfloat16  # bf16 autocast is slower on CPUs (§12)

    @classmethod
    def _base(cls, base_dir: Path, device: str) -> Any:
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=cls.compute_dtype(device)).to(device)  # type: ignore[arg-type]

    def describe(self) -> dict[str, Any]:
        return super().describe() | {"base_dtype": str(self.compute_dtype(self.device.type)).removeprefix("torch.")}


class QLoRABackend(PeftBackend):
    """QLoRA without Unsloth: the decoder's linear layers stored in 4-bit NF4 with double
    quantization (bitsandbytes `Linear4bit`), dequantized block by block into the compute dtype for
    each matmul; embeddings, norms and an untied lm_head stay in the compute dtype; the LoRA
    weights, their gradients and AdamW's state in fp32."""

    name = "qlora"

    @classmethod
    def _base(cls, base_dir: Path, device: str) -> Any:
        try:
            import bitsandbytes  # noqa: F401
        except ImportError:
            raise RuntimeError("train_backend=qlora needs bitsandbytes: pip install 'clawd[cpu]' (or 'clawd[cuda]'), "
                               "or set train_backend=full") from None
        from transformers import AutoModelForCausalLM, BitsAndBytesConfig

        dtype = cls.compute_dtype(device)
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                   bnb_4bit_compute_dtype=dtype)
        return AutoModelForCausalLM.from_pretrained(str(base_dir), quantization_config=quant, dtype=dtype,
                                                    device_map={"": device})

    def describe(self) -> dict[str, Any]:
        return super().describe() | {"base_dtype": "nf4+double-quant",
                                     "compute_dtype": str(self.compute_dtype(self.device.type)).removeprefix("torch.")}


class UnslothBackend(Backend):
    name = "unsloth"

    @classmethod
    def load(cls, settings: Settings, base_dir: Path) -> UnslothBackend:
        os.environ.setdefault("UNSLOTH_RETURN_LOGITS", "1")  # otherwise its forward may return no logits
        from transformers import AutoTokenizer
        from unsloth import FastLanguageModel

        model, _ = FastLanguageModel.from_pretrained(model_name=str(base_dir), max_seq_length=train_tokens(settings.max_train_tokens, True),
                                                     dtype=None, load_in_4bit=True)
        model = FastLanguageModel.get_peft_model(
            model, r=settings.lora_r, lora_alpha=settings.lora_alpha, lora_dropout=0.0, bias="none",
            target_modules=TARGETS, use_gradient_checkpointing="unsloth", random_state=0, use_rslora=False)
        FastLanguageModel.for_training(model)
        return cls(model, AutoTokenizer.from_pretrained(str(base_dir)), torch.device("cuda"), base_dir)

    def describe(self) -> dict[str, Any]:
        return super().describe() | {"base_dtype": "nf4"}


def resolve_kind(setting: str, cuda: bool) -> str:
    """The backend `train_backend` names on this machine. Call it before anything imports
    transformers: choosing Unsloth imports it, and Unsloth must patch transformers first."""
    if setting == "unsloth" and not cuda:
        raise RuntimeError("train_backend=unsloth needs a CUDA GPU: set train_backend=auto, qlora or full")
    if setting != "auto":
        if setting == "unsloth":
            import unsloth  # noqa: F401
        return setting
    if not cuda:
        return "full"
    try:
        import unsloth  # noqa: F401
    except ImportError:
        log.info("Unsloth is not installed (pip install 'clawd[cuda]'): training with the plain QLoRA backend")
        return "qlora"
    return "unsloth"


def load_backend(settings: Settings, model_path: Path, sha256: str) -> Backend:
    """The backend `settings.train_backend` names (auto: see the module's docstring), loaded."""
    threads = settings.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    cuda = torch.cuda.is_available()
    kind = resolve_kind(settings.train_backend, cuda)
    base = hf_base(settings, model_path, sha256)
    if kind == "unsloth":
        return UnslothBackend.load(settings, base)
    cls = QLoRABackend if kind == "qlora" else PeftBackend
    return cls.load(settings, base, "cuda" if cuda else "cpu")
