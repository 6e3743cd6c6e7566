"""bench/lead_time_bench.py: its pieces (held values, quantile, first fire, scoring of
leads and false fires) on hand-made series, and a smoke run of the bench on a slice of
the ground truth (thresholds from seed 0's healthy runs, figures on seeds 1-2)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .grid_slice import bench_module, grid_slice

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> Any:
    return bench_module("lead_time_bench")


lt = _bench()


def test_held_values_quantile_and_first_fire() -> None:
    s = [(1, 0.1), (2, 0.9), (3, 0.2), (4, 0.8), (5, 0.9), (6, 0.1)]
    # held 2 steps: a one-step spike (step 2) does not count, steps 4-5 do
    assert lt.sustained(s, 2, up=True) == [(2, 0.1), (3, 0.2), (4, 0.2), (5, 0.8), (6, 0.1)]
    assert lt.first_fire(lt.sustained(s, 2, up=True), 0.5, up=True) == 5
    assert lt.first_fire(s, 0.5, up=True) == 2
    assert lt.first_fire(lt.sustained(s, 2, up=False), 0.15, up=False) is None
    assert lt.sustained(s, 1, up=True) == s
    vals = [0.3, 0.1, 0.9, 0.5, 0.7, 0.2]
    for q in (0.05, 0.5, 0.8, 0.95):
        assert lt.quantile(vals, q) == pytest.approx(float(np.quantile(vals, q)))


def test_lead_scoring_counts_each_control_once() -> None:
    import detection_bench as db

    def run(key: str, role: str, collapsed: bool, onset: int | None) -> Any:
        r = db.Run(key, role, key.split("/")[0], None, [], 0)
        r.collapsed, r.onset = collapsed, onset
        return r

    runs = [
        run("a/s0-control", "control", False, None),
        run("b/s0-control", "control", False, None),  # the same control in a second sweep
        run("a/s0-a-x", "treatment", True, 8),
        run("a/s0-a-y", "treatment", True, 6),
        run("a/s0-a-z", "treatment", True, 9),
        run("a/s0-a-h", "treatment", False, None),
    ]
    fires = {"a/s0-a-x": 5, "a/s0-a-y": 9, "b/s0-control": 3, "a/s0-a-h": 12}
    score = lt.lead("x", "", fires, runs)
    assert score.collapses == 3 and score.leads == [-3, 3]
    assert score.before == 1 and score.change_before == 1  # fired at step 5, after step 4
    assert (score.false_controls, score.controls) == (0, 1)  # the first copy is counted
    assert (score.false_treatments, score.treatments) == (1, 1)
    assert "| 2 of 3 | +0 | +3 | 33% | 0 | 33% | 0 of 1 | 1 of 1 |" in score.row()


def test_lead_time_bench_smoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    truth = grid_slice(tmp_path, seeds=[0, 1, 2], strengths=["topk_keep0.5", "topk_keep0.05"],
                       corrections=["none", "icepop_hi1.25_lo0.8", "k3_rs_hi0.1"])  # fmt: skip
    out = tmp_path / "lead.md"
    monkeypatch.setattr(sys, "argv", ["lead_time_bench.py", "--truth", str(truth), "--quick",
                                      "--out", str(out)])  # fmt: skip
    assert lt.main() == 0
    text = out.read_text()
    for head in ("### Raw signals", "### Rules, each alone", "### Warn set against stop set",
                 "### By codec strength"):  # fmt: skip
        assert head in text
    table = [ln for ln in text.splitlines() if ln.startswith("| ")]
    named = {ln.split(" | ")[0].lstrip("| ") for ln in table}
    assert "tail/abs_log_ratio/post_tool/p95 growth" in named
    assert "rule gap_vs_control" in named and "stop set (today's defaults; first stop)" in named
    # gap_vs_control warns at the first step of every compressed run: all collapses
    gap = next(ln for ln in table if ln.startswith("| rule gap_vs_control |"))
    fired, of = gap.split(" | ")[2].split(" of ")
    assert fired == of and int(of) > 0
    with pytest.raises(SystemExit):
        monkeypatch.setattr(sys, "argv", ["lead_time_bench.py", "--quantile", "2"])
        lt.main()


def test_drift_families_are_measured_where_the_ground_truth_logs_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drift grid logs the ref_drift and PPO-ratio figures: they get thresholds and
    rows; the full grid predates them, and the same signals are left out there."""
    drift = ROOT / "bench" / "results" / "ground_truth" / "drift"
    rows: dict[str, set[str]] = {}
    for name, grid in (("drift", drift), ("full", None)):
        dest = tmp_path / name
        dest.mkdir()
        kw = {"grid": grid} if grid else {}
        truth = grid_slice(dest, seeds=[0, 1], strengths=["topk_keep0.05", "topk_keep0.5"],
                           corrections=["none", "tis_C2"], **kw)  # fmt: skip
        out = tmp_path / f"{name}.md"
        monkeypatch.setattr(sys, "argv", ["lead_time_bench.py", "--truth", str(truth),
                                          "--quick", "--out", str(out)])  # fmt: skip
        assert lt.main() == 0
        rows[name] = {ln.split(" | ")[0].lstrip("| ") for ln in out.read_text().splitlines()
                      if ln.startswith("| ")}  # fmt: skip
    drift_names = {"tail/ref_drift/abs_log_ratio/post_tool/p95", "ess/ppo/post_tool",
                   "actor/ref_log_ratio_mean/post_tool"}  # fmt: skip
    assert drift_names <= rows["drift"]
    assert not drift_names & rows["full"]
    assert "tail/abs_log_ratio/post_tool/p95" in rows["full"] & rows["drift"]
