"""Rule presets (``rules: {preset: ranking}``, ``{preset: warn}``): what they set, how a
section overrides them, one-line errors through the real CLI, the ranking preset on
recorded runs of the ground truth (a stall the defaults stop is kept; a dead run is stopped
with its leaderboard score at the dead level), and the warn preset (warns before the stop
set would stop, never stops)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gapwatch.correction import names as N
from gapwatch.orchestrator import rules
from gapwatch.orchestrator.cli import app
from gapwatch.orchestrator.rules import presets
from gapwatch.orchestrator.sweep.config import load_sweep_config
from gapwatch.orchestrator.watch.replay import ruleset_for

ROOT = Path(__file__).resolve().parents[2]
GRID = ROOT / "bench" / "results" / "ground_truth" / "grid"
SWEEP = {
    "name": "t",
    "env": "mul",
    "seeds": [0],
    "steps": 3,
    "compression": [{"codec": "topk", "keep": 0.5}],
    "correction": ["none", "icepop"],
}


def history(run: str) -> list[dict[str, Any]]:
    lines = gzip.decompress((GRID / f"{run}.jsonl.gz").read_bytes()).decode().splitlines()
    return [json.loads(x) for x in lines if x.strip()]


def first_stop(ruleset: rules.RuleSet, run: str, control: str) -> int | None:
    w = ruleset.watch()
    for row in history(control):
        w.control(row)
    for row in history(run):
        w.step(row)
        if w.first_stop is not None:
            return w.first_stop.step
    return None


def test_ranking_preset_sets_its_rules() -> None:
    ranking = rules.build({"preset": "ranking"})
    by_name = {r.name: r for r in ranking.rules}
    assert not {"score_collapse", "post_tool_tail_growth", "ess_collapse"} & set(by_name)
    assert by_name["constant_advantage"].params()["k"] == 5
    assert {"non_finite", "length_runaway"} <= set(by_name)  # dead-run guards kept
    assert rules.build({"preset": "default"}) == rules.build()


def test_section_overrides_preset() -> None:
    s = rules.build({"preset": "ranking", "constant_advantage": {"frac": 0.8},
                     "score_collapse": {"enabled": True, "k": 4}, "length_runaway": None})  # fmt: skip
    by_name = {r.name: r for r in s.rules}
    assert by_name["constant_advantage"].params()["k"] == 5  # the preset's, kept
    assert by_name["constant_advantage"].params()["frac"] == 0.8
    assert by_name["score_collapse"].params()["k"] == 4
    # the preset's own table is untouched by a build that overrides it
    assert presets.PRESETS["ranking"]["score_collapse"] == {"enabled": False}


@pytest.mark.parametrize(
    ("section", "needle"),
    [
        ({"preset": "rank"}, "unknown rules preset 'rank'; valid: default, ranking, warn"),
        ({"preset": 3}, "unknown rules preset 3; valid: default, ranking, warn"),
        ({"preset": "ranking", "constant_advantage": {"kk": 1}}, "unknown parameter 'kk'"),
    ],
)
def test_bad_preset_is_one_line_through_the_cli(
    tmp_path: Path, section: dict[str, Any], needle: str
) -> None:
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(yaml.safe_dump({**SWEEP, "rules": section}))
    res = CliRunner().invoke(app, ["sweep", str(cfg), "--db", f"sqlite:///{tmp_path}/x.db"])
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "Traceback" not in res.output, res.output
    assert lines[0].startswith("error: ") and needle in lines[0]


def test_sweep_yaml_and_replay_config_take_the_preset(tmp_path: Path) -> None:
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(yaml.safe_dump({**SWEEP, "rules": {"preset": "ranking"}}))
    sweep = load_sweep_config(cfg)
    assert rules.build(sweep.config.rules) == rules.build({"preset": "ranking"})
    assert ruleset_for(None, cfg) == rules.build({"preset": "ranking"})


def test_ranking_preset_keeps_a_stall_and_stops_the_dead() -> None:
    # a stall at top-k 50% (last-5 score +0.17, never below 0.05 for good): the defaults'
    # control test stops it at step 16, where its leaderboard score would read +0.03
    stall, stall_ctl = "s3-topk_keep0.5-geo_rs_hi1.001_lo0.999", "s3-control"
    assert first_stop(rules.build(), stall, stall_ctl) is not None
    assert first_stop(rules.build({"preset": "ranking"}), stall, stall_ctl) is None
    # a dead run (collapsed at step 5, every group equal from then on) is stopped, and
    # the last 5 steps before its stop are at the dead level it ends at
    dead, dead_ctl = "s0-topk_keep0.5-tis_C2", "s0-control"
    stop = first_stop(rules.build({"preset": "ranking"}), dead, dead_ctl)
    default = first_stop(rules.build(), dead, dead_ctl)
    assert stop is not None and default is not None and stop > default
    scores = [r[N.SCORE_MEAN] for r in history(dead) if r["step"] <= stop]
    assert sum(scores[-5:]) / 5 < 0.05  # ground_truth.COLLAPSED_BELOW
    defaults_view = [r[N.SCORE_MEAN] for r in history(dead) if r["step"] <= default]
    assert sum(defaults_view[-5:]) / 5 >= 0.05  # the defaults' stop reads it as alive


def test_every_rule_is_named_in_the_presets_table() -> None:
    assert sorted(presets._ALL_RULES) == rules.names()


def first_warning(ruleset: rules.RuleSet, run: str, control: str) -> tuple[int | None, bool]:
    """The step of the run's first warning or stop, and whether anything stopped it."""
    w = ruleset.watch()
    for row in history(control):
        w.control(row)
    first = None
    for row in history(run):
        if w.step(row) and first is None:
            first = int(row["step"])
    return first, w.first_stop is not None


def test_warn_preset_warns_early_and_never_stops() -> None:
    warn = rules.build({"preset": "warn"})
    assert {r.name for r in warn.rules} == {
        "ess_collapse", "constant_advantage", "length_runaway", "non_finite"}  # fmt: skip
    assert all(r.action == "warn" for r in warn.rules)
    # a run the codec kills (top-k 5%, no correction; onset at step 6): warned before
    # the default stop set stops it, and never stopped
    dead, ctl = "s2-topk_keep0.05-none", "s2-control"
    warned, stopped = first_warning(warn, dead, ctl)
    stop = first_stop(rules.build(), dead, ctl)
    assert warned is not None and stop is not None and warned < stop
    assert not stopped
    # a healthy dense control is not warned
    assert first_warning(warn, "s2-control", "s2-control") == (None, False)


def test_action_warn_turns_a_rules_stop_into_a_warning() -> None:
    dead, ctl = "s0-topk_keep0.05-none", "s0-control"
    stop = first_stop(rules.build().select(["score_collapse"]), dead, ctl)
    as_warning = rules.build({"score_collapse": {"action": "warn"}}).select(["score_collapse"])
    assert stop is not None
    assert first_warning(as_warning, dead, ctl) == (stop, False)
    with pytest.raises(ValueError, match="action"):
        rules.build({"score_collapse": {"action": "pause"}})
