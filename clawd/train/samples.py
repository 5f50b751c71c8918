"""Judged turns → training samples (design §7).

A sample is what the engine served, token for token: the recorded prompt ids and completion ids
(never re-tokenized), a reward (the user's explicit feedback first, else the judge's score) and,
for OPD, the teacher prompt: the same request with the judge's hint appended to the last user
message, rendered with the engine's own template code (`clawd.chat_template`) and tokenized by
the training tokenizer, followed by the same completion ids.

It also carries what scoring needs to be faithful to how the turn was sampled: its temperature,
the engine's own logprob of each completion token, and the adapter that served it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..engine.chat_template import ChatTemplate, TemplateError, from_llama, normalize
from ..store.hints import null_hint
from ..store.records import Turn, sampling_temperature
from ..store.store import Store

log = logging.getLogger("clawd.train")

HINT_MARK = "\n\n[user's hint]\n"
MIN_PROMPT = 64  # a cut prompt keeps at least this many tokens before the completion

Encode = Callable[[str], list[int]]
WEIGHTS = {"grpo": (0.0, 0.0), "rl": (1.0, 0.0), "opd": (0.0, 1.0), "combined": (1.0, 1.0)}  # method → factors of (w_rl, w_opd)


@dataclass
class Sample:
    turn_id: int
    prompt_ids: list[int]  # the engine's ids, cut from the left past max_train_tokens
    completion_ids: list[int]
    reward: float  # -1, 0 or +1 (minus the round's mean with train_turn_baseline; a group answer's: its advantage)
    hint: str | None = None
    teacher_prompt_ids: list[int] | None = None  # hinted prompt; None without a hint
    cut: int = 0  # prompt tokens dropped
    system_cut: int = 0  # of them, system prompt tokens (0 unless the system prompt alone did not fit)
    hint_cut: bool = False  # the hint did not survive the teacher prompt's cut: trained without OPD
    temperature: float = 1.0  # what every logprob of this sample is taken at (see sampling_temperature)
    rollout_logprobs: list[float] | None = None  # the engine's, per completion id, at temperature 1; None if absent
    adapter_version: int | None = None  # what served the turn (None: the base weights)
    null_prompt_ids: list[int] | None = None  # opd_contrast: the prompt with hints.null_hint instead of the hint

    @property
    def ids(self) -> list[int]:
        return self.prompt_ids + self.completion_ids

    @property
    def teacher_ids(self) -> list[int] | None:
        return None if self.teacher_prompt_ids is None else self.teacher_prompt_ids + self.completion_ids

    @property
    def null_ids(self) -> list[int] | None:
        return None if self.null_prompt_ids is None else self.null_prompt_ids + self.completion_ids


class TokenizerMismatch(RuntimeError):
    """The training tokenizer does not give the engine's token ids."""


def gguf_template(model_path: Path) -> ChatTemplate:
    """The chat template the engine renders with: the GGUF's own, with its BOS/EOS text."""
    from llama_cpp import Llama

    return from_llama(Llama(str(model_path), vocab_only=True, verbose=False))[0]  # the header and vocabulary only


def _tools(request: dict[str, Any]) -> list[dict[str, Any]] | None:
    return (request.get("tools") or None) if request.get("tool_choice") != "none" else None


def render(template: ChatTemplate, request: dict[str, Any], hint: str | None = None) -> str:
    """The prompt text of a recorded request; with `hint`, the OPD teacher's prompt."""
    messages = normalize(request["messages"])
    if hint is not None:
        last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
        if last_user is None:
            messages.append({"role": "user", "content": HINT_MARK.lstrip() + hint})
        else:
            messages[last_user] = {**messages[last_user], "content": messages[last_user]["content"] + HINT_MARK + hint}
    return template.render(messages, _tools(request))


def check_tokenizer(turn: Turn, template: ChatTemplate, encode: Encode, decode: Callable[[list[int]], str]) -> str:
    """Refuse to train unless the training tokenizer gives the engine's ids for a recorded turn.

    Re-rendering the request must reproduce the recorded prompt ids exactly ("exact"). A template
    that writes today's date cannot; then decoding and re-encoding the recorded ids must give
    them back ("roundtrip": the tokenizer agrees, teacher prompts may differ in such details).
    """
    try:
        if encode(render(template, turn.request)) == turn.prompt_ids:
            return "exact"
    except TemplateError:
        pass
    again = encode(decode(turn.prompt_ids))
    if again == turn.prompt_ids:
        log.warning("turn %d: re-rendering its request does not reproduce the recorded prompt, though the tokenizer "
                    "agrees with the engine; hinted teacher prompts may differ from what the engine would render",
                    turn.id)
        return "roundtrip"
    i = next((k for k, (a, b) in enumerate(zip(again, turn.prompt_ids)) if a != b), min(len(again), len(turn.prompt_ids)))
    raise TokenizerMismatch(
        f"the training tokenizer does not reproduce the engine's token ids (turn {turn.id}: first difference at "
        f"token {i} of {len(turn.prompt_ids)}, engine {turn.prompt_ids[i:i + 3]} vs trainer {again[i:i + 3]}). "
        "Training on it would teach the wrong tokens. Unset train_base to train from the served GGUF itself, "
        "or point it at the Hugging Face checkpoint the GGUF was converted from.")


def system_prefix(template: ChatTemplate, request: dict[str, Any], encode: Encode, ids: list[int]) -> int:
    """How many leading ids are the system message (kept when a long history is cut); 0 if none."""
    messages = normalize(request["messages"])
    if not messages or messages[0]["role"] != "system":
        return 0
    try:
        head = encode(template.render(messages[:1], _tools(request), add_generation_prompt=False))
    except TemplateError:
        return 0
    return len(head) if ids[: len(head)] == head else 0


def fit(prompt: list[int], completion: list[int], keep: int, limit: int) -> tuple[list[int], list[int], int, int]:
    """Cut (prompt, completion) to `limit` tokens. The completion loses its end only if it alone
    leaves under MIN_PROMPT prompt tokens. The prompt loses history from the left, after its first
    `keep` tokens (the system prompt). When the system prompt alone leaves under MIN_PROMPT for the
    conversation, the cut moves into it: the conversation keeps its last tokens (at least
    MIN_PROMPT, at most half the room) and the system prompt its head, so training still sees both
    the instructions' start and the question. Returns (prompt, completion, cut, head), head = the
    system prompt tokens kept (under `keep` when it was cut)."""
    completion = completion[: max(1, limit - MIN_PROMPT)]
    room = limit - len(completion)
    if len(prompt) <= room:
        return prompt, completion, 0, keep
    head = keep
    if keep > room - MIN_PROMPT:
        head = room - max(MIN_PROMPT, min(len(prompt) - keep, room // 2))
    return prompt[:head] + prompt[len(prompt) - (room - head):], completion, len(prompt) - room, head


def turn_signal(store: Store, turn_id: int) -> tuple[float, str | None]:
    """(reward, hint) of a turn: explicit feedback overrides the judge. The hint is the feedback's
    comment when it gave one, else the judge's, unless the user approved what the judge faulted."""
    fb, j = store.feedback(turn_id), store.judgment(turn_id)
    reward = fb.score if fb is not None else (j.score if j is not None else 0)
    judge_hint = j.hint if j is not None and (fb is None or fb.score < 0) else None
    hint = (fb.hint if fb is not None and fb.hint else None) or judge_hint
    return float(reward), hint if hint and hint.strip() else None


def build(turn: Turn, reward: float, hint: str | None, template: ChatTemplate, encode: Encode, limit: int,
          contrast: bool = False) -> Sample:
    """The sample of a turn; with `contrast` (opd_contrast) and a hint that quotes the user, also the
    prompt with that quote emptied of content (`null_prompt_ids`)."""
    keep = system_prefix(template, turn.request, encode, turn.prompt_ids)
    prompt, completion, cut, head = fit(turn.prompt_ids, turn.completion_ids, keep, limit)
    if head < keep:
        log.warning("turn %d: its system prompt (%d tokens) and the completion (%d) leave no room for the conversation "
                    "within max_train_tokens=%d: training sees the system prompt's first %d tokens and the "
                    "conversation's last %d, not what was served. Raise max_train_tokens to keep it whole.",
                    turn.id, keep, len(completion), limit, head, len(prompt) - head)
    elif cut:
        log.info("turn %d: %d history tokens cut to fit max_train_tokens=%d", turn.id, cut, limit)
    teacher, hint_cut = None, False
    if hint is not None:
        try:
            full = encode(render(template, turn.request, hint))
        except TemplateError as e:
            log.warning("turn %d: the template refused the hinted prompt (%s); its hint is not used", turn.id, e)
            hint = None
        else:
            teacher, _, t_cut, t_head = fit(full, completion, system_prefix(template, turn.request, encode, full), limit)
            # The hinted prompt is the served one plus the hint's tokens, followed by what came after
            # the last user message (their common suffix): the hint survives only if the kept tail
            # full[-(len(teacher) - t_head):] is at least that long. Counted from the end, so a template
            # that writes the date near the start does not shift it.
            after = next((i for i, (a, b) in enumerate(zip(reversed(full), reversed(turn.prompt_ids))) if a != b),
                         min(len(full), len(turn.prompt_ids)))
            needed = len(full) - len(turn.prompt_ids) + after
            if t_cut and len(teacher) - t_head < needed:
                log.info("turn %d: its hint did not survive the cut to max_train_tokens=%d (it and what follows "
                         "take %d tokens); trained on its reward alone, not as OPD", turn.id, limit, needed)
                teacher, hint, hint_cut = None, None, True
    null = None
    if contrast and teacher is not None and hint is not None and (h0 := null_hint(hint)) is not None:
        full0 = encode(render(template, turn.request, h0))  # the hint's frame: near the end, kept by the cut as the hint was
        null = fit(full0, completion, system_prefix(template, turn.request, encode, full0), limit)[0]
    rollout = turn.logprobs[: len(completion)] if len(turn.logprobs) == len(turn.completion_ids) else None
    assert turn.id is not None, "a turn from the database has its id"
    return Sample(turn.id, prompt, completion, reward, hint, teacher, cut, keep - head, hint_cut,
                  sampling_temperature(turn.request), rollout, turn.adapter_version, null)


def centered(samples: list[Sample]) -> tuple[list[Sample], float]:
    """The round's judged turns with their rewards minus the round's mean reward (`train_turn_baseline`),
    and that mean.

    Raw ±1 has no baseline: a round of seven rejected answers and one accepted pushes down every
    token of the seven, and the mass goes wherever the model already leans (answer_first went
    backwards so, docs/learning.md). Centered, the seven get −0.25 each and the one +1.75: the round
    moves by what tells them apart. A round whose turns all agree teaches nothing by reward (its
    hints still teach by OPD). The groups' answers are centered on their own group, not here."""
    if not samples:
        return samples, 0.0
    mean = sum(s.reward for s in samples) / len(samples)
    return [replace(s, reward=s.reward - mean) for s in samples], mean


def trains_turns(method: str, w_rl: float = 1.0, w_opd: float = 1.0) -> bool:
    """Whether judged turns train themselves at these weights, or only GRPO groups do (grpo)."""
    return any(w * f > 0 for w, f in zip(WEIGHTS[method], (w_rl, w_opd)))


def ready_turns(store: Store, method: str, limit: int, w_rl: float = 1.0, w_opd: float = 1.0) -> list[int]:
    """Main turns with a signal for `method` at these weights that no finished run has used, oldest
    first, none from a session the user excluded from training. A term weighted 0 reads no turn:
    with both at 0 (the groups alone) turns would start rounds that train nothing on them."""
    rl, opd = (w * f > 0 for w, f in zip(WEIGHTS[method], (w_rl, w_opd)))
    return store.ready_turns(rl, opd, limit)
