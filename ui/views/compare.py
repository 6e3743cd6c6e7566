"""Page 3: a pair (a treatment and its dense control) or any picked runs, one view per
figure with every run on one axis, stop steps marked with the rule's name, the gap by
interaction (turn) index averaged over steps, and ECDFs of |log-ratio| per slice at
early, middle and late steps, for each ratio family (``names.RATIOS``: trainer vs
sampler, the policy vs the frozen reference, the PPO ratio over the update).

Every view goes into **one** chart (``ui.charts.concat``): one embed to compile and lay
out instead of eight, the largest single saving in drawing this page (bench/ui_bench.py).

URL: ``runs`` (ids, comma list; at most ``MAX_RUNS``), ``log`` (1 = log y axis where
values are positive), ``points`` (max points per series, downsampled in the database),
``ecdf`` (steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from gapwatch.correction import names
from gapwatch.ui import charts, data, nav, source

MAX_RUNS = data.MAX_COMPARE
ECDF_POINTS = 30  # points per ECDF line (evenly thinned; first and last kept)


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
    Figure(
        "p95 |log pi_theta/pi_ref|: post-tool vs text",
        "p95 |log-ratio| to the reference",
        tuple((names.tail(s, "p95", "ref_drift"), s) for s in names.SLICES),
    ),
    Figure(
        "ESS of pi_theta/pi_ref per slice",
        "ESS (fraction)",
        tuple((names.ess(s, "ref_drift"), s) for s in names.SLICES),
    ),
    Figure(
        "p95 |log PPO ratio|: post-tool vs text",
        "p95 |log pi_new/pi_behaviour|",
        tuple((names.tail(s, "p95", "ppo"), s) for s in names.SLICES),
    ),
    Figure(
        "ESS of the PPO ratio per slice",
        "ESS (fraction)",
        tuple((names.ess(s, "ppo"), s) for s in names.SLICES),
    ),
)
ECDF_TITLES: dict[names.Ratio, str] = {
    "mismatch": "ECDF of |log-ratio|: {} tokens",
    "ref_drift": "ECDF of |log pi_theta/pi_ref|: {} tokens",
    "ppo": "ECDF of |log PPO ratio|: {} tokens",
}
# one ECDF view per ratio family (names.RATIOS) and slice: trainer vs sampler, the policy
# vs the frozen reference, the PPO ratio over the update
ECDF_TITLE = ECDF_TITLES["mismatch"]
TURN_TITLE = "Probability gap by turn (mean over steps)"
# Per-turn gap metrics and their bucket labels (turn 1 .. the open-ended last bucket); a
# page script's bare string would be drawn by Streamlit's magic, so this is a comment
TURN_NAMES = {names.by_turn(names.PROBS_DIFF_MEAN, b): b for b in names.TURN_BUCKETS}


def names_by_lines() -> dict[int, tuple[str, ...]]:
    """Metric names grouped by how many lines per run their figure draws (1 or 2)."""
    out: dict[int, list[str]] = {}
    for f in FIGURES:
        out.setdefault(len(f.metrics), []).extend(m for m, _ in f.metrics)
    out[1].append(names.RESPONSE_BUDGET)
    out[1].extend(TURN_NAMES)
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
    """The runs the URL (or the picker) chooses; more than ``MAX_RUNS`` are refused."""
    asked = data.parse_int_list(nav.qp_str("runs"))
    everything = source.runs(url, None)
    by_id = {int(r["id"]): r for r in everything}
    missing = [i for i in asked if i not in by_id]
    if missing:
        st.warning(f"not in the store, left out: runs {', '.join(map(str, missing))}")
    wanted = list(dict.fromkeys(i for i in asked if i in by_id))
    too_many = len(wanted) > MAX_RUNS
    if too_many:
        st.error(
            f"This link asks for {len(wanted)} runs; the compare page draws at most "
            f"{MAX_RUNS} at once. Pick up to {MAX_RUNS} below, or filter the sweep's runs "
            "table first."
        )
    sweep_ids = {by_id[i]["sweep_id"] for i in wanted}
    pool = [r for r in everything if not sweep_ids or r["sweep_id"] in sweep_ids]
    chosen = st.multiselect(
        "runs to compare",
        [int(r["id"]) for r in pool],
        default=[] if too_many else wanted,
        format_func=lambda i: data.run_label(by_id[i]),
        max_selections=MAX_RUNS,
        key="pick_runs",
    )
    if chosen or not too_many:  # a refused link stays in the address bar until a pick
        nav.qp_set("runs", chosen)
    return [by_id[i] for i in chosen]


def stops_of(run_rows: list[dict[str, Any]]) -> list[charts.StopMark]:
    return [
        charts.StopMark(data.run_label(r), int(r["stop_step"]), str(r.get("stop_rule") or "stop"))
        for r in run_rows
        if r.get("stop_step") is not None
    ]


def figure_spec(
    fig: Figure,
    frame: pd.DataFrame,
    stops: list[charts.StopMark],
    log: bool,
    domain: list[str],
) -> tuple[charts.Spec | None, str | None]:
    """The figure's view (None when no chosen run has its metrics) and a note for it."""
    wanted = {m: label for m, label in fig.metrics}
    df = frame[frame["name"].isin(list(wanted))]
    if df["value"].isna().all():
        return None, f"{fig.title}: no chosen run has `{'`, `'.join(wanted)}`"
    use_log = log and fig.log_ok
    hlines: list[tuple[float, str]] = [(0.0, "zero")] if fig.zero_line else []
    if fig.budget_line:
        b = frame[frame["name"] == names.RESPONSE_BUDGET].dropna(subset=["value"])
        budgets = b.sort_values("step").groupby("run_id")["value"].last().unique()  # per run
        hlines += [(float(v), f"budget {v:g}") for v in sorted(budgets)]
    dash = None
    if len(fig.metrics) > 1:
        df = df.assign(slice=df["name"].map(wanted))
        dash = "slice"
    spec = charts.line_chart(
        df, title=fig.title, y_title=fig.y_title, log=use_log, hlines=hlines, stops=stops,
        dash_by=dash, color_domain=domain, width=charts.WIDTH,
    )  # fmt: skip
    note = None
    if use_log and (df["value"] <= 0).any():
        note = f"{fig.title}: values <= 0 are not drawn on the log axis"
    return spec, note


def turn_spec(
    frame: pd.DataFrame, log: bool, domain: list[str]
) -> tuple[charts.Spec | None, str | None]:
    """The per-turn gap view (which round of an episode diverges most), or a note when no
    chosen run stored per-turn figures (e.g. a log from another trainer)."""
    prof = data.turn_profile(frame, TURN_NAMES)
    if prof.empty:
        return None, f"{TURN_TITLE}: no chosen run has per-turn gap figures"
    spec = charts.turn_chart(
        prof, title=TURN_TITLE, y_title="mean |p_trainer - p_sampler|",
        turns=names.TURN_BUCKETS, log=log, color_domain=domain, width=charts.WIDTH,
    )  # fmt: skip
    return spec, None


Family = tuple[names.Ratio, names.Slice]


def ecdf_steps(url: str, run_rows: list[dict[str, Any]]) -> dict[int, dict[Family, list[int]]]:
    """Per run, ratio family and slice, the steps with a stored |log-ratio| distribution."""
    return {
        int(r["id"]): {
            (ratio, s): source.distribution_steps(url, int(r["id"]), names.dist(s, ratio))
            for ratio in names.RATIOS
            for s in names.SLICES
        }
        for r in run_rows
    }


def pick_ecdf_steps(where: Any, union: list[int]) -> list[int]:
    """The ECDF steps from the URL or the picker (default: first, middle, last)."""
    if not union:
        where.caption("No chosen run stored |log-ratio| distributions.")
        return []
    wanted = [x for x in data.parse_int_list(nav.qp_str("ecdf")) if x in union]
    chosen = where.multiselect(
        "ECDF steps (default: first, middle, last stored)",
        union,
        default=wanted or data.default_steps(union),
        key="ecdf_steps",
    )
    nav.qp_set("ecdf", sorted(chosen) if chosen != data.default_steps(union) else None)
    return list(chosen)


def ecdf_specs(
    url: str,
    run_rows: list[dict[str, Any]],
    have: dict[int, dict[Family, list[int]]],
    chosen: list[int],
    domain: list[str],
) -> tuple[list[charts.Spec], list[str]]:
    """One ECDF view per ratio family and slice at the stored steps nearest ``chosen``,
    and notes (one per family none of the runs stored, e.g. a log from elsewhere)."""
    specs, notes = [], []
    for ratio in names.RATIOS:
        missing = []
        for slice_ in names.SLICES:
            frame = ecdf_frame(url, run_rows, have, chosen, (ratio, slice_))
            if frame is None:
                missing.append(slice_)
                continue
            title = ECDF_TITLES[ratio].format(slice_)
            specs.append(
                charts.ecdf_chart(frame, title=title, color_domain=domain, width=charts.WIDTH)
            )
        if missing:
            what = "" if ratio == "mismatch" else f"{ratio} "
            notes.append(f"no {what}{' or '.join(missing)} distribution at the chosen steps")
    return specs, notes


def ecdf_frame(
    url: str,
    run_rows: list[dict[str, Any]],
    have: dict[int, dict[Family, list[int]]],
    chosen: list[int],
    family: Family,
) -> pd.DataFrame | None:
    """The ECDF points of one family and slice, every run at its stored steps nearest
    ``chosen``; None where no run stored any."""
    ratio, slice_ = family
    parts = []
    for r in run_rows:
        rid = int(r["id"])
        at = sorted(
            {s for w in chosen if (s := data.nearest_step(have[rid][family], w)) is not None}
        )
        for step, payload in source.distributions(url, rid, names.dist(slice_, ratio), tuple(at)):
            e = data.thin_ecdf(data.ecdf_frame(payload), ECDF_POINTS)
            if not e.empty:
                parts.append(e.assign(run=data.run_label(r), step=f"step {step}"))
    return pd.concat(parts, ignore_index=True) if parts else None


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
        value=nav.qp_int("points", 20, 20000) or auto,
        step=100,
        help=f"default: {data.POINTS_PER_CHART:,} points per chart shared by its lines "
        f"({data.MIN_POINTS}-{data.MAX_POINTS} per line). Series are downsampled in the "
        "database keeping each bucket's min and max, so spikes survive.",
    )
    explicit = None if points == auto else int(points)
    nav.qp_set("points", explicit)
    have = ecdf_steps(url, run_rows)
    union = sorted({x for per in have.values() for xs in per.values() for x in xs})
    chosen_steps = pick_ecdf_steps(c3, union)
    # one line of links (ten page_link widgets in columns cost the page ~0.2 s to draw)
    st.markdown(
        "Run pages: "
        + " · ".join(f"[{nav.plain(data.run_label(r))}](run?run={int(r['id'])})" for r in run_rows)
    )
    for r in run_rows:
        if r.get("status") == "failed":
            st.error(
                f"{nav.plain(data.run_label(r))} failed: "
                f"{nav.plain(r.get('error') or 'no error text stored')}"
            )
    ids = tuple(int(r["id"]) for r in run_rows)
    chart, notes, bad = page_chart(url, ids, explicit, log, tuple(chosen_steps))
    if chart is None:
        st.info("The chosen runs have no stored step yet.")
        return
    st.caption(
        "Hover a chart for every run's value at a step; red rules mark stop steps with the "
        "rule that fired (hover a label for its runs)."
    )
    st.vega_lite_chart(chart, width="content")
    for note in notes:
        st.caption(nav.plain(note))
    if not bad.empty:
        st.warning(
            f"{int(bad['count'].sum())} stored values are not finite (NaN or inf); they are "
            "gaps in the lines. Where:"
        )
        st.dataframe(bad, hide_index=True)


@st.cache_data(ttl=source.TTL_S, show_spinner=False)
def page_chart(
    url: str, ids: tuple[int, ...], points: int | None, log: bool, steps: tuple[int, ...]
) -> tuple[charts.Spec | None, list[str], pd.DataFrame]:
    """The page's one chart (every figure, then the ECDFs), its notes, and where stored
    values are not finite; None for the chart when the runs have no step yet. Cached like
    the queries under it, so a rerun within the TTL (a reload, a widget that does not
    change the chart) sends the chart without building it again."""
    by_id = {int(r["id"]): r for r in source.runs(url, None)}
    run_rows = [by_id[i] for i in ids]
    frame = fetch(url, run_rows, points)
    if frame.empty:
        return None, [], data.non_finite_summary(frame)
    domain = [data.run_label(r) for r in run_rows]
    stops = stops_of(run_rows)
    made = [figure_spec(fig, frame, stops, log, domain) for fig in FIGURES]
    made.append(turn_spec(frame, log, domain))
    specs = [spec for spec, _ in made if spec is not None]
    notes = [note for _, note in made if note]
    if steps:
        have = ecdf_steps(url, run_rows)
        e_specs, e_notes = ecdf_specs(url, run_rows, have, list(steps), domain)
        specs, notes = specs + e_specs, notes + e_notes
    return charts.concat(specs, columns=2), notes, data.non_finite_summary(frame)


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
