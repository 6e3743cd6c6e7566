"""Page 2: one sweep: its runs (filter, sort, pick to compare), the leaderboard of
correction strategies across seeds with the dense control as baseline, the steps that
early stopping saved, and every warning and stop the rules issued.

URL: ``sweep`` (id), ``status``/``role``/``correction`` (comma lists), ``q`` (text),
``sort`` (column), ``desc`` (1 = descending).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pandas as pd
import streamlit as st

from correction import names
from ui import charts, data, nav, source

RUN_COLUMNS = [
    "run", "status", "stop rule", "stop step", "steps used", "budget", "used/budget",
    "last score", "last gap", "open", "pair view", "role", "seed", "codec", "correction",
    "error",
]  # fmt: skip
GAP_POINTS = 200  # points per run behind the leaderboard's mean gap (downsampled in SQL)


def pick_sweep(url: str, where: Any) -> dict[str, Any] | None:
    sweeps = source.sweeps(url)
    if not sweeps:
        st.info("The store holds no sweep yet. Start one with `gapwatch sweep`.")
        return None
    by_id = {int(s["id"]): s for s in sweeps}
    wanted = nav.qp_int("sweep")
    if wanted is not None and wanted not in by_id:
        st.warning(f"sweep {wanted} is not in the store; pick one below")
        wanted = None
    ids = list(by_id)
    chosen = where.selectbox(
        "sweep",
        ids,
        index=ids.index(wanted) if wanted is not None else 0,
        format_func=lambda i: f"{by_id[i]['name']} (#{i}, {by_id[i]['status']})",
    )
    nav.qp_set("sweep", chosen)
    return by_id[int(chosen)]


def filters(table: pd.DataFrame) -> pd.DataFrame:
    c1, c2, c3, c4 = st.columns([2, 2, 2, 3])

    def multi(col: Any, label: str, key: str, options: list[str]) -> list[str]:
        chosen = [x for x in nav.qp_list(key) if x in options]
        got = col.multiselect(label, options, default=chosen, key=f"f_{key}")
        nav.qp_set(key, got)
        return list(got)

    statuses = multi(c1, "status", "status", sorted(table["status"].dropna().unique()))
    roles = multi(c2, "role", "role", sorted(table["role"].dropna().unique()))
    corrs = multi(c3, "correction", "correction", sorted(table["correction"].dropna().unique()))
    text = c4.text_input("search", value=nav.qp_str("q"), key="f_q")
    nav.qp_set("q", text)
    out = data.filter_runs(table, statuses=statuses, roles=roles, corrections=corrs, text=text)

    s1, s2 = st.columns([3, 1])
    sortable = ["(none)", *[c for c in table.columns if c not in ("open", "pair view")]]
    wanted = nav.qp_str("sort")
    col = s1.selectbox(
        "sort by", sortable, index=sortable.index(wanted) if wanted in sortable else 0
    )
    desc = s2.toggle("descending", value=nav.qp_bool("desc"))
    nav.qp_set("sort", None if col == "(none)" else col)
    nav.qp_set("desc", "1" if desc else None)
    return data.sort_runs(out, None if col == "(none)" else col, descending=desc)


def runs_section(url: str, run_rows: list[dict[str, Any]], table: pd.DataFrame) -> None:
    st.subheader("Runs")
    shown = filters(table)
    by_id = {int(r["id"]): r for r in run_rows}
    shown = shown.assign(
        open=[f"run?run={i}" for i in shown["id"]],
        **{
            "pair view": [
                "compare?runs=" + ",".join(str(x) for x in data.pair_of(by_id[int(i)], run_rows))
                for i in shown["id"]
            ]
        },
    )
    picked = st.dataframe(
        shown,
        hide_index=True,
        on_select="rerun",
        selection_mode="multi-row",
        key="runs_table",
        column_order=RUN_COLUMNS,
        column_config={
            "id": st.column_config.NumberColumn("id", width="small"),
            "used/budget": st.column_config.ProgressColumn(
                "used/budget", min_value=0.0, max_value=1.0, format="percent"
            ),
            "last score": st.column_config.NumberColumn("last score", format="%.3f"),
            "last gap": st.column_config.NumberColumn("last gap", format="%.4f"),
            "open": st.column_config.LinkColumn("run page", display_text="open"),
            "pair view": st.column_config.LinkColumn("pair view", display_text="compare"),
        },
    )
    rows = list(picked.selection.rows) if picked is not None else []
    ids = [int(shown.iloc[i]["id"]) for i in rows]
    c1, c2 = st.columns([1, 3])
    if c1.button("Compare selected", disabled=not ids, type="primary"):
        st.switch_page(nav.COMPARE, query_params={"runs": ",".join(map(str, ids))})
    c2.caption(
        f"{len(shown)} of {len(table)} runs shown. Select rows to compare them, "
        "or follow a row's pair link (a treatment with its dense control)."
    )
    for r in run_rows:
        if r.get("status") == "failed":
            st.error(f"{data.run_label(r)} failed: {r.get('error') or 'no error text stored'}")


def leaderboard_section(url: str, run_rows: list[dict[str, Any]], table: pd.DataFrame) -> None:
    st.subheader("Leaderboard of correction strategies")
    ids = tuple(int(r["id"]) for r in run_rows)
    gaps = source.series(url, ids, (names.PROBS_DIFF_MEAN,), GAP_POINTS, ())
    mean_gap = gaps.groupby("run_id")["value"].mean().to_dict() if not gaps.empty else {}
    board = data.leaderboard(table, mean_gap)
    outcome = pd.DataFrame(
        {
            "run": table["run"],
            "strategy": [data.strategy_of(r) for r in run_rows],
            "status": table["status"],
            "score": table["last score"],
            "gap": [mean_gap.get(int(i)) for i in table["id"]],
        }
    )
    st.dataframe(
        board,
        hide_index=True,
        column_config={
            "steps survived": st.column_config.NumberColumn(format="%.1f"),
            "final score": st.column_config.NumberColumn(format="%.3f"),
            "score vs control": st.column_config.NumberColumn(format="%+.3f"),
            "mean gap": st.column_config.NumberColumn(format="%.4f"),
            "gap vs control": st.column_config.NumberColumn(format="%.1fx"),
        },
    )
    st.caption(
        "Per strategy across seeds: collapsed = stopped or failed runs; steps survived = "
        "stop step, else the last stored step; final score = last `critic/score/mean`; "
        f"mean gap = mean `{names.PROBS_DIFF_MEAN}` over the run "
        f"(at most {GAP_POINTS} points per run, downsampled in the database)."
    )
    if outcome.dropna(subset=["score", "gap"]).empty:
        st.caption("No run has both a final score and a gap yet.")
    else:
        st.vega_lite_chart(charts.outcome_chart(outcome), width="stretch")


def decisions_section(url: str, sweep_id: int, run_rows: list[dict[str, Any]]) -> None:
    decs = [d for d in source.decisions(url, None, sweep_id) if d.get("action") != "continue"]
    st.subheader("Warnings and stops")
    if not decs:
        st.caption("No rule has warned about or stopped a run of this sweep.")
        return
    labels = {int(r["id"]): data.run_label(r) for r in run_rows}
    frame = pd.DataFrame(
        [
            {
                "run": labels.get(int(d["run_id"]), f"#{d['run_id']}"),
                "step": d["step"],
                "rule": d["rule"],
                "action": d["action"],
                "open": f"run?run={d['run_id']}",
            }
            for d in decs
        ]
    )
    st.dataframe(
        frame,
        hide_index=True,
        column_config={"open": st.column_config.LinkColumn("run page", display_text="open")},
    )


def body() -> None:
    url = source.db_url()
    source.store()
    head, picker = st.columns([3, 1], vertical_alignment="bottom")
    sweep = pick_sweep(url, picker)
    if sweep is None:
        return
    sweep_id = int(sweep["id"])
    run_rows = source.runs(url, sweep_id)
    head.title(f"Sweep {sweep['name']}")
    created = sweep.get("created")
    when = f"{created:%Y-%m-%d %H:%M UTC}" if isinstance(created, datetime) else created
    st.caption(f"status **{sweep.get('status')}** · created {when}")
    if not run_rows:
        st.info("This sweep has no run recorded yet.")
        return
    ids = tuple(int(r["id"]) for r in run_rows)
    latest = source.latest(url, ids, (data.LAST_SCORE, data.LAST_GAP))
    table = data.runs_table(run_rows, latest)
    m = st.columns(5)
    m[0].metric("runs", len(table))
    m[1].metric("running", int((table["status"] == "running").sum()))
    m[2].metric("stopped", int((table["status"] == "stopped").sum()))
    m[3].metric("failed", int((table["status"] == "failed").sum()))
    m[4].metric(
        "steps saved by early stopping",
        data.steps_saved(table),
        help="Sum over stopped runs of (step budget - stop step).",
    )
    runs_section(url, run_rows, table)
    leaderboard_section(url, run_rows, table)
    decisions_section(url, sweep_id, run_rows)


def live() -> bool:
    try:
        sid = nav.qp_int("sweep")
        return any(
            int(s["id"]) == sid and s.get("status") == "running"
            for s in source.sweeps(source.db_url())
        )
    except Exception:  # noqa: BLE001 - the body reports the error itself
        return False


nav.page_body(body, live=live())
