"""GRPO's scorer (issue 28): would this user accept this answer, given what they said before?

The daemon has no oracle. What it has is the user's own words about answers they did not want:
the message they sent after an answer scored -1, and the comment of their negative feedback,
quoted as they wrote them, never paraphrased by the model and never a tool's output or a fetched
page (a prompt injection must not become a preference). The scorer shows the base model (adapter
off, the judge's context) the most recent of them, a question and one answer, and reads
P(yes) against P(no) where the verdict comes, and the model's hidden state there, halfway up its
layers (as the judge does): one forward pass per answer, the prefix shared.

**The fit is this user's own.** A logistic regression on those features, fitted on the answers the
user already judged (the judge's verdicts, or their explicit feedback: `Store.judged_answers`),
turns a new answer's features into P(this user accepts it): the reward. A tool call the judge read
from what its tool returned is a verdict too, read as the model wrote it (`Rollouts._answer`), as
a group sampled on that turn is calls to rank; an empty answer is none. A fit shared by every user,
on shipped cases of other preferences, has to guess the preference from the quoted words alone, and
on Qwen2.5-Coder-0.5B it ranked no better than answer length (tuning AUC 0.70, length 0.60, fewer
lines 0.74); fitted on each simulated user's earlier answers it ranks their next ones at 0.82-0.84,
and 0.88-0.96 on held-out preferences (bench/judge/user_fit.py, docs/learning.md). No fit is made
before the user has judged MIN_EACH answers each way, and **none decides anything until it sees this
user's verdicts**: each judged answer scored by a fit on the others (FOLDS-fold cross-validation) must
rank the user's accepted answers above their rejected ones better than chance (`signal`). A user whose
verdicts carry nothing the features show (one who corrects only wrong figures) would otherwise have
every group ranked by noise, and some decided by chance. On the shipped cases (bench/judge/user_gate.py)
the bar passes the metric user on 44% of their cases (their next answers ranked at AUC 0.71 there,
0.54 where it stops) and the other six users on 75-100%.

**What the bar cannot see**: it ranks judged answers that mostly each have a question of their
own, and a group is answers to one question. A fit that has learned which questions get rejected
passes it: replaying the control user's bench conversations (bench/judge/within_question.py), its
fits passed at AUC 0.78 and 0.92 and ranked answers to one question at 0.50 and 0.57. Taking the
question's own features out of each answer's did not close it: seed 1's fit still passed (0.90),
seed 0's fell just under the bar (0.69 of 0.70). Only the size of a round has kept such a fit from
training (docs/learning.md, stop 51).

How far to trust that method is measured per model file on shipped labeled cases
(`data/scorer_cases.jsonl`: real sampled answers, each labeled by whether it meets a stated
preference; bench/judge/scorer_cases.py builds them, split by scenario from the held-out
tests/data/scorer_heldout.jsonl that only the benches read). Each scenario is one simulated user,
its cases in file order their history; each case's answers are scored by a fit on that user's
earlier cases only (`user_rewards`), once HISTORY of them exist. Within each scored case every
(meets, misses) pair of answers is a ranking question: the margin is the smallest reward gap at
which the wrong-way pairs stay within `judge_max_wrong_sign`; `trusted` when at that margin at
least MIN_DECIDED of the pairs are decided. A group whose answers' rewards differ by less than the
margin teaches nothing (Store.ready_groups), and an untrusted scorer's groups train nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..store.hints import clip, quotes_tool_output, text_of, tool_texts
from ..store.records import NextState, Turn
from .calibration import FOLDS, cross_val_probs, fit, predict

log = logging.getLogger("clawd.judge")

CASES = Path(__file__).parent / "data" / "scorer_cases.jsonl"
EVIDENCE_ITEMS = 3  # the user's most recent distinct corrections shown
EVIDENCE_CHARS = 200  # each, quoted
QUESTION_CHARS, ANSWER_CHARS = 600, 1600  # cut in the middle (an answer's end matters: sign-offs, questions back)
# Trusted needs half the pairs decided at the margin: below that, most groups would sit under the
# margin and GRPO would train on a few lucky ones.
MIN_DECIDED = 0.5
HISTORY = 4  # earlier cases a simulated user has before their answers are scored (about 20 answers)
MIN_EACH = 3  # the user's judged answers needed each way (accepted, rejected) before a fit is made
# How far above chance the cross-validated AUC of a user's fit must be before it decides groups: a
# one-sided 5% test against the null of a ranking that knows nothing (Mann-Whitney: AUC mean 0.5,
# variance (a + r + 1) / (12 a r) for a accepted and r rejected answers). Not tuned. Measured on the
# shipped users (bench/judge/user_gate.py): it passes 75-100% of six users' cases and 44% of the
# metric user's, and 0-19% of a user's whose verdicts are shuffled within each question: more than
# 5%, as one user's cases are nested histories, not independent tries.
SIGNAL_Z = 1.645
USER_ANSWERS = 48  # the user's most recent judged answers the fit reads (each one forward pass per job)
MARGINS = tuple(round(x, 2) for x in np.arange(0.0, 0.96, 0.05))  # the reward gaps tried
# Principal components of the hidden state the fit reads. Chosen on the tuning split alone, each
# scenario scored by a fit on the others (bench/results/scorer-qwen2.5-coder-0.5b-instruct-q4_k_m.json,
# Qwen2.5-Coder-0.5B): pairwise AUC 0.70 at 8, 0.72 at 16, 0.63 at 32, 0.64 at 64.
COMPONENTS = 16
# What the fit reads: `probe` (the yes/no log-odds and the hidden state), `contrast` (Scorer.contrast's
# log-ratios), or both. On Qwen2.5-Coder-0.5B (bench/results/scorer-qwen2.5-coder-0.5b-instruct-q4_k_m.json),
# tuning split, each scenario by a fit on the others: pairwise AUC 0.715 (probe), 0.66 (contrast), 0.745
# (both: `chosen_on_tuning`), all untrusted (42% of pairs decided at most, 50% needed). Both cost 4.2 s
# more per answer than the probe's 0.9 for +0.03 AUC within the same mode, so the daemon reads the probe.
FEATURES: Literal["probe", "contrast", "probe+contrast"] = "probe"
PLAIN = {"probe": 1, "contrast": 4, "probe+contrast": 5}[FEATURES]  # features before the hidden state
VERSION = 3  # of this prompt, fit and measure; part of the cache key
NEUTRAL = "Thanks, that was useful."  # Scorer.contrast's control remark: it asks for nothing
SYSTEM = "You check answers for one user, who has told the assistant before what they want."
ScorerMode = Literal["trusted", "untrusted"]


def prompt_text(evidence: list[str], question: str, answer: str) -> str:
    """The scorer's question, before the verdict word (the chat template goes around it)."""
    said = "\n".join(f'- "{e}"' for e in evidence)
    return (f"Earlier, this user said about the assistant's answers:\n{said}\n\nNow the user asks:\n"
            f"{_cut(question, QUESTION_CHARS)}\n\nThe assistant answers:\n{_cut(answer, ANSWER_CHARS)}\n\n"
            "Does this answer do what the user asked for earlier? Reply yes or no.")


def _cut(text: str, keep: int) -> str:
    return text if len(text) <= keep else text[: keep // 2] + " … " + text[-keep // 2:]


def user_evidence(corrections: list[tuple[Turn, NextState | None, str]], n: int = EVIDENCE_ITEMS) -> list[str]:
    """The user's most recent distinct corrections (Store.corrections), quoted, at most `n`; any
    that repeats a tool's result (its request's or the next state's) is refused."""
    out: list[str] = []
    for turn, ns, words in corrections:
        quote = clip(words, EVIDENCE_CHARS)
        if quote in out or quotes_tool_output(words, tool_texts(turn, ns)):
            continue
        out.append(quote)
        if len(out) >= n:
            break
    return out


def last_user_text(turn: Turn) -> str:
    return next((text_of(m.get("content")) for m in reversed(turn.request.get("messages", []))
                 if m.get("role") == "user"), "")


# -- the measure ------------------------------------------------------------------------------------
def pair_metrics(cases: list[list[tuple[float, bool]]], margin: float) -> dict[str, float]:
    """Over every (meets, misses) pair of answers within a case: the share decided (rewards at least
    `margin` apart) and, of all pairs, the share decided the wrong way (the miss scored higher)."""
    pairs = [good - bad for case in cases for good, meets in case if meets for bad, met in case if not met]
    if not pairs:
        return {"pairs": 0, "decided": 0.0, "wrong_sign": 0.0, "auc": 0.5}
    d = np.array(pairs)
    return {"pairs": len(pairs), "decided": float((np.abs(d) >= max(margin, 1e-9)).mean()),
            "wrong_sign": float((d <= -max(margin, 1e-9)).mean()),
            "auc": float(((d > 0) + 0.5 * (d == 0)).mean())}


@dataclass
class ScorerTrust:
    model: str
    mode: ScorerMode
    margin: float  # the reward gap a pair of answers needs; a group of K needs rollouts.group_margin(margin, K)
    cases: int
    measured: dict[str, float]  # pairs, decided, wrong_sign, auc at the margin (scenario left out of each fit)
    length_auc: float  # the trivial baseline: the shorter answer ranked higher
    seconds_per_answer: float
    created: float = field(default_factory=time.time)


def measure(rewards: list[list[tuple[float, bool]]], lengths: list[list[int]], model: str, max_wrong_sign: float,
            seconds_per_answer: float) -> ScorerTrust:
    """Choose the margin and the mode from rewards of the labeled cases' answers (each from a fit
    that did not see the case's scenario)."""
    margin = next((m for m in MARGINS if pair_metrics(rewards, m)["wrong_sign"] <= max_wrong_sign), 1.0)
    at = pair_metrics(rewards, margin)
    mode: ScorerMode = "trusted" if margin < 1.0 and at["decided"] >= MIN_DECIDED else "untrusted"
    shorter = [[(-float(n), ok) for n, (_, ok) in zip(ns, case)] for ns, case in zip(lengths, rewards)]
    return ScorerTrust(model=model, mode=mode, margin=margin, cases=len(rewards), measured=at,
                       length_auc=round(pair_metrics(shorter, 0.0)["auc"], 3), seconds_per_answer=round(seconds_per_answer, 3))


def auc_needed(accepted: int, rejected: int, z: float = SIGNAL_Z) -> float:
    """The AUC a ranking of `accepted` + `rejected` answers must reach to beat chance at `z` (SIGNAL_Z)."""
    return 0.5 + z * float(np.sqrt((accepted + rejected + 1) / (12 * accepted * rejected)))


def signal(x: np.ndarray, ok: np.ndarray, folds: int = FOLDS, components: int = COMPONENTS) -> tuple[float, float]:
    """Does a fit see this user's verdicts? x (n, PLAIN + n_embd) the judged answers' features, ok
    (n,) accepted or not. Each answer's P(accepted) from a fit on the other folds, and that ranking's
    AUC against the verdicts: (that AUC, the AUC needed: auc_needed)."""
    p = cross_val_probs(x, np.where(ok, 1, -1), plain=PLAIN, k=folds, components=components)[:, 2]  # (n,)
    return pair_metrics([list(zip(p.tolist(), ok.tolist()))], 0.0)["auc"], auc_needed(int(ok.sum()), int((~ok).sum()))


def histories(cases: list[dict[str, Any]], history: int = HISTORY) -> Iterator[tuple[dict[str, Any], np.ndarray, slice]]:
    """Each case with at least `history` earlier cases of its scenario (one simulated user's
    history, in file order): (the case, its earlier cases' answers (m,), its own answers), each as
    indices into every case's answers in order."""
    starts = np.cumsum([0] + [len(c["answers"]) for c in cases])
    for i, c in enumerate(cases):
        earlier = [j for j in range(i) if cases[j]["scenario"] == c["scenario"]]
        if len(earlier) >= history:
            yield c, np.concatenate([np.arange(starts[j], starts[j + 1]) for j in earlier]), slice(starts[i], starts[i + 1])


def user_rewards(x: np.ndarray, meets: np.ndarray, cases: list[dict[str, Any]], history: int = HISTORY,
                 components: int = COMPONENTS) -> list[list[tuple[float, bool]]]:
    """Per case with at least `history` earlier cases of its scenario (one simulated user's history,
    in file order): each answer's P(accepted) from a fit on that user's earlier answers only, as
    (reward, meets) pairs. x (n, PLAIN + n_embd) and meets (n,): every case's answers, in order."""
    out = []
    for _, idx, now in histories(cases, history):
        if len(set(meets[idx].tolist())) < 2:  # one kind of answer seen: nothing to rank by
            out.append([(0.5, bool(m)) for m in meets[now]])
            continue
        model = fit(x[idx], np.where(meets[idx], 1, -1), plain=PLAIN, components=min(components, len(idx) - 1))
        out.append(list(zip(predict(model, x[now])[:, 2].tolist(), meets[now].tolist())))
    return out


def load_cases(path: Path = CASES) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def per_case(cases: list[dict[str, Any]], rewards: np.ndarray, meets: np.ndarray) -> list[list[tuple[float, bool]]]:
    """Rewards and labels of every answer, in case order, (answers,) each, regrouped case by case."""
    starts = np.cumsum([0] + [len(c["answers"]) for c in cases])
    return [list(zip(rewards[a:b].tolist(), meets[a:b].tolist())) for a, b in zip(starts[:-1], starts[1:])]


@dataclass
class UserFit:
    """The scorer's fit on one user's judged answers (`Scorer.user_fit`), and whether it sees them."""
    model: dict[str, list] | None  # None: too few verdicts each way, or a fit that ranks them no better than chance
    accepted: int
    rejected: int
    cv_auc: float | None = None  # each judged answer ranked by a fit on the others (`signal`); None: not fitted
    needed_auc: float | None = None  # what that AUC must reach (auc_needed)


def _render(engine: Any, evidence: list[str], question: str, answer: str) -> str:
    return engine.template.render([{"role": "system", "content": SYSTEM},
                                   {"role": "user", "content": prompt_text(evidence, question, answer)}])


class Scorer:
    """Scores answers with a judge's background context (base weights); fits and measures itself
    once per model file on the shipped cases and caches that under $CLAWD_HOME/judge/."""

    def __init__(self, judge: Any, cache_dir: Path, max_wrong_sign: float, cases: Path = CASES):
        self.judge, self.cache_dir, self.max_wrong_sign, self.cases_path = judge, cache_dir, max_wrong_sign, cases
        # the cases' digest, read once: the key is asked for at every status poll and idle tick
        self._cases_sha = hashlib.sha256(cases.read_bytes()).hexdigest()
        self._trust: ScorerTrust | None = None
        self._memo: dict[tuple, list[float]] = {}  # `_features` under _memo_evidence
        self._memo_evidence: tuple[str, ...] = ()
        self.progress: dict[str, Any] | None = None

    def features(self, evidence: list[str], question: str, answer: str,
                 cancel: threading.Event | None = None) -> list[float]:
        """What the fit reads, by FEATURES: `probe`'s log-odds, then the four contrasts (each
        log-ratio of `contrast`, summed and per token), then `probe`'s hidden state."""
        probe = self.probe(evidence, question, answer, cancel) if "probe" in FEATURES else []
        contrast = self.contrasts(evidence, question, answer, cancel) if "contrast" in FEATURES else []
        return probe[:1] + contrast + probe[1:]

    def contrasts(self, evidence: list[str], question: str, answer: str,
                  cancel: threading.Event | None = None) -> list[float]:
        """`contrast`'s two log-ratios as the fit reads them: each summed over the answer, then per token."""
        plain, neutral, n = self.contrast(evidence, question, answer, cancel)
        return [plain, plain / max(n, 1), neutral, neutral / max(n, 1)]

    def probe(self, evidence: list[str], question: str, answer: str,
              cancel: threading.Event | None = None) -> list[float]:
        """log P(yes) − log P(no) as the reply's first word (either case), then the hidden state
        there at the judge's layer, (n_embd,): 1 + n_embd floats."""
        text = _render(self.judge.engine, evidence, question, answer)
        lp = self.judge.choice_logps(text, ["Yes", "yes", "No", "no"], cancel)
        odds = float(np.logaddexp(lp[0], lp[1]) - np.logaddexp(lp[2], lp[3]))
        layer = self.judge.layer
        hidden = self.judge.context.hidden(self.judge.engine.tokenize(text), (layer,), cancel)[layer]  # one token's work
        return [odds, *hidden.tolist()]

    def contrast(self, evidence: list[str], question: str, answer: str,
                 cancel: threading.Event | None = None) -> tuple[float, float, int]:
        """How much more likely the user's quoted words make this answer, base weights: log P(answer |
        question told them) minus log P(answer | the question alone), then minus log P(answer |
        question told a remark that asks for nothing, NEUTRAL: what any remark does, e.g. favor
        shorter answers), and the answer's tokens. Each log P is a sum over the answer's tokens,
        (T,), one forward pass per prompt."""
        engine = self.judge.engine
        tokens = engine.llm.tokenize(_cut(answer, ANSWER_CHARS).encode("utf-8"), add_bos=False, special=False)
        if not tokens:
            return 0.0, 0.0, 0

        def lp(said: list[str] | None) -> float:
            q = _cut(question, 2 * QUESTION_CHARS)
            if said is not None:
                q += "\n\n(Earlier, I said about your answers:\n" + "\n".join(f'- "{e}"' for e in said) + ")"
            prompt = engine.tokenize(engine.template.render([{"role": "user", "content": q}]))
            return self.judge.context.score(prompt, [tokens], cancel)[0]

        told = lp(evidence)
        return told - lp(None), told - lp([NEUTRAL]), len(tokens)

    def case_features(self, cases: list[dict[str, Any]], cancel: threading.Event | None = None,
                      on_case: Callable[[int, dict[str, Any]], None] | None = None,
                      read: Callable[..., list[float]] | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Every labeled answer's features (`read`, default `features`), in case order: x (answers,
        d), meets (answers,) and each answer's scenario; `on_case(i, case)` hears each case done."""
        read = read or self.features
        xs, meets, groups = [], [], []
        for i, case in enumerate(cases):
            for a in case["answers"]:
                xs.append(read(case["evidence"], case["question"], a["text"], cancel))
                meets.append(bool(a["meets"]))
                groups.append(case["scenario"])
            if on_case is not None:
                on_case(i, case)
        return np.array(xs), np.array(meets), groups

    def user_fit(self, evidence: list[str], labeled: list[tuple[str, str, bool]],
                 cancel: threading.Event | None = None) -> UserFit:
        """This user's fit: features of each (question, answer, accepted) they judged, read with
        today's `evidence`; its model is None until MIN_EACH answers of each kind exist and the
        fit sees their verdicts (`signal`)."""
        ok = np.array([a for _, _, a in labeled], dtype=bool)
        out = UserFit(None, int(ok.sum()), int((~ok).sum()))
        if out.accepted < MIN_EACH or out.rejected < MIN_EACH:
            return out
        x = np.array([self._features(evidence, q, a, cancel) for q, a, _ in labeled])
        out.cv_auc, out.needed_auc = (round(v, 3) for v in signal(x, ok))
        if out.cv_auc >= out.needed_auc:
            out.model = fit(x, np.where(ok, 1, -1), plain=PLAIN, components=min(COMPONENTS, len(ok) - 1))
        return out

    def reward(self, user: dict[str, list], evidence: list[str], question: str, answer: str,
               cancel: threading.Event | None = None) -> float:
        """P(this user accepts the answer), in (0, 1), from their fit (`user_fit`)."""
        return float(predict(user, np.array([self.features(evidence, question, answer, cancel)]))[0, 2])

    def _features(self, evidence: list[str], question: str, answer: str, cancel: threading.Event | None) -> list[float]:
        """`features` of a judged answer, remembered while the evidence stays the same: each job
        refits on mostly the same answers, and reading them again would cost a forward pass each."""
        key = (tuple(evidence), question, answer)
        if key[0] != self._memo_evidence:
            self._memo, self._memo_evidence = {}, key[0]
        if key not in self._memo:
            self._memo[key] = self.features(evidence, question, answer, cancel)
        return self._memo[key]

    def _key(self) -> str:
        model = self.judge.engine.model_path
        st = model.stat()
        blob = json.dumps([VERSION, model.name, st.st_size, st.st_mtime_ns, SYSTEM, prompt_text(["x"], "q", "a"),
                           self._cases_sha, self.max_wrong_sign, COMPONENTS, FEATURES, NEUTRAL, HISTORY])
        return "scorer-" + hashlib.sha256(blob.encode()).hexdigest()[:24]

    def cached(self) -> ScorerTrust | None:
        if self._trust is None:
            path = self.cache_dir / f"{self._key()}.json"
            if path.is_file():
                try:
                    self._trust = ScorerTrust(**json.loads(path.read_text()))
                except (ValueError, TypeError):
                    path.unlink(missing_ok=True)
        return self._trust

    def trust(self, cancel: threading.Event | None = None) -> ScorerTrust:
        """This model's fit and trust: cached, or measured now (background work, minutes on CPU)."""
        cached = self.cached()
        if cached is not None:
            return cached
        cases = load_cases(self.cases_path)
        log.info("fitting and measuring the GRPO scorer on %d labeled cases with %s: once per model file", len(cases),
                 self.judge.engine.model_path.name)
        t0 = time.perf_counter()

        def done(i: int, _case: dict[str, Any]) -> None:
            self.progress = {"measuring": i + 1, "of": len(cases)}

        x, ok, _ = self.case_features(cases, cancel, done)
        rewards = user_rewards(x, ok, cases)
        scored = [c for i, c in enumerate(cases) if sum(d["scenario"] == c["scenario"] for d in cases[:i]) >= HISTORY]
        lengths = [[len(a["text"]) for a in c["answers"]] for c in scored]
        t = measure(rewards, lengths, self.judge.engine.model_path.name, self.max_wrong_sign,
                    (time.perf_counter() - t0) / max(len(ok), 1))
        self.cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.cache_dir / f".{self._key()}.tmp"
        tmp.write_text(json.dumps(asdict(t)))
        os.replace(tmp, self.cache_dir / f"{self._key()}.json")
        self._trust, self.progress = t, None
        log.info("GRPO scorer on %s: %s (margin %.2f: %.0f%% of %d pairs decided, %.1f%% the wrong way; AUC %.2f, "
                 "answer length alone %.2f)", t.model, t.mode, t.margin, 100 * t.measured["decided"],
                 t.measured["pairs"], 100 * t.measured["wrong_sign"], t.measured["auc"], t.length_auc)
        return t

    def summary(self) -> dict[str, Any]:
        """What status shows."""
        t = self.cached()
        if t is not None:
            return asdict(t)
        return {"mode": "measuring" if self.progress else "not measured yet", "progress": self.progress}
