"""Strategies across seeds: the leaderboard with its spread, and outcomes by threshold.

Pure pandas over :func:`ui.data.runs_table`'s frame (and the run rows behind it); no
Streamlit, no database.

- :func:`leaderboard`: per strategy (codec + correction, the dense control first) the mean
  over seeds **and the spread** (min and max over seeds) of the final score and of the
  steps survived. With 2 to 8 seeds a mean alone ranks noise, so strategies are ranked by
  final score only where their seed ranges do not overlap: a strategy's rank is 1 + the
  number of strategies whose *worst* seed beats its *best* seed, and ``overlaps with``
  names the strategies it cannot be told apart from.
- :func:`threshold_outcomes`: for each (codec, correction) whose thresholds vary across
  runs (``tis: {C: [1.5, 2, 4]}``), each run's outcome against each varying threshold,
  the values read from the run's stored config (``correction_kwargs``), never its label.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from gapwatch.ui.data import steps_survived, stopped_by_rule

CONTROL = "dense control"
ONE_SEED = "one seed: no spread"
"""What ``overlaps with`` says of a strategy with fewer than two scored runs."""
RAN_TO_END = "ran to the end"
"""The outcome of a run that completed (no rule stopped it)."""

BOARD_COLUMNS = [
    "strategy", "runs", "collapsed", "rank", "final score", "score min", "score max",
    "overlaps with", "steps survived", "steps min", "steps max", "score vs control",
    "mean gap", "gap vs control",
]  # fmt: skip


def strategy(role: Any, codec: Any, correction: Any) -> str:
    """A run's leaderboard key: the dense control, or ``codec + correction``."""
    if role == "control":
        return CONTROL
    return f"{codec or '?'} + {correction or 'none'}"


def finite(v: Any) -> float | None:
    if v is None or pd.isna(v):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def with_strategy(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` plus ``strategy`` and ``survived`` (steps survived) columns."""
    t = table.copy()
    t["strategy"] = [
        strategy(r, c, k) for r, c, k in zip(t["role"], t["codec"], t["correction"], strict=True)
    ]
    survived = [
        steps_survived({"stop step": s, "steps used": u})
        for s, u in zip(t["stop step"], t["steps used"], strict=True)
    ]
    t["survived"] = pd.Series(survived, index=t.index, dtype="float64")
    return t


def _ranks(lo: pd.Series, hi: pd.Series, spread_ok: pd.Series) -> tuple[list[Any], list[str]]:
    """Rank (1 + strategies clearly better) and the names each one overlaps with."""
    names = list(lo.index)
    ranks: list[Any] = []
    overlaps: list[str] = []
    for name in names:
        if not spread_ok[name]:
            ranks.append(None)
            overlaps.append(ONE_SEED)
            continue
        others = [o for o in names if o != name and spread_ok[o]]
        better = sum(1 for o in others if lo[o] > hi[name])
        ranks.append(1 + better)
        same = [o for o in others if lo[o] <= hi[name] and lo[name] <= hi[o]]
        overlaps.append(", ".join(same) if same else "none")
    return ranks, overlaps


def leaderboard(table: pd.DataFrame, mean_gap: Mapping[int, float | None]) -> pd.DataFrame:
    """Correction strategies across seeds, the dense control first as the baseline.

    ``table``: :func:`ui.data.runs_table`'s frame; ``mean_gap``: run id -> the run's mean
    probability gap. Columns (``BOARD_COLUMNS``): strategy, runs, collapsed (stopped by a
    rule or failed / runs; a run a person interrupted is neither), rank and overlaps with
    (see the module docstring), final score (mean) with score min / max over the runs,
    steps survived (mean) with its min / max, score vs control (difference of means), mean
    gap and gap vs control (ratio of means).
    Treatments follow the control by rank, then by mean final score.
    """
    if table.empty:
        return pd.DataFrame(columns=BOARD_COLUMNS)
    t = with_strategy(table)
    t["score"] = pd.Series([finite(v) for v in t["last score"]], index=t.index, dtype="float64")
    t["gap"] = pd.Series(
        [finite(mean_gap.get(int(i))) for i in t["id"]], index=t.index, dtype="float64"
    )
    t["collapsed_flag"] = (t["status"] == "failed") | stopped_by_rule(t)
    g = t.groupby("strategy", sort=True)
    board = pd.DataFrame(
        {
            "runs": g.size(),
            "collapsed_n": g["collapsed_flag"].sum(),
            "final score": g["score"].mean(),
            "score min": g["score"].min(),
            "score max": g["score"].max(),
            "scored": g["score"].count(),
            "steps survived": g["survived"].mean(),
            "steps min": g["survived"].min(),
            "steps max": g["survived"].max(),
            "mean gap": g["gap"].mean(),
        }
    )
    board["collapsed"] = [
        f"{int(c)}/{int(n)}" for c, n in zip(board["collapsed_n"], board["runs"], strict=True)
    ]
    ranks, overlaps = _ranks(board["score min"], board["score max"], board["scored"] >= 2)
    board["rank"] = pd.array(ranks, dtype="Int64")
    board["overlaps with"] = overlaps
    base = board.loc[CONTROL] if CONTROL in board.index else None
    base_score = None if base is None else finite(base["final score"])
    base_gap = None if base is None else finite(base["mean gap"])
    board["score vs control"] = [
        None if base_score is None or finite(s) is None else float(s) - base_score
        for s in board["final score"]
    ]
    board["gap vs control"] = [
        None if not base_gap or finite(x) is None else float(x) / base_gap
        for x in board["mean gap"]
    ]
    board = board.reset_index()
    board["_o"] = [0 if s == CONTROL else 1 for s in board["strategy"]]
    board["_r"] = board["rank"].fillna(10**9)
    board = board.sort_values(
        ["_o", "_r", "final score", "strategy"], ascending=[True, True, False, True],
        na_position="last", kind="stable",
    )  # fmt: skip
    return board[BOARD_COLUMNS].reset_index(drop=True)


def seed_points(table: pd.DataFrame) -> pd.DataFrame:
    """One row per run for the spread chart: strategy, run, seed, score, survived."""
    t = with_strategy(table)
    return pd.DataFrame(
        {
            "strategy": t["strategy"],
            "run": t["run"],
            "seed": t["seed"],
            "score": [finite(v) for v in t["last score"]],
            "survived": t["survived"],
        }
    )


def outcome(status: Any, stop_rule: Any) -> str:
    """How a run ended, for the threshold view: the stop rule, failed, running, or
    ``RAN_TO_END``."""
    if status == "stopped":
        return str(stop_rule or "stopped")
    if status in ("failed", "running"):
        return str(status)
    return RAN_TO_END


def _number(v: Any) -> float | None:
    """A threshold value as a float (None for bools, text and non-finite numbers)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


THRESHOLD_COLUMNS = [
    "group", "codec", "correction", "param", "value", "others", "seed", "run", "id",
    "survived", "score", "outcome",
]  # fmt: skip


def threshold_outcomes(
    runs: Sequence[Mapping[str, Any]], table: pd.DataFrame
) -> tuple[pd.DataFrame, list[str]]:
    """Each treatment run's outcome against each threshold that varies in its group.

    ``runs``: the run rows (their ``config`` holds ``correction`` and
    ``correction_kwargs``, as ``workers.RunConfig`` writes them); ``table``: their
    :func:`ui.data.runs_table`. A group is (codec, correction name); a threshold varies
    when the group's runs hold at least two numeric values of it. ``others``: the group's
    other varying thresholds of the run (``"hi=5"``), so each combination gets its own
    mean line. Returns the frame (``THRESHOLD_COLUMNS``) and notes on runs left out.
    """
    t = with_strategy(table)
    facts = {
        int(i): (seed, run, finite(survived), finite(score), outcome(status, rule))
        for i, seed, run, survived, score, status, rule in zip(
            t["id"], t["seed"], t["run"], t["survived"], t["last score"], t["status"],
            t["stop rule"], strict=True,
        )
    }  # fmt: skip
    rows: list[dict[str, Any]] = []
    groups: dict[tuple[str, str], list[tuple[int, dict[str, float]]]] = {}
    for run in runs:
        rid = int(run["id"])
        if run.get("role") == "control" or rid not in facts:
            continue
        cfg = run.get("config") or {}
        name = str(cfg.get("correction") or run.get("correction") or "none")
        kwargs = cfg.get("correction_kwargs") or {}
        values = {k: x for k, v in kwargs.items() if (x := _number(v)) is not None}
        groups.setdefault((str(run.get("compression") or "?"), name), []).append((rid, values))
    notes: list[str] = []
    for (codec, name), members in sorted(groups.items()):
        params = sorted({k for _, vals in members for k in vals})
        varying = [p for p in params if len({vals[p] for _, vals in members if p in vals}) >= 2]
        for p in varying:
            missing = [rid for rid, vals in members if p not in vals]
            if missing:
                notes.append(
                    f"{codec} + {name}: {len(missing)} run(s) store no {p} in their config "
                    "and are left out of its view"
                )
            for rid, vals in members:
                if p not in vals:
                    continue
                seed, label, survived, score, ended = facts[rid]
                others = ", ".join(f"{q}={vals[q]:g}" for q in varying if q != p and q in vals)
                rows.append(
                    {
                        "group": f"{codec} + {name}", "codec": codec, "correction": name,
                        "param": p, "value": vals[p], "others": others, "seed": seed,
                        "run": label, "id": rid, "survived": survived, "score": score,
                        "outcome": ended,
                    }
                )  # fmt: skip
    return pd.DataFrame(rows, columns=THRESHOLD_COLUMNS), notes


def spans_decades(values: Sequence[float]) -> bool:
    """Whether a threshold axis should be logarithmic: positive values a decade apart."""
    xs = [v for v in values if v is not None]
    return bool(xs) and min(xs) > 0 and max(xs) / min(xs) >= 10
