"""Page 3: a pair (a treatment and its dense control) or any picked runs, one chart per
figure with every run on one axis, stop steps marked with the rule's name, and ECDFs of
|log-ratio| per slice at early, middle and late steps.

URL: ``runs`` (ids, comma list), ``log`` (1 = log y axis where values are positive),
``points`` (max points per series, downsampled in the database), ``ecdf`` (steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from correction import names
from ui import charts, data, nav, source

ECDF_POINTS = 80  # points per ECDF line (evenly thinned; first and last kept)


@dataclass(frozen=True)
class Figure:
    # One chart: its metrics (several = one line per metric and run, dashed by slice).

    title: str
    y_title: str
    metrics: tuple[tuple[str, str], ...]  # (metric name, label of the line family)
    log_ok: bool = True
    zero_line: bool = False
    budget_line: bool = False


FIGURES: tuple[Figure, ...] = (
    Figure("Task score", names.SCORE_MEAN, ((names.SCORE_MEAN, "score"),), False, True),
    Figure("Probability gap", "mean |p_trainer - p_sampler|", ((names.PROBS_DIFF_MEAN, "gap"),)),
    Figure("Log-ratio gap", "mean |log-ratio|", ((names.ABS_LOG_RATIO_MEAN, "gap"),)),
    Figure(
        "Tokens per interaction",
        names.RESPONSE_LENGTH_MEAN,
        ((names.RESPONSE_LENGTH_MEAN, "tokens"),),
        budget_line=True,
    ),
    Figure(
        "p95 |log-ratio|: post-tool vs text",
        "p95 |log-ratio|",
        tuple((names.tail(s, "p95"), s) for s in names.SLICES),
    ),
    Figure("ESS per slice", "ESS (fraction)", tuple((names.ess(s), s) for s in names.SLICES)),
)


def names_by_lines() -> dict[int, tuple[str, ...]]:
    """Metric names grouped by how many lines per run their figure draws (1 or 2)."""
    out: dict[int, list[str]] = {}
    for f in FIGURES:
        out.setdefault(len(f.metrics), []).extend(m for m, _ in f.metrics)
    out[1].append(names.RESPONSE_BUDGET)
    return {k: tuple(dict.fromkeys(v)) for k, v in out.items()}


def fetch(url: str, run_rows: list[dict[str, Any]], points: int | None) -> pd.DataFrame:
    """Every figure's series; ``points`` per series, or by default each chart's points
    budget shared by its lines (a two-slice figure draws two lines per run)."""
    ids = tuple(int(r["id"]) for r in run_rows)
    labels = source.labels_for(run_rows)
    frames = [
        source.series(url, ids, group, points or data.auto_points(len(ids) * k), labels)
        for k, group in names_by_lines().items()
    ]
    return pd.concat(frames, ignore_index=True)


def pick_runs(url: str) -> list[dict[str, Any]]:
    wanted = data.parse_int_list(nav.qp_str("runs"))
    everything = source.runs(url, None)
    by_id = {int(r["id"]): r for r in everything}
    missing = [i for i in wanted if i not in by_id]
    if missing:
        st.warning(f"not in the store, left out: runs {', '.join(map(str, missing))}")
    wanted = [i for i in wanted if i in by_id]
    sweep_ids = {by_id[i]["sweep_id"] for i in wanted}
    pool = [r for r in everything if not sweep_ids or r["sweep_id"] in sweep_ids]
    options = [int(r["id"]) for r in pool]
    chosen = st.multiselect(
        "runs to compare",
        options,
        default=wanted,
        format_func=lambda i: data.run_label(by_id[i]),
        key="pick_runs",
    )
    nav.qp_set("runs", chosen)
    return [by_id[i] for i in chosen]


def stops_of(run_rows: list[dict[str, Any]]) -> list[charts.StopMark]:
    return [
        charts.StopMark(data.run_label(r), int(r["stop_step"]), str(r.get("stop_rule") or "stop"))
        for r in run_rows
        if r.get("stop_step") is not None
    ]


def figure_chart(fig: Figure, frame: pd.DataFrame, stops: list[charts.StopMark], log: bool) -> None:
    wanted = {m: label for m, label in fig.metrics}
    df = frame[frame["name"].isin(list(wanted))].copy()
    if df.dropna(subset=["value"]).empty:
        st.markdown(f"**{fig.title}**")
        st.caption(f"no chosen run has `{'`, `'.join(wanted)}`")
        return
    use_log = log and fig.log_ok
    hlines: list[tuple[float, str]] = [(0.0, "zero")] if fig.zero_line else []
    if fig.budget_line:
        b = frame[frame["name"] == names.RESPONSE_BUDGET].dropna(subset=["value"])
        budgets = b.sort_values("step").groupby("run_id")["value"].last().unique()  # per run
        hlines += [(float(v), f"budget {v:g}") for v in sorted(budgets)]
    dash = None
    if len(fig.metrics) > 1:
        df["slice"] = df["name"].map(wanted)
        dash = "slice"
    chart = charts.line_chart(
        df, title=fig.title, y_title=fig.y_title, log=use_log, hlines=hlines, stops=stops,
        dash_by=dash,
    )  # fmt: skip
    st.vega_lite_chart(chart, width="stretch")
    if use_log and (df["value"] <= 0).any():
        st.caption("values <= 0 are not drawn on the log axis")


def nan_note(frame: pd.DataFrame) -> None:
    bad = data.non_finite_summary(frame)
    if bad.empty:
        return
    st.warning(
        f"{int(bad['count'].sum())} stored values are not finite (NaN or inf); they are "
        "gaps in the lines. Where:"
    )
    st.dataframe(bad, hide_index=True)


def ecdf_section(url: str, run_rows: list[dict[str, Any]]) -> None:
    st.subheader("ECDF of |log-ratio| per slice")
    steps_by_run: dict[int, dict[str, list[int]]] = {}
    for r in run_rows:
        rid = int(r["id"])
        steps_by_run[rid] = {
            s: source.distribution_steps(url, rid, names.dist(s)) for s in names.SLICES
        }
    union = sorted({x for per in steps_by_run.values() for xs in per.values() for x in xs})
    if not union:
        st.caption("No chosen run stored |log-ratio| distributions.")
        return
    wanted = [x for x in data.parse_int_list(nav.qp_str("ecdf")) if x in union]
    chosen = st.multiselect(
        "steps (default: first, middle, last stored)",
        union,
        default=wanted or data.default_steps(union),
        key="ecdf_steps",
    )
    nav.qp_set("ecdf", sorted(chosen) if chosen != data.default_steps(union) else None)
    if not chosen:
        st.caption("Pick at least one step.")
        return
    cols = st.columns(len(names.SLICES))
    for col, slice_ in zip(cols, names.SLICES, strict=True):
        frames = []
        for r in run_rows:
            rid = int(r["id"])
            have = steps_by_run[rid][slice_]
            at = sorted({s for s in (data.nearest_step(have, w) for w in chosen) if s is not None})
            for step, payload in source.distributions(url, rid, names.dist(slice_), tuple(at)):
                e = data.thin_ecdf(data.ecdf_frame(payload), ECDF_POINTS)
                if not e.empty:
                    frames.append(e.assign(run=data.run_label(r), step=f"step {step}"))
        with col:
            if not frames:
                st.caption(f"no {slice_} distribution at these steps")
                continue
            chart = charts.ecdf_chart(pd.concat(frames), title=f"{slice_} tokens")
            st.vega_lite_chart(chart, width="stretch")


def body() -> None:
    url = source.db_url()
    source.store()
    st.title("Compare runs")
    run_rows = pick_runs(url)
    if not run_rows:
        st.info(
            "Pick runs above, or open a pair from a sweep's runs table "
            "(its `compare` link shows a treatment with its dense control)."
        )
        return
    c1, c2, c3 = st.columns([1, 1, 3])
    log = c1.toggle(
        "log scale", value=nav.qp_bool("log"), help="y axis of the gap, length, tail and ESS charts"
    )
    nav.qp_set("log", "1" if log else None)
    auto = data.auto_points(len(run_rows))
    points = c2.number_input(
        "max points per line",
        min_value=20,
        max_value=20000,
        value=nav.qp_int("points") or auto,
        step=100,
        help=f"default: {data.POINTS_PER_CHART:,} points per chart shared by its lines "
        f"({data.MIN_POINTS}-{data.MAX_POINTS} per line)",
    )
    explicit = None if points == auto else int(points)
    nav.qp_set("points", explicit)
    c3.caption(
        "Series are downsampled in the database keeping each bucket's min and max, so "
        "spikes survive. Hover a chart for every run's value at a step; red rules mark "
        "stop steps with the rule that fired."
    )
    links = st.columns(min(len(run_rows), 6))
    for i, r in enumerate(run_rows):
        with links[i % len(links)]:
            st.page_link(
                nav.RUN, label=f"{data.run_label(r)}: run page", query_params={"run": str(r["id"])}
            )
        if r.get("status") == "failed":
            st.error(f"{data.run_label(r)} failed: {r.get('error') or 'no error text stored'}")
    frame = fetch(url, run_rows, explicit)
    if frame.empty:
        st.info("The chosen runs have no stored step yet.")
        return
    stops = stops_of(run_rows)
    grid = st.columns(2)
    for i, fig in enumerate(FIGURES):
        with grid[i % 2]:
            figure_chart(fig, frame, stops, log)
    nan_note(frame)
    ecdf_section(url, run_rows)


def live() -> bool:
    try:
        ids = set(data.parse_int_list(nav.qp_str("runs")))
        return any(
            int(r["id"]) in ids and r.get("status") == "running"
            for r in source.runs(source.db_url(), None)
        )
    except Exception:  # noqa: BLE001 - the body reports the error itself
        return False


nav.page_body(body, live=live())
