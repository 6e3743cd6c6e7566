"""Altair charts for the comparison and run pages.

One chart per figure with every chosen run on one axis (colour = run), a hover rule that
shows every run's value at the nearest step, optional horizontal reference lines (zero
for the score, the token budget for lengths) and the stop step of each stopped run as a
vertical rule labelled with the rule's name. ECDFs draw |log-ratio| on a log axis.

Frames come from ``ui.data.series_frame`` / ``ui.data.ecdf_frame``; nothing here reads
the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import altair as alt
import pandas as pd

HEIGHT = 260
PALETTE: Final = "tableau10"


@dataclass(frozen=True)
class StopMark:
    """A stopped run's stop step, drawn as a labelled vertical rule."""

    run: str
    step: int
    rule: str


def line_chart(
    df: pd.DataFrame,
    *,
    title: str,
    y_title: str,
    log: bool = False,
    hlines: Sequence[tuple[float, str]] = (),
    stops: Sequence[StopMark] = (),
    color_by: str = "run",
    dash_by: str | None = None,
) -> alt.LayerChart | alt.FacetChart:
    """Lines of ``value`` over ``step`` per ``color_by`` (and ``dash_by``) with hover tooltips.

    ``df`` has columns step, value, run (+ the dash column). Non-finite values are NaN
    and leave a gap in the line. On a log axis non-positive values cannot be drawn and
    are left out (the page says so).
    """
    data = df.dropna(subset=["value"])
    if log:
        data = data[data["value"] > 0]
    scale = alt.Scale(type="log") if log else alt.Scale(zero=False)
    enc_color = alt.Color(
        f"{color_by}:N",
        title=color_by,
        scale=alt.Scale(scheme=PALETTE),
        legend=alt.Legend(orient="right", labelLimit=180),
    )
    tooltip = [
        alt.Tooltip(f"{color_by}:N"),
        alt.Tooltip("step:Q"),
        alt.Tooltip("value:Q", format=".4g"),
    ]
    if dash_by:
        tooltip.insert(1, alt.Tooltip(f"{dash_by}:N"))
    base = alt.Chart(data).encode(
        x=alt.X("step:Q", title="step"),
        y=alt.Y("value:Q", title=y_title, scale=scale),
        color=enc_color,
    )
    line_enc = {"strokeDash": alt.StrokeDash(f"{dash_by}:N", title=dash_by)} if dash_by else {}
    lines = base.mark_line(strokeWidth=1.6, interpolate="linear").encode(**line_enc)
    hover = alt.selection_point(
        fields=["step"], nearest=True, on="pointerover", clear="pointerout", empty=False
    )
    points = (
        base.mark_point(size=40, filled=True)
        .encode(opacity=alt.condition(hover, alt.value(1.0), alt.value(0.0)), tooltip=tooltip)
        .add_params(hover)
    )
    rule = (
        alt.Chart(data)
        .mark_rule(color="#888")
        .encode(x="step:Q", opacity=alt.condition(hover, alt.value(0.5), alt.value(0.0)))
        .transform_filter(hover)
    )
    layers: list[alt.Chart] = [lines, points, rule]
    if hlines:
        hdf = pd.DataFrame([{"y": y, "label": label} for y, label in hlines])
        if log:
            hdf = hdf[hdf["y"] > 0]
        if not hdf.empty:
            h = alt.Chart(hdf).encode(y="y:Q")
            layers.append(h.mark_rule(strokeDash=[4, 3], color="#555"))
            layers.append(
                h.mark_text(align="left", dx=4, dy=-6, color="#555").encode(
                    x=alt.value(0), text="label:N"
                )
            )
    if stops:
        sdf = pd.DataFrame([{"step": s.step, "rule": s.rule, "run": s.run} for s in stops])
        s = alt.Chart(sdf).encode(x="step:Q")
        layers.append(
            s.mark_rule(color="#d62728", strokeWidth=2).encode(
                tooltip=[alt.Tooltip("run:N"), alt.Tooltip("rule:N"), alt.Tooltip("step:Q")]
            )
        )
        layers.append(
            s.mark_text(align="left", dx=3, baseline="top", color="#d62728").encode(
                y=alt.value(2), text="rule:N"
            )
        )
    return alt.layer(*layers).properties(title=title, height=HEIGHT)


def ecdf_chart(df: pd.DataFrame, *, title: str) -> alt.Chart:
    """ECDF step lines of |log-ratio| (log x axis) per run, dashed by step label.

    ``df`` has columns value, cdf, run, step (a label such as ``"step 12"``).
    """
    data = df[df["value"] > 0]
    labels = sorted(data["step"].unique(), key=lambda s: int(str(s).split()[-1]))
    return (
        alt.Chart(data)
        .mark_line(interpolate="step-after", strokeWidth=1.6)
        .encode(
            x=alt.X("value:Q", title="|log-ratio|", scale=alt.Scale(type="log")),
            y=alt.Y("cdf:Q", title="fraction of tokens <= x", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color(
                "run:N",
                scale=alt.Scale(scheme=PALETTE),
                legend=alt.Legend(orient="right", labelLimit=180),
            ),
            strokeDash=alt.StrokeDash("step:N", title="step", sort=labels),
            tooltip=[
                alt.Tooltip("run:N"),
                alt.Tooltip("step:N"),
                alt.Tooltip("value:Q", format=".3g", title="|log-ratio|"),
                alt.Tooltip("cdf:Q", format=".3f"),
            ],
        )
        .properties(title=title, height=HEIGHT)
    )


def outcome_chart(df: pd.DataFrame) -> alt.LayerChart | alt.FacetChart:
    """One point per run: final score against mean gap (log x), colour = strategy,
    shape = status; the zero score line drawn. ``df``: run, strategy, status, score, gap.
    """
    data = df.dropna(subset=["score", "gap"])
    data = data[data["gap"] > 0]
    points = (
        alt.Chart(data)
        .mark_point(size=80, filled=True, opacity=0.85)
        .encode(
            x=alt.X("gap:Q", title="mean probability gap", scale=alt.Scale(type="log")),
            y=alt.Y("score:Q", title="final score"),
            color=alt.Color(
                "strategy:N", scale=alt.Scale(scheme=PALETTE),
                legend=alt.Legend(orient="right", labelLimit=180),
            ),
            shape=alt.Shape("status:N"),
            tooltip=[
                alt.Tooltip("run:N"), alt.Tooltip("strategy:N"), alt.Tooltip("status:N"),
                alt.Tooltip("score:Q", format=".3f"), alt.Tooltip("gap:Q", format=".4g"),
            ],
        )
    )  # fmt: skip
    zero = alt.Chart(pd.DataFrame({"y": [0.0]})).mark_rule(strokeDash=[4, 3], color="#555")
    layered = alt.layer(points, zero.encode(y="y:Q"))
    return layered.properties(title="Final score vs mean gap, one point per run", height=HEIGHT)
