"""ui.data: the tables and figures the pages show, on plain rows (no Streamlit, no DB)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from gapwatch.correction import names
from gapwatch.store.schema import INTERRUPTED
from gapwatch.ui import data


def run(rid: int, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": rid, "sweep_id": 1, "trial_id": f"t{rid}", "role": "treatment",
        "pair_key": "s1", "seed": 1, "compression": "q2", "correction": "none",
        "config": {"steps": 20}, "status": "completed", "stop_rule": None,
        "stop_step": None, "error": None, "last_step": 20, "attempts": 1,
    }  # fmt: skip
    base.update(kw)
    return base


RUNS = [
    run(1, role="control", compression="none", correction="none"),
    run(2, status="stopped", stop_rule="score_collapse", stop_step=6, last_step=6),
    run(3, correction="tis", attempts=2),
    run(4, seed=2, pair_key="s2", role="control", compression="none"),
    run(
        5,
        seed=2,
        pair_key="s2",
        status="stopped",
        stop_rule="length_runaway",
        stop_step=8,
        last_step=8,
    ),
    run(6, seed=2, pair_key="s2", correction="tis", status="failed", error="boom", last_step=3),
]
LATEST: dict[int, dict[str, float | None]] = {
    1: {names.SCORE_MEAN: 0.5, names.PROBS_DIFF_MEAN: 0.006},
    2: {names.SCORE_MEAN: -0.1, names.PROBS_DIFF_MEAN: 0.6},
    3: {names.SCORE_MEAN: 0.3, names.PROBS_DIFF_MEAN: None},
    4: {names.SCORE_MEAN: 0.7, names.PROBS_DIFF_MEAN: 0.004},
    5: {names.SCORE_MEAN: -0.1, names.PROBS_DIFF_MEAN: float("nan")},
}


def test_runs_table_columns_and_values() -> None:
    t = data.runs_table(RUNS, LATEST)
    assert list(t["id"]) == [1, 2, 3, 4, 5, 6]
    row = t.set_index("id").loc[2]
    assert row["stop rule"] == "score_collapse" and row["stop step"] == 6
    assert row["steps used"] == 6 and row["budget"] == 20
    assert row["used/budget"] == pytest.approx(0.3)
    assert row["last score"] == -0.1
    # NaN and missing latest values become empty cells, not NaN strings
    assert pd.isna(t.set_index("id").loc[5]["last gap"])
    assert pd.isna(t.set_index("id").loc[6]["last score"])
    assert t.set_index("id").loc[1]["run"] == "#1 dense control s1"
    # a trial started again after its node was lost says so
    assert list(t["attempts"]) == [1, 1, 2, 1, 1, 1]


def test_steps_saved_sums_budget_minus_stop_step() -> None:
    t = data.runs_table(RUNS, LATEST)
    assert data.steps_saved(t) == (20 - 6) + (20 - 8)
    # a run a person stopped (Ctrl-C) saved nothing by early stopping
    t.loc[t["stop rule"] == "score_collapse", "stop rule"] = INTERRUPTED
    assert data.steps_saved(t) == 20 - 8
    assert list(data.stopped_by_rule(t)) == [False, False, False, False, True, False]


def test_filter_and_sort() -> None:
    t = data.runs_table(RUNS, LATEST)
    assert set(data.filter_runs(t, statuses=["stopped"])["id"]) == {2, 5}
    assert set(data.filter_runs(t, text="LENGTH_run")["id"]) == {5}
    assert set(data.filter_runs(t, roles=["control"], corrections=["none"])["id"]) == {1, 4}
    s = data.sort_runs(t, "last score", descending=True)
    assert list(s["id"])[:2] == [4, 1] and pd.isna(s["last score"].iloc[-1])
    with pytest.raises(ValueError, match="cannot sort by 'nope'"):
        data.sort_runs(t, "nope")


def test_sweeps_table_counts_by_status() -> None:
    sweeps = [
        {"id": 1, "name": "a", "status": "running", "created": None},
        {
            "id": 2,
            "name": "b",
            "status": "completed",
            "created": None,
            "run_counts": {"completed": 2},
        },
    ]
    t = data.sweeps_table(sweeps, RUNS).set_index("id")
    assert t.loc[1, "runs"] == 6 and t.loc[1, "stopped"] == 2 and t.loc[1, "failed"] == 1
    assert t.loc[2, "runs"] == 0
    t2 = data.sweeps_table(sweeps).set_index("id")
    assert t2.loc[2, "completed"] == 2 and t2.loc[1, "runs"] == 0


def test_ecdf_from_payload() -> None:
    e = data.ecdf_frame(
        {"scheme": "x", "keys": [1, 2, 3], "counts": [1, 1, 2], "upper": [0.1, 0.2, 0.4]}
    )
    assert list(e["value"]) == [0.1, 0.2, 0.4]
    assert list(e["cdf"]) == [0.25, 0.5, 1.0]
    assert data.ecdf_frame({"counts": [], "upper": []}).empty
    with pytest.raises(ValueError, match="same length"):
        data.ecdf_frame({"counts": [1], "upper": [0.1, 0.2]})


def test_default_and_nearest_steps() -> None:
    assert data.default_steps([5, 1, 3, 9, 7]) == [1, 5, 9]
    assert data.default_steps([2]) == [2]
    assert data.default_steps([]) == []
    assert data.nearest_step([1, 4, 8], 6) == 4
    assert data.nearest_step([1, 4, 8], 7) == 8
    assert data.nearest_step([], 3) is None


def test_series_frame_keeps_non_finite_as_gaps() -> None:
    pts = [
        {"run_id": 2, "name": "a", "step": 2, "value": None, "flag": "nan"},
        {"run_id": 2, "name": "a", "step": 1, "value": 1.5, "flag": None},
        {"run_id": 1, "name": "a", "step": 1, "value": 0.5, "flag": None},
    ]
    df = data.series_frame(pts, {2: "two"})
    assert list(df["run"]) == ["#1", "two", "two"]
    assert list(df["step"]) == [1, 1, 2]
    assert math.isnan(df["value"].iloc[2])
    bad = data.non_finite_summary(df)
    assert bad.to_dict("records") == [
        {"run": "two", "name": "a", "count": 1, "steps": "2", "flag": "nan"}
    ]


def test_small_helpers() -> None:
    assert data.parse_int_list("3, 1,x,,2") == [3, 1, 2]
    assert data.parse_int_list(None) == []
    assert data.pair_of(RUNS[1], RUNS) == [2, 1]
    assert data.pair_of(RUNS[0], RUNS) == [1]
    assert data.step_budget({"steps": 30}) == 30
    assert data.step_budget({"steps": True}) is None
    assert data.step_budget(None) is None


def test_pair_index_agrees_with_pair_of() -> None:
    index = data.pair_index(RUNS)
    assert index == {int(r["id"]): data.pair_of(r, RUNS) for r in RUNS}
    assert index[5] == [5, 4] and index[4] == [4]


def test_auto_points_and_ecdf_thinning() -> None:
    assert data.auto_points(1) == data.MAX_POINTS
    assert data.auto_points(10) == data.POINTS_PER_CHART // 10
    assert data.auto_points(1000) == data.MIN_POINTS
    e = data.ecdf_frame({"counts": [1] * 1000, "upper": [float(i + 1) for i in range(1000)]})
    t = data.thin_ecdf(e, 50)
    assert len(t) == 50
    assert t["value"].iloc[0] == 1.0 and t["value"].iloc[-1] == 1000.0 and t["cdf"].iloc[-1] == 1.0
    assert t["cdf"].is_monotonic_increasing
    assert data.thin_ecdf(e.head(10), 50).equals(e.head(10))


def test_sweep_times() -> None:
    from datetime import datetime

    t = [datetime(2026, 1, 1, h) for h in range(6)]
    runs = [
        {"sweep_id": 1, "started": t[1], "ended": t[3]},
        {"sweep_id": 1, "started": t[0], "ended": t[4]},
        {"sweep_id": 2, "started": t[2], "ended": None},
        {"sweep_id": 2, "started": t[1], "ended": t[5]},
    ]
    assert data.sweep_times(runs) == {1: (t[0], t[4]), 2: (t[1], None)}


def test_turn_profile_averages_each_bucket_over_steps_and_skips_non_finite() -> None:
    t1, t5 = names.by_turn(names.PROBS_DIFF_MEAN, "1"), names.by_turn(names.PROBS_DIFF_MEAN, "5+")
    pts = [
        (1, t1, 1, 0.1, None), (1, t1, 2, 0.3, None), (1, t5, 1, float("nan"), "nan"),
        (1, t5, 2, 0.6, None), (2, t1, 1, 0.05, None), (1, names.SCORE_MEAN, 1, 0.5, None),
    ]  # fmt: skip
    frame = data.series_frame(pts, {1: "a", 2: "b"})
    prof = data.turn_profile(frame, {t1: "1", t5: "5+"})
    got = {(r.run, r.turn): (r.gap, r.steps) for r in prof.itertuples()}
    assert got == {
        ("a", "1"): (pytest.approx(0.2), 2), ("a", "5+"): (pytest.approx(0.6), 1),
        ("b", "1"): (pytest.approx(0.05), 1),
    }  # fmt: skip
    assert list(prof[prof["run"] == "a"]["turn"]) == ["1", "5+"]  # bucket order
    assert data.turn_profile(frame, {}).empty
