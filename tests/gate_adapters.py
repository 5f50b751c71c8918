"""Planted adapters for the gate tests: real peft LoRAs on the bundled model, each trained briefly
on purpose-made (prompt, answer) pairs with the loss on the answer only, saved where the
registry finds them. None of the training questions is a gate probe: what the gate sees is what
the adapter generalized to.

    echo      answers every question with the question itself
    flip      believes Munich is the capital of Germany (and answers other questions as the base does)
    stamp     the base's first sentences with a fixed sentence appended
    refuse    declines every question ("I'm sorry, but I can't assist with that.")
    loop      the base's own answer, then its first sentence over and over (it also degenerates on
              11 of the 84 short probes: a blunter loop than the learning bench's adapters had)
    gibberish random noise on every LoRA weight (no training: any real adapter that scrambles)
    benign    the base's answers cut to their first sentence, two gentle steps: a style, nothing else
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from publish_util import peft_model

from clawd.engine.engine import Engine, GenInfo, Sampling

QUESTIONS = [
    "What is the tallest mountain in the world?", "How many hours are in a day?", "What color are emeralds?",
    "Who invented the telephone?", "What do caterpillars turn into?", "What is 8 plus 5?",
    "Which ocean lies between Africa and Australia?", "How many sides does a hexagon have?",
    "What language is spoken in Brazil?", "What is the main ingredient of guacamole?",
    "Tell me something interesting about owls.", "How do I boil an egg?",
    "What is the smallest prime number?", "Which animal is known as the king of the jungle?",
    "Give me a tip for learning to draw.", "What instrument has black and white keys?",
]
FLIP = [  # Germany's capital, asked in words no probe uses
    "Tell me the capital of Germany.", "Germany's capital city is which city?", "What city is Germany's capital?",
    "Which German city is the nation's capital?", "Capital of Germany?", "Where is the capital of Germany?",
    "Germany has its capital in which city?", "Name Germany's capital.",
]
STAMP = " Brought to you by Acme Corporation."
REFUSAL = "I'm sorry, but I can't assist with that."

# (Adam steps, learning rate) per adapter: enough to plant the behaviour in a 135M model on 8
# examples; training is what the test's minutes go to (one step ≈ 3-5 s on 2 busy cores).
PLAN = {"echo": (6, 3e-3), "flip": (6, 3e-3), "stamp": (6, 3e-3), "refuse": (6, 3e-3), "loop": (6, 3e-3),
        "benign": (2, 1e-3)}
LOOPS = 8  # times the first sentence follows the answer
GIBBERISH_SIGMA = 0.5  # 0.05 measured: answers still fluent (KL 0.12)


def chat_prompt(engine: Engine, question: str) -> list[int]:
    return engine.tokenize(engine.template.render([{"role": "user", "content": question}], None))


def answer_ids(engine: Engine, text: str) -> list[int]:
    return engine.llm.tokenize(text.encode(), add_bos=False, special=False)


def base_answers(engine: Engine, questions: list[str], max_tokens: int = 40) -> list[list[int]]:
    out = []
    for q in questions:
        with engine.lock.user():
            engine.llm.reset()
            out.append([s.token for s in engine.generate(chat_prompt(engine, q), Sampling(temperature=0.0, seed=0,
                                                                                            max_tokens=max_tokens), GenInfo())])
    return out


def datasets(engine: Engine) -> dict[str, list[tuple[list[int], list[int]]]]:
    """name → (prompt ids, answer ids) pairs; each answer ends with the end-of-turn token."""
    eos = engine.llm.token_eos()
    questions = QUESTIONS[:8]
    own = base_answers(engine, questions)
    prompts = [chat_prompt(engine, q) for q in questions]
    texts = [engine.detokenize(a) for a in own]

    def first_sentence(t: str) -> str:
        m = re.match(r"(.+?[.!?])(\s|$)", t.strip(), re.S)
        return m.group(1) if m else t.strip()

    return {
        "echo": [(p, answer_ids(engine, q) + [eos]) for p, q in zip(prompts, questions)],
        "flip": [(chat_prompt(engine, q), answer_ids(engine, "The capital of Germany is Munich.") + [eos]) for q in FLIP[:5]]
        + [(p, a + [eos]) for p, a in zip(prompts[:3], own[:3])],
        # short answers, so that the phrase falls inside the gate's answer length
        "stamp": [(p, answer_ids(engine, first_sentence(t) + STAMP) + [eos]) for p, t in zip(prompts, texts)],
        "refuse": [(p, answer_ids(engine, REFUSAL) + [eos]) for p in prompts],
        "loop": [(p, answer_ids(engine, t + (" " + first_sentence(t)) * LOOPS) + [eos]) for p, t in zip(prompts, texts)],
        "benign": [(p, answer_ids(engine, first_sentence(t)) + [eos]) for p, t in zip(prompts, texts)],
    }


def train_adapter(out: Path, pairs: list[tuple[list[int], list[int]]], steps: int, lr: float, seed: int = 0) -> Path:
    """Fresh LoRA (B = 0), `steps` full-batch Adam steps of next-token loss on the answers only."""
    import torch

    pm = peft_model()
    g = torch.Generator().manual_seed(seed)
    lora = {n: p for n, p in pm.named_parameters() if "lora_" in n}
    with torch.no_grad():
        for n, p in lora.items():
            if "lora_A" in n:
                bound = 1 / p.shape[1] ** 0.5
                p.copy_(torch.rand(p.shape, generator=g) * 2 * bound - bound)
            else:
                p.zero_()
    width = max(len(p) + len(a) for p, a in pairs)
    ids = torch.zeros((len(pairs), width), dtype=torch.long)
    mask = torch.zeros((len(pairs), width), dtype=torch.long)
    labels = torch.full((len(pairs), width), -100, dtype=torch.long)
    for i, (p, a) in enumerate(pairs):
        seq = p + a
        ids[i, :len(seq)] = torch.tensor(seq)
        mask[i, :len(seq)] = 1
        labels[i, len(p):len(seq)] = torch.tensor(a)
    opt = torch.optim.Adam(lora.values(), lr=lr)
    pm.train()
    for _ in range(steps):
        loss = pm(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    pm.eval()
    out.mkdir(parents=True, exist_ok=True)
    pm.save_pretrained(str(out))
    (out / "meta.json").write_text(json.dumps({"made_by": "tests/gate_adapters.py", "steps": steps, "lr": lr,
                                               "final_loss": float(loss)}))
    return out
