"""ui.board: the leaderboard's spread and ranks, and outcomes by threshold (plain data)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from gapwatch.correction import names
from gapwatch.store.schema import INTERRUPTED
from gapwatch.ui import board, data


def run(rid: int, seed: int, corr: str, score: float, **kw: Any) -> dict[str, Any]:
    """A treatment (or, with corr "control", a dense control) with its final score."""
    control = corr == "control"
    base: dict[str, Any] = {
        "id": rid, "sweep_id": 1, "trial_id": f"t{rid}", "seed": seed,
        "role": "control" if control else "treatment", "pair_key": f"s{seed}",
        "compression": "none" if control else "q2", "correction": "none" if control else corr,
        "config": {"steps": 20}, "status": "completed", "stop_rule": None, "stop_step": None,
        "error": None, "last_step": 20, "_score": score,
    }  # fmt: skip
    base.update(kw)
    return base


def table(runs: list[dict[str, Any]]) -> pd.DataFrame:
    latest = {int(r["id"]): {names.SCORE_MEAN: r["_score"]} for r in runs}
    return data.runs_table(runs, latest)


# control 0.20-0.30; A 0.25-0.40 overlaps it; B 0.05-0.10 lies below both; C one seed
RUNS = [
    run(1, 0, "control", 0.20), run(2, 1, "control", 0.30), run(3, 2, "control", 0.25),
    run(4, 0, "A", 0.25), run(5, 1, "A", 0.40), run(6, 2, "A", 0.35),
    run(7, 0, "B", 0.05, status="stopped", stop_rule="score_collapse", stop_step=6,
        last_step=6),
    run(8, 1, "B", 0.10), run(9, 2, "B", 0.10),
    run(10, 0, "C", 0.90),
]  # fmt: skip


def test_leaderboard_spread_ranks_and_overlaps() -> None:
    b = board.leaderboard(table(RUNS), {}).set_index("strategy")
    assert list(b.index) == ["dense control", "q2 + A", "q2 + B", "q2 + C"]
    a, bb, c, ctl = b.loc["q2 + A"], b.loc["q2 + B"], b.loc["q2 + C"], b.loc["dense control"]
    assert (a["score min"], a["score max"]) == (0.25, 0.40)
    assert a["final score"] == pytest.approx((0.25 + 0.40 + 0.35) / 3)
    # A's mean beats the control's, but their ranges overlap: one rank, named as overlapping
    assert a["rank"] == ctl["rank"] == 1
    assert a["overlaps with"] == "dense control"
    assert ctl["overlaps with"] == "q2 + A"
    # B's best seed is below the worst of both: ranked below them, overlapping nothing
    assert bb["rank"] == 3 and bb["overlaps with"] == "none"
    # one seed has no spread: no rank, whatever its score
    assert pd.isna(c["rank"]) and c["overlaps with"] == board.ONE_SEED
    assert (bb["steps min"], bb["steps max"], bb["steps survived"]) == (
        6,
        20,
        pytest.approx(46 / 3),
    )
    assert bb["collapsed"] == "1/3"
    # a run a person interrupted (Ctrl-C) is not a collapse
    interrupted = [r if r["id"] != 7 else {**r, "stop_rule": INTERRUPTED} for r in RUNS]
    assert (
        board.leaderboard(table(interrupted), {}).set_index("strategy").loc["q2 + B", "collapsed"]
        == "0/3"
    )
    assert a["score vs control"] == pytest.approx(a["final score"] - ctl["final score"])


def test_leaderboard_gap_ratio_and_empty() -> None:
    gaps = {1: 0.01, 2: 0.01, 3: 0.01, 4: 0.5, 5: 0.3, 6: 0.4}
    b = board.leaderboard(table(RUNS), gaps).set_index("strategy")
    assert b.loc["q2 + A", "gap vs control"] == pytest.approx(40.0)
    assert board.leaderboard(table(RUNS).iloc[0:0], {}).empty
    no_control = board.leaderboard(table(RUNS[3:]), {})
    assert no_control["score vs control"].isna().all()


def threshold_run(
    rid: int, seed: int, corr: str, kw: dict[str, Any], **more: Any
) -> dict[str, Any]:
    r = run(rid, seed, f"{corr}({kw})", more.pop("score", 0.1), **more)
    r["config"] = {"steps": 20, "correction": corr, "correction_kwargs": kw}
    return r


def test_threshold_outcomes_read_the_config_not_the_label() -> None:
    runs = [
        run(1, 0, "control", 0.2),
        threshold_run(2, 0, "tis", {"C": 1.5}, status="stopped", stop_rule="score_collapse",
                      stop_step=6, last_step=6),
        threshold_run(3, 1, "tis", {"C": 1.5}),
        threshold_run(4, 0, "tis", {"C": 4}),
        threshold_run(5, 0, "icepop", {"lo": 0.5, "hi": 5}),
        threshold_run(6, 0, "icepop", {"lo": 0.8, "hi": 5}),
        threshold_run(7, 0, "icepop", {"lo": 0.8, "hi": 2}),
        threshold_run(8, 0, "seq_mis", {"C": 2}),  # one value: nothing varies
        threshold_run(9, 0, "tis", {}),  # the default threshold: not in the config
    ]  # fmt: skip
    frame, notes = board.threshold_outcomes(runs, table(runs))
    tis = frame[frame["param"] == "C"].set_index("id")
    assert sorted(tis.index) == [2, 3, 4]
    assert tis.loc[2, "value"] == 1.5 and tis.loc[2, "outcome"] == "score_collapse"
    assert tis.loc[2, "survived"] == 6 and tis.loc[4, "outcome"] == board.RAN_TO_END
    assert notes == ["q2 + tis: 1 run(s) store no C in their config and are left out of its view"]
    ice = frame[frame["correction"] == "icepop"]
    assert set(ice["param"]) == {"lo", "hi"}  # both vary
    lo = ice[ice["param"] == "lo"].set_index("id")
    assert lo.loc[5, "others"] == "hi=5" and lo.loc[7, "others"] == "hi=2"
    assert "seq_mis" not in set(frame["correction"])
    assert 1 not in set(frame["id"])  # the control has no thresholds


def test_log_axis_only_across_decades() -> None:
    assert board.spans_decades([0.001, 0.01, 0.1])
    assert not board.spans_decades([1.5, 2, 4])
    assert not board.spans_decades([0.0, 0.5])
    assert not board.spans_decades([])
