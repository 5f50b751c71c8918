"""GRPO's groups, made in idle time (issue 28; design §7): what the scheduler runs when nothing is
left to judge or train.

1. Hindsight pairs: a turn the user corrected, and the retry they accepted next, both answers on
   the first turn's prompt (without the correction): reward 0 and 1. Free: nothing is sampled.
2. Groups: for recorded main turns (every one the user reacted to, old ones too, none of an
   excluded session, no side turn), K answers sampled on the background context with the live
   adapter, at the turn's temperature, logprobs recorded; then scored on the base weights by
   `Scorer`: the user's own words in the prompt, and a fit on the answers they already judged.
   Nothing is sampled while the scorer is untrusted, the user has said nothing to score against,
   they have not yet judged MIN_EACH answers each way, or the fit on those does not rank them
   better than chance (scorer.signal): then it waits for their next verdict.

The background context yields to user requests between decode steps, as judging does; a job stops
at the next group once `grpo_budget_s` has passed, the scheduler tells it to, the user pauses learning,
or the next round has what it needs (sampled under this adapter, more would be dropped when it
changes). A group and its scores are each written in one transaction.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import numpy as np

from ..config import Settings
from ..engine.background import Cancelled
from ..engine.chat_template import call_arguments
from ..engine.engine import Engine
from ..engine.repetition import echoes, loops
from ..engine.tool_calls import parse_tool_calls
from ..store.records import Rollout, RolloutGroup, Turn, sampling_temperature
from ..store.store import Store
from .scorer import MIN_EACH, USER_ANSWERS, Scorer, UserFit, last_user_text, user_evidence

log = logging.getLogger("clawd.judge")

CORRECTIONS_READ = 20  # recent corrections read to find EVIDENCE_ITEMS distinct ones
# A replayed prompt and its answers must fit the background context, whose KV cache grows to fit
# the longest (and stays): 8k tokens keeps it near the judge's on a small model.
MAX_CONTEXT = 8192
# Each turn is replayed under at most this many adapters. Without a bound, every adapter a GRPO
# round makes would make every turn a candidate again: idle time would go on training on the same
# evidence forever, fitting the scorer rather than the user. Two: the adapter live when the turn
# is first replayed, and one after it has learned from it.
REPLAYS = 2
MARGIN_K = 4  # the group size at which the scorer's margin applies as it is (group_margin)


def answer_seed(turn_id: int, version: int | None, i: int) -> int:
    """The sampling seed of the i-th answer of a turn's group under an adapter (None: the base
    weights): the same in every process, so a bench run with the same seed samples the same groups.
    (Until 2026-12-05 it hashed `version` itself, and hash(None) is an address in Python 3.11: the
    base weights' groups changed from run to run.)"""
    return hash((turn_id, -1 if version is None else version, i)) & 0xFFFFFFFF


class Rollouts:
    def __init__(self, engine: Engine, store: Store, settings: Settings, scorer: Scorer):
        self.engine, self.store, self.settings, self.scorer = engine, store, settings, scorer
        self.last: dict[str, float] | None = None  # what the last job did, for status
        self.fit: UserFit | None = None  # the last fit on the user's verdicts, for status
        # the verdicts (`_verdicts_key`) a fit last failed to see: nothing to do until they change
        self._no_signal: tuple | None = None

    def pending(self) -> bool:
        """Is there anything to do? (The scheduler asks every idle tick: cheap queries only.)"""
        k = self.settings
        if k.grpo_k < 2:
            return False
        if self.store.hindsight_pairs(1) or self.store.unscored_groups(1):
            return True
        trust = self.scorer.cached()
        if trust is not None and trust.mode != "trusted":
            return False
        key = self._verdicts_key()
        return (bool(self.store.corrections(1)) and min(key[0]) >= MIN_EACH and self._no_signal != key
                and self.store.has_rollout_candidates(self.engine.adapter_version, REPLAYS))

    def _verdicts_key(self) -> tuple:
        """What a fit on the user's verdicts reads, cheaply: ((accepted, rejected), the newest's id)."""
        newest = self.store.judged_answers(1)
        return self.store.judged_counts(USER_ANSWERS), newest[0][0].id if newest else None

    def verdicts(self) -> dict[str, Any]:
        """The user's judged answers the fit reads, each way, how many of each it needs first, and
        how well the last fit ranked them (each by a fit on the others) against the AUC it needs."""
        accepted, rejected = self.store.judged_counts(USER_ANSWERS)
        f = self.fit
        return {"accepted": accepted, "rejected": rejected, "needed": MIN_EACH,
                "cv_auc": f.cv_auc if f else None, "needed_auc": f.needed_auc if f else None}

    def run(self, stop: threading.Event | None = None, enough: Callable[[], bool] | None = None) -> int:
        """Make groups until none is left to make, the budget is spent, `stop` is set or `enough()`
        says the next round has what it needs. Returns how many groups were stored.

        Why stop at a round's worth: a group trains only while the adapter that sampled it is live
        (GRPO is on-policy), so every group past the round's is thrown away once the round publishes.
        On no_lists a job sampled 37 groups in 509 s; the round used 8 of them."""
        t0, made = time.monotonic(), 0
        try:
            made += self._hindsight()
            trust = self.scorer.trust(stop)  # measured once per model file (minutes), then cached
            evidence = user_evidence(self.store.corrections(CORRECTIONS_READ))
            user = self._user_fit(evidence, stop)
            for g in self.store.unscored_groups(16):  # sampled before a kill, or before the scorer's trust was known
                self._score(g, evidence, user)
            if trust.mode != "trusted":
                log.info("GRPO scorer is %s on this model (%s); no groups are sampled", trust.mode,
                         f"{100 * trust.measured['decided']:.0f}% of pairs decided at margin {trust.margin}")
                return made
            while user is not None and (stop is None or not stop.is_set()):
                if self.store.learning_paused():  # the user's switch, read between groups as the scheduler reads it between ticks
                    log.info("GRPO rollouts: learning paused by the user; no more groups")
                    break
                if time.monotonic() - t0 > self.settings.grpo_budget_s:
                    log.info("GRPO rollouts: idle budget of %.0fs spent", self.settings.grpo_budget_s)
                    break
                turns = self.store.rollout_candidates(self.engine.adapter_version, 1, REPLAYS)
                if not turns:
                    break
                group = self._sample(turns[0], stop)
                if group is not None:
                    self._score(group, evidence, user, stop)
                    made += 1
                    if enough is not None and enough():
                        log.info("GRPO rollouts: a round's worth of groups is ready; the rest waits for its adapter")
                        break
        except Cancelled:
            log.info("GRPO rollouts stopped; they go on at the next idle moment")
        self.last = {"groups": made, "seconds": round(time.monotonic() - t0, 1), "at": time.time()}
        if made:  # the idle cost of GRPO is this, the round's training and the gate (all logged)
            log.info("GRPO rollouts: %d group(s) in %.0fs", made, self.last["seconds"])
        return made

    def _hindsight(self) -> int:
        made = 0
        for a, b in self.store.hindsight_pairs(16):
            first, retry = self.store.turn(a), self.store.turn(b)
            assert first is not None and retry is not None
            self.store.add_group(RolloutGroup(
                turn_id=a, source="hindsight", adapter_version=first.adapter_version,
                temperature=sampling_temperature(first.request), scorer="hindsight",
                rollouts=[Rollout(first.completion_ids, first.text, reward=0.0),
                          Rollout(retry.completion_ids, retry.text, reward=1.0)]))
            made += 1
            log.info("hindsight pair: turn %d (corrected) against its accepted retry, turn %d", a, b)
        return made

    def _sample(self, turn: Turn, stop: threading.Event | None) -> RolloutGroup | None:
        """K answers to the turn's recorded prompt with the live adapter; None (and a group with
        no answers stored, so the turn is not tried again under this adapter) when it does not fit."""
        assert turn.id is not None
        k, version = self.settings, self.engine.adapter_version
        temperature = sampling_temperature(turn.request)
        # no longer than the user's own answer could have been: the request's limit, if it set one
        asked = turn.request.get("max_completion_tokens") or turn.request.get("max_tokens")
        limit = min(k.grpo_max_tokens, int(asked)) if isinstance(asked, int) and asked > 0 else k.grpo_max_tokens
        n_ctx = len(turn.prompt_ids) + limit + 1
        if n_ctx > min(MAX_CONTEXT, self.engine.n_ctx):
            log.info("turn %d: its prompt (%d tokens) is too long to replay; no group", turn.id, len(turn.prompt_ids))
            self.store.add_group(RolloutGroup(turn.id, "sampled", version, temperature, [], scorer="undecided"))
            return None
        answers = []
        with self.engine.live_background(max(n_ctx, 512)) as bg:
            for i in range(k.grpo_k):
                lps: list[float] = []
                ids = bg.generate(turn.prompt_ids, temperature, limit,
                                  seed=answer_seed(turn.id, version, i), cancel=stop, logprobs=lps)
                answers.append(Rollout(ids, self._visible(ids), lps))
            swapped = bg.lora_version != version or self.engine.adapter_version != version
        if swapped:  # another adapter went live meanwhile: these answers are nobody's policy now
            log.info("turn %d: the adapter changed while its group was sampled; dropped", turn.id)
            return None
        g = RolloutGroup(turn.id, "sampled", version, temperature, answers)
        self.store.add_group(g)
        return g

    def _user_fit(self, evidence: list[str], stop: threading.Event | None) -> dict[str, list] | None:
        """The scorer's fit on the answers this user judged (None: no words to score against, too
        few answers judged each way yet, or a fit that does not see their verdicts)."""
        if not evidence:
            return None
        key = self._verdicts_key()
        labeled = [(last_user_text(t), self._answer(t), score > 0) for t, score in self.store.judged_answers(USER_ANSWERS)]
        self.fit = f = self.scorer.user_fit(evidence, labeled, stop)
        if f.cv_auc is None:
            log.info("GRPO scorer: %d of the user's answers judged; a fit needs more of each kind", len(labeled))
        elif f.model is None:
            self._no_signal = key
            log.info("GRPO scorer: a fit on the user's %d accepted and %d rejected answers ranks them at AUC %.2f, "
                     "each by a fit on the others; %.2f is needed to beat chance, so no group is sampled or decided "
                     "until their next verdict", f.accepted, f.rejected, f.cv_auc, f.needed_auc)
        return f.model

    def _answer(self, t: Turn) -> str:
        """A judged answer as the scorer reads it, in the form of a group's sampled answers: the
        model's own tokens, so a tool call reads as the model wrote it (Qwen2.5-Coder: the bare JSON),
        not as the empty text the client got beside the parsed call. A text answer is its text."""
        return self._visible(t.completion_ids) if t.tool_calls else t.text

    def _visible(self, ids: list[int]) -> str:
        """The text of an answer's tokens without the end-of-generation token it may end on (which
        served turns and sampled answers keep, for training to learn the stop)."""
        return self.engine.detokenize(ids[:-1] if ids and self.engine.is_eog(ids[-1]) else ids)

    def _score(self, g: RolloutGroup, evidence: list[str], user: dict[str, list] | None,
               stop: threading.Event | None = None) -> None:
        assert g.id is not None
        turn = self.store.turn(g.turn_id)
        assert turn is not None
        trust = self.scorer.trust(stop)
        if user is None:  # nothing to score against: no words of the user's (refused, or excluded), or no fit yet
            self.store.score_group(g.id, [0.0] * len(g.rollouts), "undecided", evidence)
            return
        question, made = last_user_text(turn), last_calls(turn.request)
        # An answer of no text and no call shows the user nothing (OpenClaw asks the model again, then
        # fails the turn); one that runs in circles ("a black hole is a black hole is …"), repeats
        # the question back, or makes again the call whose result the prompt ends with says nothing
        # either: never what anyone asked for, so the least reward. The fit is not asked: it never
        # sees such an answer among the user's verdicts, extrapolated an empty one to 0.86 and ranked
        # echoes first on tool tasks, and reads a loop by its form, which a "no lists" or "one
        # paragraph" user's fit favours.
        out = [refused(r, question, made) for r in g.rollouts]
        rewards = [0.0 if no else round(self.scorer.reward(user, evidence, question, r.text, stop), 4)
                   for r, no in zip(g.rollouts, out)]
        wide = max(rewards) - min(rewards) >= group_margin(trust.margin, len(rewards))
        mode = trust.mode if trust.mode != "trusted" or wide else "undecided"
        self.store.score_group(g.id, rewards, mode, evidence, out)
        log.info("turn %d: group of %d scored %s (%s)%s", g.turn_id, len(rewards), " ".join(f"{r:.2f}" for r in rewards),
                 mode, f"; {sum(out)} empty, looping, echoing or repeating a call, given the least" if any(out) else "")


@cache
def expected_range(n: int) -> float:
    """The expected range (largest minus smallest) of n independent draws from one normal
    distribution, in its standard deviations: the control-chart constant d2(n), 1.128 for 2 (that
    is 2/sqrt(pi)), 2.059 for 4, 2.847 for 8. E[range] = the integral over x of
    1 - F(x)^n - (1 - F(x))^n, F the normal CDF; summed on a grid fine enough for 4 decimals."""
    x = np.linspace(-10.0, 10.0, 20001)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))  # (20001,)
    return float(np.sum(1.0 - cdf ** n - (1.0 - cdf) ** n) * (x[1] - x[0]))


def group_margin(margin: float, k: int) -> float:
    """The gap a group of k answers needs between its best and worst reward to train: the scorer's
    margin, scaled by how far apart k answers of equal worth land by the scorer's noise alone,
    relative to MARGIN_K answers, as the range of k normal draws grows (`expected_range`); never
    less than the margin itself, at which the scorer's pairs go the wrong way rarely enough.

    Why: a group is decided on its extreme pair, and the more answers, the wider that pair by
    chance. At K = 8 with the margin unscaled, the control user (no preference) had 29% and 36% of
    its groups decided against 12-28% at K = 4, and its seed 1 trained a round its scorer decided
    at in-situ AUC 0.60 that drifted four scenarios (docs/learning.md, stop 65). Replayed on those
    K = 8 groups, the scaled gap (x1.38) decides 4 of 24 and 7 of 36 of the control user's, and
    12-19 of the preference users' 24-41 (unscaled: 16-28). Relative to 4, not 2: every bench run
    that judged the margin sampled 4 answers a group, and at 4 it held the control user still."""
    return margin * max(1.0, expected_range(k) / expected_range(MARGIN_K))


def refused(r: Rollout, question: str, made: Sequence[tuple[str, Any]] = ()) -> bool:
    """A sampled answer no user wants, whatever the scorer reads in it: empty, running in circles
    (`loops` on its tokens, the gate's rule for a degenerate answer), the user's question repeated
    back (`echoes`, the gate's rule for its probes), or only calls already `made` (`last_calls`)."""
    return (not r.text.strip() or loops(r.completion_ids) is not None or echoes(question, r.text)
            or repeats(r.text, made))


def last_calls(request: dict[str, Any]) -> list[tuple[str, Any]]:
    """The calls whose results the prompt ends with: (name, parsed arguments) of each call of the
    last assistant message, when nothing but their tool results follows it; [] otherwise (a user's
    word after a call may ask for it again: "run it once more")."""
    msgs = request.get("messages", [])
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].get("role") == "assistant":
            if i + 1 == len(msgs) or any(m.get("role") != "tool" for m in msgs[i + 1:]):
                return []
            calls = msgs[i].get("tool_calls") or []
            return [(c["function"].get("name"), call_arguments(c["function"].get("arguments")))
                    for c in calls if isinstance(c, dict) and isinstance(c.get("function"), dict)]
    return []


def repeats(text: str, made: Sequence[tuple[str, Any]]) -> bool:
    """Is this answer only calls already `made`, the same tool with the same arguments? The result
    is in the prompt; asking again learns nothing. On the tool bench an adapter repeated one call
    until the 8-call cap on 5 of 8 held-out tasks (the base on none)."""
    if not made:
        return False
    _, calls = parse_tool_calls(text, {name for name, _ in made})
    return bool(calls) and all((c.name, call_arguments(c.arguments)) in made for c in calls)
