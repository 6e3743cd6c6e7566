"""Page 4: one run: every metric it has (searchable, with a trend line each, any of them
charted), its config, the decisions the rules took (warnings and the stop) with their
evidence, and the run as a log to download and replay elsewhere (``gapwatch replay``).

URL: ``run`` (id), ``q`` (metric filter), ``m`` (charted metrics, comma list),
``log`` (1 = log y axis).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from gapwatch.correction import names
from gapwatch.ui import charts, data, nav, source

TREND_POINTS = 60  # points per metric in the table's trend column
CHART_POINTS = 1000


def header(url: str, run: dict[str, Any]) -> None:
    st.title(f"Run {nav.plain(data.run_label(run))}")
    budget = data.step_budget(run.get("config"))
    facts = [
        f"role **{nav.plain(run.get('role'))}**",
        f"seed **{nav.plain(run.get('seed'))}**",
        f"codec **{nav.plain(run.get('compression'))}**",
        f"correction **{nav.plain(run.get('correction'))}**",
        f"status **{nav.plain(run.get('status'))}**",
        f"steps **{nav.plain(run.get('last_step'))}**" + (f" of {budget}" if budget else ""),
    ]
    st.markdown(" · ".join(facts))
    if run.get("status") == "stopped":
        st.warning(
            f"stopped at step {run.get('stop_step')} by rule **{nav.plain(run.get('stop_rule'))}** "
            "(its evidence: the decisions tab)"
        )
    if run.get("status") == "failed":
        st.error(f"this run failed: {nav.plain(run.get('error') or 'no error text stored')}")
    others = source.runs(url, int(run["sweep_id"]))
    pair = data.pair_of(run, others)
    c1, c2 = st.columns(2)
    with c1:
        st.page_link(
            nav.SWEEP, label="back to its sweep", query_params={"sweep": str(run["sweep_id"])}
        )
    with c2:
        st.page_link(
            nav.COMPARE,
            label="compare with its dense control" if len(pair) > 1 else "open in compare",
            query_params={"runs": ",".join(map(str, pair))},
        )


def log_name(run_id: int) -> str:
    """The file name a run's downloaded log gets."""
    return f"run-{run_id}.jsonl"


def replay_section(url: str, run: dict[str, Any]) -> None:
    """Download buttons for the run (and its dense control) as the JSONL ``gapwatch
    export`` writes, and the ``gapwatch replay`` command that reads them."""
    rid = int(run["id"])
    pair = data.pair_of(run, source.runs(url, int(run["sweep_id"])))
    control = pair[1] if len(pair) > 1 else None
    c1, c2, c3 = st.columns([1, 1, 3], vertical_alignment="center")
    # the log is read from the store only when a button is pressed (a callable), and a
    # press does not rerun the page
    c1.download_button(
        "Download run as JSONL", data=lambda: source.run_jsonl(url, rid),
        file_name=log_name(rid), mime="application/x-ndjson", on_click="ignore",
        key="download_run",
    )  # fmt: skip
    if control is not None:
        c2.download_button(
            "Download its dense control", data=lambda: source.run_jsonl(url, control),
            file_name=log_name(control), mime="application/x-ndjson", on_click="ignore",
            key="download_control",
        )  # fmt: skip
    c3.caption(
        'One JSON object per step, `{"step": n, name: value, ...}`: the log '
        "`gapwatch export` writes. Replay the stop rules over it anywhere:"
    )
    cmd = f"gapwatch replay {log_name(rid)}"
    if control is not None:
        cmd += f" --control {log_name(control)}"
    st.code(cmd, language="bash")


def decisions_section(url: str, run_id: int) -> None:
    st.subheader("Decisions")
    decs = source.decisions(url, run_id, None)
    if not decs:
        st.caption("No rule warned about or stopped this run.")
        return
    for d in sorted(decs, key=lambda d: (int(d["step"]), str(d["rule"]))):
        icon = {"stop": "🛑", "warn": "⚠️"}.get(str(d.get("action")), "·")
        with st.expander(
            f"{icon} step {d['step']}: {nav.plain(d['action'])} by {nav.plain(d['rule'])}",
            expanded=d.get("action") == "stop",
        ):
            st.json(d.get("evidence") or {})


def metrics_section(url: str, run: dict[str, Any]) -> None:
    st.subheader("Metrics")
    rid = int(run["id"])
    all_metrics = source.metric_names(url, rid)
    if not all_metrics:
        st.info("This run has no stored metric yet.")
        return
    q = st.text_input(
        "filter metrics", value=nav.qp_str("q"), placeholder="e.g. tail/ or post_tool"
    )
    nav.qp_set("q", q)
    shown = [m for m in all_metrics if q.lower() in m.lower()] if q else all_metrics
    bad = source.non_finite(url, rid)
    if bad:
        total = sum(n for kinds in bad.values() for n in kinds.values())
        where = "; ".join(
            f"{nav.plain(m)} ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})"
            for m, kinds in bad.items()
        )
        st.warning(f"{total} stored values are not finite (NaN or inf): {where}")
    label = ((rid, data.run_label(run)),)
    trend = source.series(url, (rid,), tuple(shown), TREND_POINTS, label)
    latest = source.latest(url, (rid,), tuple(shown)).get(rid, {})
    rows = []
    for m in shown:
        s = trend[trend["name"] == m]
        rows.append(
            {
                "metric": m,
                "latest": latest.get(m),
                "trend": [None if pd.isna(v) else float(v) for v in s["value"]],
                "non-finite": sum(bad.get(m, {}).values()),
            }
        )
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        column_config={
            "latest": st.column_config.NumberColumn(format="%.5g"),
            "trend": st.column_config.LineChartColumn("trend", width="medium"),
            "non-finite": st.column_config.NumberColumn(
                help="NaN or inf values stored for the metric (all steps)"
            ),
        },
    )
    st.caption(f"{len(shown)} of {len(all_metrics)} metrics")
    defaults = [m for m in nav.qp_list("m") if m in all_metrics] or [
        m for m in (names.SCORE_MEAN, names.PROBS_DIFF_MEAN) if m in all_metrics
    ]
    chosen = st.multiselect("chart metrics", all_metrics, default=defaults, key="run_chart")
    nav.qp_set("m", chosen)
    log = st.toggle("log scale", value=nav.qp_bool("log"))
    nav.qp_set("log", "1" if log else None)
    if not chosen:
        return
    frame = source.series(url, (rid,), tuple(chosen), CHART_POINTS, label)
    stops = (
        [charts.StopMark(data.run_label(run), int(run["stop_step"]), str(run.get("stop_rule")))]
        if run.get("stop_step") is not None
        else []
    )
    grid = st.columns(2)
    for i, m in enumerate(chosen):
        df = frame[frame["name"] == m]
        with grid[i % 2]:
            if df.dropna(subset=["value"]).empty:
                st.caption(f"{nav.plain(m)}: no finite value stored")
                continue
            spec = charts.line_chart(
                df, title=m, y_title=m.rsplit("/", 1)[-1], log=log, stops=stops
            )
            st.vega_lite_chart(spec, width="stretch")


def body() -> None:
    url = source.db_url()
    source.store()
    rid = nav.qp_int("run")
    if rid is None:
        st.title("Run")
        st.info("No run chosen: open one from a sweep's runs table (its `open` link).")
        return
    run = source.run(url, rid)
    header(url, run)
    replay_section(url, run)
    tab_m, tab_d, tab_c = st.tabs(["metrics", "decisions", "config"])
    with tab_m:
        metrics_section(url, run)
    with tab_d:
        decisions_section(url, rid)
    with tab_c:
        st.json(run.get("config") or {})


def live() -> bool:
    try:
        rid = nav.qp_int("run")
        return rid is not None and source.run(source.db_url(), rid).get("status") == "running"
    except Exception:  # noqa: BLE001 - the body reports the error itself
        return False


nav.page_body(body, live=live())
