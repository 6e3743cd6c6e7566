"""A sign counts only with broken learning (issue 28, item 5): ``length_collapse``,
``entropy_collapse``, ``kl_blowup``, ``grad_norm_blowup`` and ``length_runaway``'s clip
test stop only while the score is not improving, in the run's own units; where no score is
logged the reports say so. (Scale and logging-interval invariance of the condition: the
hypothesis tests of ``test_rule_invariance.py``, which cover every rule.)"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from gapwatch.correction import names as N
from gapwatch.orchestrator import rules

from .histories import Row, healthy

ROOT = Path(__file__).resolve().parents[2]

# each sign rule, the figure it reads, a healthy level and the level of its sign
SIGNS = {
    "length_collapse": (N.RESPONSE_LENGTH_MEAN, 200.0, 10.0),
    "entropy_collapse": (N.ENTROPY, 0.8, 0.02),
    "kl_blowup": (N.KL_TO_REF, 0.05, 20.0),
    "grad_norm_blowup": (N.GRAD_NORM, 0.02, 2.0),
}


def _run(rule: str, at: int, score: str, steps: int = 120) -> list[Row]:
    """A healthy run whose sign comes at step ``at``; its score from there: ``level``
    (as before), ``rising`` (up by 0.005 a step, a tenth of the step noise), ``jump``
    (up 0.3 with the sign), ``falls`` (rises with the sign, back to its old level 15
    steps later), or ``none`` (no score logged)."""
    figure, ok, sign = SIGNS[rule]
    rows = healthy(random.Random(5), steps)
    for r in rows:
        s = r["step"]
        r[figure] = ok if s < at else sign
        if score == "rising" and s >= at:
            r[N.SCORE_MEAN] += 0.005 * (s - at) + 0.15
        elif (score == "jump" and s >= at) or (score == "falls" and at <= s < at + 15):
            r[N.SCORE_MEAN] += 0.3
        if score == "none":
            for k in (N.SCORE_MEAN, N.SCORE_STD, N.SCORE_MIN, N.SCORE_MAX):
                r.pop(k)
    return rows


def _stop(rule: rules.Rule, hist: list[Row]) -> rules.Decision | None:
    w = rules.RuleSet((rule,)).watch()
    for row in hist:
        for d in w.step(row):
            if d.action == "stop":
                return d
    return None


@pytest.mark.parametrize("name", sorted(SIGNS))
def test_a_sign_with_the_score_level_stops_and_with_the_score_rising_does_not(name: str) -> None:
    rule = rules.get(name)
    at = 70  # past grad_norm_blowup's 50-step early window
    level = _stop(rule, _run(name, at, "level"))
    lag = rule.window // 2 + 8  # the sign's own smoothing (grad_norm_blowup: a 50-step median)
    assert level is not None and at <= level.step <= at + lag, level
    ev = level.evidence
    assert ev["score_since_sign"] - ev["early_score"] <= ev["early_score_sd"]  # not improving
    for score in ("rising", "jump"):
        assert _stop(rule, _run(name, at, score)) is None, score
    # improving: None judges the sign alone, as before
    assert _stop(rules.get(name, improving=None), _run(name, at, "jump")) is not None
    # the score rises with the sign, then falls back to its old level: stopped after the fall
    fell = _stop(rule, _run(name, at, "falls"))
    assert fell is not None and fell.step >= at + 15, fell


@pytest.mark.parametrize("name", sorted(SIGNS))
def test_without_a_score_the_sign_alone_decides_and_the_reports_say_so(name: str) -> None:
    hist = _run(name, 70, "none")
    assert _stop(rules.get(name), hist) is not None
    have = {k for r in hist for k in r} - {"step"}
    why = rules.RuleSet((rules.get(name),)).caveats(have)[name]
    assert "no score" in why and N.SCORE_MEAN in why
    assert rules.RuleSet((rules.get(name),)).caveats(have | {N.SCORE_MEAN}) == {}


def test_the_level_before_a_smoothed_sign_is_read_before_the_figure_changed() -> None:
    """Found by the logging-interval property test: the gradient norm jumps 150x at step
    41 and the score rises back to its early level with it. The norm's 10-step median
    crosses at step 46, so "the 10 steps before the sign" were half before the jump and
    half after: their median and spread put the test exactly on its line, and the same
    run logged every 2nd step was decided the other way. The reference now ends before
    the smoothing window that made the crossing: the score rose from it, the run is
    spared, and both logs agree."""
    rows = []
    for s in range(1, 81):
        score, norm = (0.0, 0.0) if s < 26 else (-1 / 7, 0.2) if s < 41 else (0.0, 30.0)
        rows.append({"step": s, N.SCORE_MEAN: score, N.SCORE_STD: 0.0, N.GRAD_NORM: norm})
    rule = rules.get("grad_norm_blowup", window=10, baseline_steps=10)
    assert _stop(rule, rows) is None
    assert _stop(rule, [r for r in rows if r["step"] % 2 == 0]) is None
    # the same jump with the score held at its level before the jump: stopped, both ways
    flat = [{**r, N.SCORE_MEAN: -1 / 7} if r["step"] >= 26 else r for r in rows]
    dense, sparse = _stop(rule, flat), _stop(rule, [r for r in flat if r["step"] % 2 == 0])
    assert dense is not None and sparse is not None and abs(dense.step - sparse.step) < 4


def test_a_trl_run_whose_norm_grows_as_learning_begins_is_not_stopped() -> None:
    # issue 28: every group scored alike at first (norms ~0.02, reward flat), then learning
    # began: the norm ~2 (100x) while the reward rose
    rng = random.Random(7)
    hist = []
    for s in range(1, 201):
        learning = s >= 60
        score = 0.1 + (0.004 * (s - 60) if learning else 0.0) + rng.gauss(0, 0.02)
        hist.append({"step": s, N.SCORE_MEAN: score, N.SCORE_STD: 0.3,
                     N.GRAD_NORM: (2.0 if learning else 0.02) * (1 + rng.gauss(0, 0.1))})  # fmt: skip
    assert _stop(rules.get("grad_norm_blowup"), hist) is None
    flat = [{**r, N.SCORE_MEAN: 0.1 + rng.gauss(0, 0.02)} for r in hist]
    assert _stop(rules.get("grad_norm_blowup"), flat) is not None


def test_the_clip_test_needs_the_score_before_the_cut_and_is_off_without_a_score() -> None:
    rule = rules.get("length_runaway", budget_frac=None)
    # nearly every answer cut from step 10, the score level: stopped
    cut = [
        {**r, N.CLIP_RATIO: 0.95 if r["step"] >= 10 else 0.01} for r in healthy(random.Random(3))
    ]
    d = _stop(rule, cut)
    assert d is not None and d.step == 11 and "score_before_sign" in d.evidence
    # the same, the score rising with the cut (learning at the cap): spared
    rising = [{**r, N.SCORE_MEAN: r[N.SCORE_MEAN] + 0.3 * (r["step"] >= 10)} for r in cut]
    assert _stop(rule, rising) is None
    # cut from the first step: no level before the cut, left to length_at_cap (a warning
    # at step 20, a stop at its patience's end)
    capped = [{**r, N.CLIP_RATIO: 0.95} for r in healthy(random.Random(3))]
    assert _stop(rule, capped) is None
    assert _stop(rules.get("length_at_cap", patience=40), capped) is not None
    # cut from the start, flickering about the level (a real healthy run: 0.875 / 1.0):
    # the sign restarts, but the run did not run to the cap, it started there
    flicker = [{**r, N.CLIP_RATIO: 1.0 if r["step"] % 3 else 0.875} for r in capped]
    assert _stop(rule, flicker) is None
    # the same flicker after three uncut steps: a run that ran to the cap, not learning
    ran = [{**r, N.CLIP_RATIO: 0.01} if r["step"] <= 3 else r for r in flicker]
    assert _stop(rule, ran) is not None
    # no score logged: the clip test is off, and the reports say so
    no_score = [{k: v for k, v in r.items() if k != N.SCORE_MEAN} for r in cut]
    assert _stop(rule, no_score) is None
    have = {k for r in no_score for k in r} - {"step"}
    assert "clip test" in rules.RuleSet((rule,)).caveats(have)["length_runaway"]


def test_replay_and_names_say_which_rules_judge_a_sign_without_a_score(tmp_path: Path) -> None:
    log = tmp_path / "noscore.jsonl"
    rows = _run("length_collapse", 30, "none", steps=40)
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    gw = [str(Path(sys.executable).with_name("gapwatch"))]
    out = subprocess.run([*gw, "replay", str(log), "--json"], capture_output=True, text=True,
                         cwd=ROOT, check=True)  # fmt: skip
    caveats = json.loads(out.stdout)["caveats"]
    assert "length_collapse" in caveats and "no score" in caveats["length_collapse"]
    names = subprocess.run([*gw, "names", str(log)], capture_output=True, text=True, cwd=ROOT,
                           check=True)  # fmt: skip
    assert "alone: length_collapse: no score" in names.stdout
