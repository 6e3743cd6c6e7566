"""The sweep page's model: every table and chart it shows, built from the store once
per query TTL (``model`` is cached), so that a rerun of a 1,000-run sweep's page (a
filter, a sort, a reload) only filters and draws.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import streamlit as st

from gapwatch.correction import names
from gapwatch.store.identity import VOID_PAIR
from gapwatch.ui import board, charts, data, source, sweep_charts

GAP_POINTS = 200
"""Points per run behind the leaderboard's mean gap (downsampled in the database)."""
SPREAD_TITLE = "Final score per strategy: each run (tick), min-max (line), mean (diamond)"


@dataclass
class Model:
    """Everything the sweep page shows that comes from the store."""

    table: pd.DataFrame
    """``ui.data.runs_table`` plus the ``open`` and ``pair view`` links."""
    ranked: pd.DataFrame
    """``ui.board.leaderboard``."""
    board_views: list[charts.Spec]
    """The final score's spread per strategy and, once runs have a score and a gap, final
    score against mean gap per run."""
    threshold_views: dict[str, list[charts.Spec]]
    """Per varying threshold (``"topk(keep=0.05) + tis: C"``), its three views; empty when
    no threshold varies. The page draws one at a time: three views, not three per
    threshold, whatever the sweep."""
    threshold_notes: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    """One line per failed run: its label and its error."""
    void: list[str] = field(default_factory=list)
    """One line per void pair (its control stopped by a rule): the stored reason."""
    void_runs: int = 0
    """Runs of void pairs, left out of the leaderboard."""
    decisions: pd.DataFrame = field(default_factory=pd.DataFrame)


@st.cache_data(ttl=source.TTL_S, show_spinner=False)
def chart(m: Model, threshold: str | None) -> charts.Spec:
    """The page's one chart: the leaderboard's views, then ``threshold``'s three views
    (one embed for both: each costs the browser about 0.1 s)."""
    rows = [m.board_views]
    if threshold is not None:
        rows.append(m.threshold_views[threshold])
    return charts.grid(rows, independent=("color", "shape", "strokeDash"))


def model(url: str, sweep_id: int) -> Model | None:
    """The sweep's tables and charts (None when it has no run yet)."""
    run_rows = source.runs(url, sweep_id)
    if not run_rows:
        return None
    ids = tuple(int(r["id"]) for r in run_rows)
    latest = source.latest(url, ids, (data.LAST_SCORE, data.LAST_GAP))
    table = data.runs_table(run_rows, latest)
    pairs = data.pair_index(run_rows)
    table["open"] = [f"run?run={i}" for i in table["id"]]
    table["pair view"] = ["compare?runs=" + ",".join(map(str, pairs[int(i)])) for i in table["id"]]
    gaps = source.series(url, ids, (names.PROBS_DIFF_MEAN,), GAP_POINTS, ())
    mean_gap = gaps.groupby("run_id")["value"].mean().to_dict() if not gaps.empty else {}
    decs = [d for d in source.decisions(url, None, sweep_id) if d.get("action") != "continue"]
    # a pair whose control stopped has no healthy reference: its runs rank nothing
    void_ids = {int(d["run_id"]) for d in decs if d.get("rule") == VOID_PAIR}
    void = [
        str((d.get("evidence") or {}).get("reason") or f"run #{d['run_id']}: pair void")
        for d in decs
        if d.get("rule") == VOID_PAIR and d.get("action") == "warn"
    ]
    ranked = board.leaderboard(table[~table["id"].isin(void_ids)], mean_gap)
    points = board.seed_points(table)
    order = list(ranked["strategy"])
    views = [sweep_charts.spread_chart(points, order, field="score", title=SPREAD_TITLE)]
    outcome = pd.DataFrame(
        {
            "run": table["run"],
            "strategy": points["strategy"],
            "status": table["status"],
            "score": table["last score"],
            "gap": [mean_gap.get(int(i)) for i in table["id"]],
        }
    )
    if not outcome.dropna(subset=["score", "gap"]).empty:
        views.append(sweep_charts.outcome_chart(outcome, width=420))
    frame, notes = board.threshold_outcomes(run_rows, table)
    ctl = ranked[ranked["strategy"] == board.CONTROL]
    control = {
        "survived": None if ctl.empty else board.finite(ctl["steps survived"].iloc[0]),
        "score": None if ctl.empty else board.finite(ctl["final score"].iloc[0]),
    }
    threshold_views = {
        f"{group}: {param}": sweep_charts.threshold_views(part, control)
        for (group, param), part in frame.groupby(["group", "param"], sort=True)
    }
    failed = [
        f"{data.run_label(r)} failed: {r.get('error') or 'no error text stored'}"
        for r in run_rows
        if r.get("status") == "failed"
    ]
    labels = {int(r["id"]): data.run_label(r) for r in run_rows}
    decisions = pd.DataFrame(
        [
            {
                "run": labels.get(int(d["run_id"]), f"#{d['run_id']}"),
                "step": d["step"],
                "rule": d["rule"],
                "action": d["action"],
                "open": f"run?run={d['run_id']}",
            }
            for d in decs
        ],
        columns=["run", "step", "rule", "action", "open"],
    )
    return Model(
        table=table,
        ranked=ranked,
        board_views=views,
        threshold_views=threshold_views,
        threshold_notes=notes,
        failed=failed,
        void=void,
        void_runs=len(void_ids),
        decisions=decisions,
    )
