"""Page 2: one sweep: its runs (filter, sort, pick to compare), the leaderboard of
correction strategies across seeds (mean and spread, the dense control as baseline),
outcomes against each correction threshold the sweep varies, the steps that early
stopping saved, and every warning and stop the rules issued.

Built for sweeps of a thousand runs: everything derived from the store is computed once
per query TTL (``ui.sweep_model``, cached) so a rerun only filters and draws; the runs
table shows 200 rows a page (after filters and sort), in Streamlit's virtualised grid;
the leaderboard's views and the chosen threshold's are one chart.

URL: ``sweep`` (id), ``status``/``role``/``correction`` (comma lists), ``q`` (text),
``sort`` (column), ``desc`` (1 = descending), ``page`` (of the runs table), ``threshold`` (which varying threshold's
views to show, e.g. ``topk(keep=0.05) + icepop: lo``; default the first).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import pandas as pd
import streamlit as st

from gapwatch.correction import names
from gapwatch.ui import data, nav, source
from gapwatch.ui.sweep_model import GAP_POINTS, Model, chart, model

RUN_COLUMNS = [
    "run", "status", "stop rule", "stop step", "attempts", "steps used", "budget", "used/budget",
    "last score", "last gap", "open", "pair view", "role", "seed", "codec", "correction",
    "error",
]  # fmt: skip
FAILURES_SHOWN = 5  # failed runs whose error is spelled out above the table
PAGE_ROWS = 200  # rows per page of the runs table (sorting and filters apply to all runs)


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


def page_of(table: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The page of ``table`` the URL asks for (``page``, PAGE_ROWS rows each), and what it
    shows; a page past the end is reported and the first shown."""
    pages = max(1, math.ceil(len(table) / PAGE_ROWS))
    if pages == 1:
        return table, ""
    wanted = nav.qp_int("page") or 1
    if not 1 <= wanted <= pages:
        st.warning(f"ignoring URL parameter page={wanted}: the table has pages 1-{pages}")
        wanted = 1
    c1, c2 = st.columns([1, 5], vertical_alignment="bottom")
    page = int(c1.number_input("page", min_value=1, max_value=pages, value=wanted, step=1))
    nav.qp_set("page", None if page == 1 else page)
    lo, hi = (page - 1) * PAGE_ROWS, min(page * PAGE_ROWS, len(table))
    c2.caption(f"of {pages}: rows {lo + 1}-{hi} of {len(table)}")
    return table.iloc[lo:hi], f"page {page}: "


def runs_section(m: Model) -> None:
    st.subheader("Runs")
    matching = filters(m.table)
    shown, where = page_of(matching)
    picked = st.dataframe(
        shown,
        hide_index=True,
        on_select="rerun",
        selection_mode="multi-row",
        key=f"runs_table_{where}",
        column_order=RUN_COLUMNS,
        column_config={
            "id": st.column_config.NumberColumn("id", width="small"),
            "attempts": st.column_config.NumberColumn(
                "attempts",
                format="%d",
                width="small",
                help="times the trial's trainer was started (a retry after its node was "
                "lost, a --resume)",
            ),
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
    ids = [int(shown.iloc[i]["id"]) for i in rows if i < len(shown)]
    c1, c2 = st.columns([1, 3])
    too_many = len(ids) > data.MAX_COMPARE
    if c1.button("Compare selected", disabled=not ids or too_many, type="primary"):
        st.switch_page(nav.COMPARE, query_params={"runs": ",".join(map(str, ids))})
    if too_many:
        c2.warning(f"{len(ids)} runs selected: compare draws at most {data.MAX_COMPARE} at once")
    else:
        c2.caption(
            f"{where}{len(shown)} of {len(matching)} matching runs shown ({len(m.table)} in "
            f"the sweep). Select rows to compare them (at most {data.MAX_COMPARE}), or follow "
            "a row's pair link (a treatment with its dense control)."
        )
    for line in m.failed[:FAILURES_SHOWN]:
        st.error(nav.plain(line))
    if len(m.failed) > FAILURES_SHOWN:
        st.caption(
            f"and {len(m.failed) - FAILURES_SHOWN} more failed runs: filter the table by "
            "status failed for their errors"
        )


def leaderboard_section(m: Model) -> None:
    st.subheader("Leaderboard of correction strategies")
    st.dataframe(
        m.ranked,
        hide_index=True,
        column_config={
            "rank": st.column_config.NumberColumn(
                "rank", help="1 + strategies whose worst run beats this one's best run"
            ),
            "final score": st.column_config.NumberColumn(
                "final score", format="%.3f", help="mean over the runs"
            ),
            "score min": st.column_config.NumberColumn(format="%.3f"),
            "score max": st.column_config.NumberColumn(format="%.3f"),
            "overlaps with": st.column_config.TextColumn(
                help="strategies whose score range (min-max over runs) overlaps this one's: "
                "their difference is within seed noise"
            ),
            "steps survived": st.column_config.NumberColumn(format="%.1f"),
            "steps min": st.column_config.NumberColumn(format="%d"),
            "steps max": st.column_config.NumberColumn(format="%d"),
            "score vs control": st.column_config.NumberColumn(format="%+.3f"),
            "mean gap": st.column_config.NumberColumn(format="%.4f"),
            "gap vs control": st.column_config.NumberColumn(format="%.1fx"),
        },
    )
    st.caption(
        "Per strategy over its runs (one per seed): collapsed = stopped or failed; final "
        "score = last `critic/score/mean`, its mean and its min-max; steps survived = stop "
        "step, else the last stored step. Ranked by final score only where ranges do not "
        "overlap: strategies whose min-max ranges overlap share a rank (`overlaps with` "
        "names them), since their difference is within seed noise. Mean gap = mean "
        f"`{names.PROBS_DIFF_MEAN}` over the run (at most {GAP_POINTS} points per run, "
        "downsampled in the database)."
    )
    if m.void_runs:
        st.caption(
            f"{m.void_runs} runs of void pairs (their dense control was stopped by a rule) "
            "are left out of the leaderboard: they have no healthy reference."
        )
    threshold = pick_threshold(m)
    st.vega_lite_chart(chart(m, threshold), width="content")
    for note in m.threshold_notes:
        st.caption(nav.plain(note))


def pick_threshold(m: Model) -> str | None:
    """The varying threshold whose views the chart adds (URL ``threshold``), or None."""
    if not m.threshold_views:
        st.caption(
            "Each strategy's runs (ticks), their min-max (line) and mean (diamond); final "
            "score against mean gap per run. No correction's threshold varies across this "
            "sweep's runs: sweep one (for example `correction: [{name: tis, C: [1.5, 2, "
            "4]}]`) to see the outcome as a function of the threshold."
        )
        return None
    options = list(m.threshold_views)
    wanted = nav.qp_str("threshold")
    if wanted and wanted not in options:
        st.warning(
            f"no threshold {nav.plain(repr(wanted))} varies in this sweep; "
            f"showing {nav.plain(repr(options[0]))}"
        )
    chosen = st.segmented_control(
        "outcome by threshold", options, default=wanted if wanted in options else options[0],
        key="threshold", help="each correction whose threshold varies across the runs",
    )  # fmt: skip
    chosen = chosen or options[0]
    nav.qp_set("threshold", None if chosen == options[0] else chosen)
    st.caption(
        "First row: each strategy's runs (ticks), their min-max (line) and mean (diamond); "
        "final score against mean gap per run. Second row, against the chosen threshold's "
        "value read from each run's stored config (`correction_kwargs`): steps survived "
        "and final score, one point per run coloured by seed and shaped by how it ended, "
        "the line through the seed means, the dense control's mean dashed; and how many "
        "runs ended each way. Log axis where the values span a decade."
    )
    return str(chosen)


def decisions_section(m: Model) -> None:
    st.subheader("Warnings and stops")
    if m.decisions.empty:
        st.caption("No rule has warned about or stopped a run of this sweep.")
        return
    st.dataframe(
        m.decisions,
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
    head.title(f"Sweep {nav.plain(sweep['name'])}")
    created = sweep.get("created")
    when = f"{created:%Y-%m-%d %H:%M UTC}" if isinstance(created, datetime) else created
    st.caption(f"status **{nav.plain(sweep.get('status'))}** · created {nav.plain(when)}")
    m = model(url, int(sweep["id"]))
    if m is None:
        st.info("This sweep has no run recorded yet.")
        return
    table = m.table
    cols = st.columns(5)
    cols[0].metric("runs", len(table))
    cols[1].metric("running", int((table["status"] == "running").sum()))
    cols[2].metric("stopped", int((table["status"] == "stopped").sum()))
    cols[3].metric("failed", int((table["status"] == "failed").sum()))
    cols[4].metric(
        "steps saved by early stopping",
        data.steps_saved(table),
        help="Sum over stopped runs of (step budget - stop step).",
    )
    for line in m.void:
        st.warning(f"Pair void: {nav.plain(line)}")
    runs_section(m)
    leaderboard_section(m)
    decisions_section(m)


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
