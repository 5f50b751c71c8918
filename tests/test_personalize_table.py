"""The README's learning table (bench/personalize/table.py), from hand-built run summaries."""

import json

import pytest

from bench.personalize.table import off_defaults, pooled, table

pytestmark = pytest.mark.fast  # no model, no daemon


def column(form, form_gain, adherence_gain, wrong, words, lost=(), coins=(), degenerate=0.0):
    return {"form": [form, 0, 0], "form_gain": form_gain, "gain": adherence_gain, "wrong": wrong,
            "measures": {"words": words}, "probes_lost": list(lost), "lost_coin_tosses": list(coins),
            "degenerate": degenerate}


def test_a_row_per_loop_run_with_its_share_of_the_scenarios_oracle(tmp_path):
    from clawd.config import Settings

    defaults = {k: f.default for k, f in Settings.model_fields.items() if k in ("train_method", "lr", "grpo_minibatch", "grpo_answer_mean")}
    base = column(0.5, [0, 0, 0], [0, 0, 0], 0.25, 95)
    run = {"scenario": "no_lists", "seed": 1, "feedback_turns": 24, "settings": defaults | {"lr": 5e-4},
           "columns": {"no_lists": {"base": base, "loop": column(0.8, [0.3, 0.1, 0.5], [0.05, -0.1, 0.2], 0.4, 60.4,
                                                                   lost=("a", "b"), coins=("b",))}}}
    oracle = {"columns": {"base": base, "oracle": column(0.9, [0.4, 0.2, 0.6], [0.2, 0.05, 0.4], 0.5, 50)}}
    (tmp_path / "run.json").write_text(json.dumps(run))
    (tmp_path / "personalize-no_lists-oracle-seed0-pairs-lr-5e-4.json").write_text(json.dumps(oracle))
    no_loop = {"scenario": "no_lists", "seed": 0, "columns": {"no_lists": {"base": base}}}  # an oracle-only run: no row
    (tmp_path / "other.json").write_text(json.dumps(no_loop))

    lines = table([tmp_path / "run.json", tmp_path / "other.json"], tmp_path).splitlines()
    assert len(lines) == 3 and lines[1].count("---") == lines[0].count(" | ") + 1
    assert lines[2] == ("| no_lists | 1 | 24 | lr 0.0005 | 0.50 → 0.80 (+0.30 [+0.10, +0.50]) | +0.40, +0.20 | 75%, 25% "
                        "| +0.05 [-0.10, +0.20] | 0.25 → 0.40 | 95 → 60 | 2 (1) | 0.00 |")
    # an oracle gain whose interval reaches 0 is no scale: that share is left out
    oracle["columns"]["oracle"]["gain"] = [0.04, -0.1, 0.17]
    (tmp_path / "personalize-no_lists-oracle-seed0-pairs-lr-5e-4.json").write_text(json.dumps(oracle))
    assert "| +0.40, +0.04 | 75%, – |" in table([tmp_path / "run.json"], tmp_path)
    (tmp_path / "personalize-no_lists-oracle-seed0-pairs-lr-5e-4.json").unlink()  # no oracle: no share
    assert "| – | – |" in table([tmp_path / "run.json"], tmp_path)


def test_the_control_users_row_names_what_drifted_anywhere(tmp_path):
    moved, still = column(0.5, [0, 0, 0], [0.3, 0.1, 0.5], 0.25, 60), column(0.5, [0, 0, 0], [0.1, -0.1, 0.3], 0.25, 90)
    base = column(0.5, [0, 0, 0], [0, 0, 0], 0.25, 95)
    run = {"scenario": "control", "seed": 0, "feedback_turns": 16, "settings": {"grpo_answer_mean": True},
           "columns": {"brevity": {"base": base, "loop": moved}, "no_lists": {"base": base, "loop": still},
                       "control": {"base": base, "loop": column(0.9, [0, 0, 0], [0, 0, 0], 0.7, 29, lost=("x",))}}}
    (tmp_path / "control.json").write_text(json.dumps(run))
    line = table([tmp_path / "control.json"], tmp_path).splitlines()[2]
    assert line == ("| control | 0 | 16 | defaults | drift outside the interval: brevity +0.30 | – | – | +0.00 [+0.00, +0.00] "
                    "| 0.25 → 0.70 | 95 → 90 | 1 (0) | 0.00 |")


def test_runs_from_before_grpo_was_a_method_read_as_grpo():
    from clawd.config import Settings

    d = {k: f.default for k, f in Settings.model_fields.items()}
    assert off_defaults(d) == "defaults"
    # the groups alone, as they were asked for until grpo was the default, four groups a step
    old = d | {"train_method": "rl", "w_rl": 0.0, "train_minibatch": 4}
    del old["grpo_minibatch"]
    assert off_defaults(old) == "grpo_minibatch 4"
    assert off_defaults(d | {"train_method": "combined", "grpo_length_neutral": True}) == \
        "train_method combined, grpo_length_neutral True"
    # a run from before grpo_answer_mean was a setting trained with the token mean
    before = dict(d)
    del before["grpo_answer_mean"]
    assert off_defaults(before) == "grpo_answer_mean False"


def test_a_run_is_paired_with_the_oracle_of_its_own_users(tmp_path):
    """Users 2 (who refuse empty answers) since stop 49, when grpo runs began: a summary without
    the field is read as users 2 if its method is grpo, else as users 1, as every oracle before it."""
    base = column(0.5, [0, 0, 0], [0, 0, 0], 0.25, 95)
    loop = column(0.8, [0.3, 0.1, 0.5], [0, 0, 0], 0.4, 60)
    old_users = {"scenario": "no_lists", "seed": 0, "feedback_turns": 16, "settings": {}, "method": "combined",
                 "columns": {"no_lists": {"base": base, "loop": loop}}}
    new_users = old_users | {"method": "grpo"}
    (tmp_path / "old.json").write_text(json.dumps(old_users))
    (tmp_path / "new.json").write_text(json.dumps(new_users))
    (tmp_path / "personalize-no_lists-oracle-seed0-pairs-a.json").write_text(json.dumps(
        {"columns": {"oracle": column(0.9, [0.6, 0.3, 0.9], [0, 0, 0], 0.5, 50)}}))
    share = {p: table([tmp_path / p], tmp_path).splitlines()[2].split(" | ")[5:7] for p in ("old.json", "new.json")}
    assert share == {"old.json": ["+0.60, +0.00", "50%, –"], "new.json": ["–", "–"]}
    (tmp_path / "personalize-no_lists-oracle-seed0-pairs-b.json").write_text(json.dumps(
        {"users": 2, "columns": {"oracle": column(0.9, [0.4, 0.2, 0.6], [0, 0, 0], 0.5, 50)}}))
    assert table([tmp_path / "new.json"], tmp_path).splitlines()[2].split(" | ")[5:7] == ["+0.40, +0.00", "75%, –"]
    assert table([tmp_path / "old.json"], tmp_path).splitlines()[2].split(" | ")[5:7] == ["+0.60, +0.00", "50%, –"]


def test_pooled_rows_average_the_runs_given_and_take_the_shares_of_those_means(tmp_path):
    """Issue 28's target is the mean of 2 seeds against the oracle: (0.10 + 0.20) / 2 = 0.15 of an
    oracle's +0.25 is 60%. The control user, with no form and no oracle, has no pooled row."""
    base = column(0.5, [0, 0, 0], [0, 0, 0], 0.25, 95)

    def run(seed, form_gain, gain, lost, degenerate):
        loop = column(0.8, [form_gain, 0, 0], [gain, 0, 0], 0.4, 60, lost=lost, degenerate=degenerate)
        return {"scenario": "one_paragraph", "seed": seed, "feedback_turns": 24, "settings": {}, "method": "grpo",
                "columns": {"one_paragraph": {"base": base, "loop": loop}}}

    served = run(1, 0.2, 0.2, (), 0.04)  # a run from stop 62 on: its answers as served too
    served["columns"]["one_paragraph"]["loop"]["served"] = {"degenerate": 0.0}
    for name, s in {"a.json": run(0, 0.3, 0.1, ("x",), 0.0), "b.json": served,
                    "c.json": {"scenario": "control", "seed": 0, "columns": {"control": {"base": base, "loop": base}}}}.items():
        (tmp_path / name).write_text(json.dumps(s))
    (tmp_path / "personalize-one_paragraph-oracle-seed0-pairs-x.json").write_text(json.dumps(
        {"users": 2, "columns": {"oracle": column(0.9, [0.5, 0.3, 0.7], [0.25, 0.1, 0.4], 0.3, 80)}}))
    lines = pooled([tmp_path / n for n in ("a.json", "b.json", "c.json")], tmp_path).splitlines()
    assert len(lines) == 3 and lines[1].count("---") == lines[0].count(" | ") + 1
    assert lines[2] == "| one_paragraph | 2 (0, 1) | +0.25 | +0.15 | +0.50, +0.25 | 50%, 60% | 1, 0 | 0.00, 0.04 (0.00) |"
    assert table([tmp_path / "b.json"], tmp_path).splitlines()[2].endswith("| 0 (0) | 0.04 (0.00) |")


def test_the_oracle_is_the_mean_of_its_seeds_at_one_setting(tmp_path):
    """Seeds 0 and 1 at one setting give (+0.40 + +0.20) / 2 = +0.30 form, and their bounds averaged
    ([+0.25, +0.55] and [+0.05, +0.35] → [+0.15, +0.45]); a seed at another setting is not counted.
    An adherence gain one seed's interval keeps above 0 and the other's does not averages to
    [−0.025, …]: reaching 0, no share."""
    base = column(0.5, [0, 0, 0], [0, 0, 0], 0.25, 95)
    run = {"scenario": "one_paragraph", "seed": 0, "feedback_turns": 24, "settings": {}, "method": "grpo",
           "columns": {"one_paragraph": {"base": base, "loop": column(0.8, [0.15, 0, 0.3], [0.1, 0, 0.2], 0.3, 70)}}}
    (tmp_path / "run.json").write_text(json.dumps(run))
    for seed, form, adh, setting in ((0, [0.4, 0.25, 0.55], [0.3, 0.1, 0.5], "pairs-a-users2"),
                                     (1, [0.2, 0.05, 0.35], [0.1, -0.15, 0.3], "pairs-a-users2"),
                                     (2, [0.9, 0.8, 1.0], [0.9, 0.8, 1.0], "pairs-b-users2")):
        (tmp_path / f"personalize-one_paragraph-oracle-seed{seed}-{setting}.json").write_text(json.dumps(
            {"users": 2, "columns": {"oracle": column(0.9, form, adh, 0.3, 80)}}))
    cells = table([tmp_path / "run.json"], tmp_path).splitlines()[2].split(" | ")[5:7]
    assert cells == ["+0.30, +0.20", "50%, –"]
