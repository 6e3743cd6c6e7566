"""The incremental watcher decides exactly as the rules did when they re-read the whole
history at every step (``rules_before_watcher.py``, the frozen oracle).

At every step of every history, every rule's decision (continue included, with its
evidence) must be equal: the control is cut at the step as replay and a lock-stepped
Monitor saw it. Histories: the example logs (each with and without each control log),
healthy noisy runs with each rule's trip injected at several steps, and random rows of
every figure the rules read (NaN, inf, strings, booleans and gaps included).

The oracle is compared on the rules whose meaning has not changed since it was frozen
(``UNCHANGED``), over rows logged at every trainer step that hold every figure (a figure
the oracle saw missing is given as None: "not a number", which both read alike). Issue 18
changed the others (``score_collapse`` and ``constant_advantage`` judge a run against its
own history; new rules; streaks, windows and grace count trainer steps, and a row
without a rule's figures is passed over), so for every rule the watcher is also compared
with a fresh watcher replaying the whole history up to each step (``rule(history)``):
state carried from step to step must decide as a replay from the start does.
"""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gapwatch.correction import names as N
from gapwatch.orchestrator import rules
from gapwatch.orchestrator.watch.logs import read_log

from . import rules_before_watcher as before
from .histories import healthy

Row = dict[str, Any]
LOGS = Path(__file__).resolve().parents[2] / "examples" / "logs"
ALL_NAMES = sorted(set().union(*(before.required_metrics(n) for n in before.names())))
UNCHANGED = frozenset(
    {"length_runaway", "post_tool_tail_growth", "ess_collapse", "gap_vs_control", "non_finite"}
)
"""Rules whose decisions the frozen oracle still defines (see the module docstring)."""
SETTINGS: list[dict[str, Any]] = [
    {},
    {n: {"grace": 0} for n in before.names()},
    {
        "score_collapse": {"k": 1, "control_margin": 0.05, "drop": 0.05},
        "constant_advantage": {"k": 1, "saturation": None, "frac": 0.5},
        "entropy_collapse": {"frac": 0.9, "k": 1},
        "length_collapse": {"frac": 0.9, "k": 1},
        "kl_blowup": {"factor": 1.5, "min_kl": None, "window": 2, "k": 1},
        "grad_norm_blowup": {"factor": 1.5, "window": 2, "k": 1},
        "ess_collapse": {"baseline_steps": None, "k": 1, "floor": 0.9},
        "post_tool_tail_growth": {"factor": 1.5, "window": 2, "baseline_steps": 1, "k": 1},
        "length_runaway": {"clip_level": 0.05, "budget_frac": 0.2},
        "gap_vs_control": {"ratio": 1.5, "min_gap": 0.0},
    },
]


def stopping(settings_: dict[str, Any]) -> dict[str, Any]:
    """``settings_`` with ``post_tool_tail_growth`` stopping and ``length_runaway``'s clip
    test on the clip ratio alone, as when the oracle was frozen (the tail rule warns by
    default now, and the clip test waits for the score since issue 28; the oracle knows
    neither ``action`` nor ``improving``)."""
    tail = settings_.get("post_tool_tail_growth") or {}
    length = settings_.get("length_runaway") or {}
    return {
        **settings_,
        "post_tool_tail_growth": {**tail, "action": "stop"},
        "length_runaway": {**length, "improving": None},
    }


def oracle_settings(settings_: dict[str, Any]) -> dict[str, Any]:
    """``settings_`` for the frozen oracle, on top of today's defaults: the defaults were
    recalibrated (bench/calibrate_rules.py) after the oracle was frozen, and the test is
    about how rules are evaluated, not which thresholds they hold."""
    new = {r.name: r for r in rules.build().rules}
    out: dict[str, Any] = {}
    for old in before.build().rules:
        if old.name not in new or old.name not in UNCHANGED:
            continue
        knows = {f.name for f in dataclasses.fields(old) if f.init}
        cur = new[old.name]
        params = {f.name: getattr(cur, f.name) for f in dataclasses.fields(cur) if f.name in knows}
        out[old.name] = {**params, **settings_.get(old.name, {})}
    return out


def complete(rows: list[Row]) -> list[Row]:
    """Every row holding every figure the oracle reads (None where it had none)."""
    return [{**dict.fromkeys(ALL_NAMES), **r} for r in rows]


def compare(hist: list[Row], control: list[Row] | None, settings_: dict[str, Any]) -> int:
    """Assert old == new at every step (the rules the oracle still defines, on complete
    rows), and the watcher == a replay from the start for every rule; return how many
    non-continue decisions there were."""
    hist = complete(hist)
    control = None if control is None else complete(control)
    old_rules = [r for r in before.build(oracle_settings(settings_)).rules if r.name in UNCHANGED]
    new_rules = rules.build(stopping(settings_)).rules
    fired = replayed(hist, control, new_rules)
    w = rules.build(stopping(settings_)).watch()
    fed = 0
    fired = 0
    for i, row in enumerate(hist):
        ctl = None
        if control is not None:
            ctl = [c for c in control if c["step"] <= row["step"]]
            for c in ctl[fed:]:
                w.control(c)
            fed = len(ctl)
        w.step(row)
        for old in old_rules:
            want = old(hist[: i + 1], ctl)
            got = w.last[old.name]
            assert (got.action, got.rule, got.step, got.evidence) == (
                want.action,
                want.rule,
                want.step,
                want.evidence,
            ), f"step {row['step']}, rule {old.name}"
            fired += want.action != "continue"
    return fired


def replayed(hist: list[Row], control: list[Row] | None, rs: tuple[rules.Rule, ...]) -> int:
    """Assert the watcher's decision at every step equals the rule's over the history up to
    that step replayed from its start; return how many were not continue."""
    w = rules.RuleSet(rs).watch()
    fed = fired = 0
    for i, row in enumerate(hist):
        ctl = None
        if control is not None:
            ctl = [c for c in control if c["step"] <= row["step"]]
            for c in ctl[fed:]:
                w.control(c)
            fed = len(ctl)
        w.step(row)
        for rule in rs:
            want, got = rule(hist[: i + 1], ctl), w.last[rule.name]
            assert got == want, f"step {row['step']}, rule {rule.name}"
            fired += want.action != "continue"
    return fired


def _logs() -> list[tuple[str, list[Row]]]:
    out = []
    for p in sorted(LOGS.iterdir()):
        if p.suffix in (".jsonl", ".csv"):
            out.append((p.name, read_log(p).rows))
    return out


LOG_ROWS = _logs()
CONTROLS = [(n, r) for n, r in LOG_ROWS if "dense" in n]


@pytest.mark.parametrize("settings_", SETTINGS, ids=["defaults", "no-grace", "touchy"])
@pytest.mark.parametrize(("name", "hist"), LOG_ROWS, ids=[n for n, _ in LOG_ROWS])
def test_example_logs(name: str, hist: list[Row], settings_: dict[str, Any]) -> None:
    fired = compare(hist, None, settings_)
    for _, ctl in CONTROLS:
        fired += compare(hist, ctl, settings_)
    if "compressed" in name or "quant2" in name:
        assert fired > 0  # the comparison covered decisions, not only "continue"


TRIPS: dict[str, Row] = {
    "score": {N.SCORE_MEAN: -0.1},
    "margin": {N.SCORE_MEAN: 0.05},
    "entropy": {N.ENTROPY: 1e-4, N.GRAD_NORM: 1e4, N.KL_TO_REF: 50.0, N.RESPONSE_LENGTH_MEAN: 0.5},
    "length": {N.CLIP_RATIO: 0.9, N.RESPONSE_LENGTH_MEAN: 500.0},
    "advantage": {N.ZERO_ADV_FRAC: 1.0, N.SCORE_MEAN: -0.1, N.SCORE_MIN: -0.1, N.SCORE_MAX: -0.1},
    "tail": {N.tail("post_tool", "p95"): 0.9},
    "ess": {N.ess("post_tool"): 0.05},
    "nan": dict.fromkeys(ALL_NAMES, math.nan),
}


@pytest.mark.parametrize("trip", sorted(TRIPS))
@pytest.mark.parametrize("at", [1, 4, 12])
def test_healthy_runs_with_a_trip_injected(trip: str, at: int) -> None:
    for seed in range(3):
        rng = random.Random(seed)
        ctl = healthy(rng, steps=30)
        hist = [{**r, **TRIPS[trip]} if r["step"] >= at else r for r in healthy(rng, 30)]
        if trip == "nan":  # a NaN spell that ends
            hist = [{**r, **TRIPS[trip]} if at <= r["step"] < at + 3 else r for r in hist]
        for s in SETTINGS:
            compare(hist, ctl, s)
            compare(hist, None, s)
    # the control is behind, then missing steps: only what was reported is compared
    gappy = [r for r in healthy(random.Random(9), 30) if r["step"] % 3]
    compare(hist, gappy, SETTINGS[0])


cell = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.none(),
    st.text(max_size=2),
    st.booleans(),
    st.integers(-5, 5),
)
rows_ = st.lists(st.dictionaries(st.sampled_from(ALL_NAMES), cell), min_size=1, max_size=14)


@settings(max_examples=60, deadline=None)
@given(rows_, rows_, st.sampled_from([0, 1, 2]), st.integers(1, 3))
def test_any_values(rows: list[Row], ctl_rows: list[Row], which: int, skip: int) -> None:
    ctl = [{"step": i + 1, **r} for i, r in enumerate(ctl_rows)]
    every = [{"step": i + 1, **r} for i, r in enumerate(rows)]
    compare(every, ctl, SETTINGS[which])
    compare(every, None, SETTINGS[which])
    # logged every skip-th step, rows missing figures: the watcher against a replay
    sparse = [{"step": i * skip + 1, **r} for i, r in enumerate(rows)]
    rs = rules.build(SETTINGS[which]).rules
    replayed(sparse, ctl, rs)
    replayed(sparse, None, rs)
