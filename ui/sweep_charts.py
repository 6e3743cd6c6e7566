"""The sweep page's views: the spread of each strategy across seeds, final score against
mean gap per run, and each varying threshold against the outcome it led to.

Frames come from ``ui.board``; each function returns one view (a Vega-Lite spec with its
data as named datasets) and the page draws them together with ``ui.charts.grid``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from gapwatch.ui.board import CONTROL, RAN_TO_END, spans_decades
from gapwatch.ui.charts import (
    CONFIG,
    HEIGHT,
    REF_COLOR,
    USERMETA,
    Spec,
    color_enc,
    named_datasets,
    nominal,
    quant,
    view_title,
)

MEAN_COLOR = "#222222"
ROW_PX = 22
"""Height of one strategy's row in the spread views."""
MAX_TICKS = 16
"""Runs per strategy up to which the spread view draws a tick per run; past it (a sweep
of many seeds) the ticks would merge into a bar and cost a mark each, so only the line
and the mean are drawn."""
THRESHOLD_WIDTH = 250
THRESHOLD_HEIGHT = 220
END_SHAPE = "circle"
"""The shape of a run that ran to the end, in every threshold view."""
RULE_SHAPES = ("triangle-down", "square", "diamond", "cross", "triangle-up", "triangle-left")
"""Shapes of the other endings (stop rules, failed, running), in their sorted order."""


def _view(title: str, width: int, height: int, layers: list[Spec], **data: pd.DataFrame) -> Spec:
    return {
        "title": view_title(title),
        "width": width,
        "height": height,
        "config": CONFIG,
        "usermeta": USERMETA,
        "layer": layers,
        "datasets": named_datasets(**data),
    }


def spread_chart(
    points: pd.DataFrame, order: Sequence[str], *, field: str, title: str, width: int = 380
) -> Spec:
    """Per strategy (one row each, in ``order``): a tick per run (up to ``MAX_TICKS`` runs),
    a line from the lowest to the highest run and a diamond at the mean. ``points``:
    ``ui.board.seed_points``."""
    data = points.dropna(subset=[field])[["strategy", "run", "seed", field]]
    data = data[data["strategy"].isin(list(order))]
    g = data.groupby("strategy")[field]
    summary = pd.DataFrame({"lo": g.min(), "hi": g.max(), "mean": g.mean(), "runs": g.size()})
    summary = summary.reset_index()
    many = set(summary.loc[summary["runs"] > MAX_TICKS, "strategy"])
    data = data[~data["strategy"].isin(many)]
    y = nominal("strategy", None, sort=list(order), axis={"labelLimit": 260, "title": None})
    fmt = ".3f" if field == "score" else ".1f"
    layers: list[Spec] = [
        {
            "data": {"name": "summary"},
            "mark": {"type": "rule", "color": "#9aa5b1", "strokeWidth": 3},
            "encoding": {
                "y": y, "x": quant("lo", title), "x2": {"field": "hi"},
                "tooltip": [nominal("strategy"), quant("lo", "lowest", format=fmt),
                            quant("hi", "highest", format=fmt), quant("runs", "runs")],
            },
        },
        {
            "data": {"name": "seeds"},
            "mark": {"type": "tick", "thickness": 2, "size": ROW_PX * 0.7, "color": "#4c78a8"},
            "encoding": {
                "y": y, "x": quant(field),
                "tooltip": [nominal("run"), quant("seed", "seed"), quant(field, title, format=fmt)],
            },
        },
        {
            "data": {"name": "summary"},
            "mark": {"type": "point", "shape": "diamond", "filled": True, "size": 70,
                     "color": MEAN_COLOR},
            "encoding": {
                "y": y, "x": quant("mean"),
                "tooltip": [nominal("strategy"), quant("mean", "mean over runs", format=fmt)],
            },
        },
    ]  # fmt: skip
    height = max(ROW_PX * len(order), ROW_PX * 2)
    return _view(title, width, height, layers, seeds=data, summary=summary)


def outcome_chart(df: pd.DataFrame, *, width: int = 480) -> Spec:
    """One point per run: final score against mean gap (log x), colour = strategy,
    shape = status; the zero score line drawn. ``df``: run, strategy, status, score, gap.
    """
    data = df.dropna(subset=["score", "gap"])
    data = data[data["gap"] > 0][["run", "strategy", "status", "score", "gap"]]
    layers: list[Spec] = [
        {
            "data": {"name": "runs"},
            "mark": {"type": "point", "size": 60, "filled": True, "opacity": 0.8},
            "encoding": {
                "x": quant("gap", "mean probability gap", scale={"type": "log"}),
                "y": quant("score", "final score"),
                "color": color_enc("strategy", "strategy", data["strategy"].nunique()),
                "shape": nominal("status", "status"),
                "tooltip": [
                    nominal("run"), nominal("strategy"), nominal("status"),
                    quant("score", "score", format=".3f"), quant("gap", "gap", format=".4g"),
                ],
            },
        },
        {
            "data": {"values": [{"y": 0.0}]},
            "mark": {"type": "rule", "strokeDash": [4, 3], "color": REF_COLOR},
            "encoding": {"y": quant("y")},
        },
    ]  # fmt: skip
    return _view("Final score vs mean gap, one point per run", width, HEIGHT, layers, runs=data)


def _x(values: Sequence[float], param: str) -> dict[str, Any]:
    """The threshold axis: log when the values span a decade, ticks at the values."""
    ticks = sorted(set(values))
    scale: dict[str, Any] = {"type": "log"} if spans_decades(ticks) else {"zero": False}
    scale["padding"] = 14
    return quant("value", param, scale=scale, axis={"values": ticks, "format": "~g"})


def threshold_views(
    points: pd.DataFrame, control: dict[str, float | None], *, width: int = THRESHOLD_WIDTH
) -> list[Spec]:
    """Three views of one (codec, correction, threshold) against the threshold's value:
    steps survived and final score (one point per run coloured by seed and shaped by how
    it ended, the seed mean as a line, one per combination of the other varying
    thresholds, the dense control's mean dashed), and how many runs ended each way. ``points``: the rows of
    ``ui.board.threshold_outcomes`` for one (group, param); ``control``: the control's
    mean ``survived`` and ``score``.
    """
    group, param = str(points["group"].iloc[0]), str(points["param"].iloc[0])
    x = _x(list(points["value"]), param)
    data = points[["value", "others", "seed", "run", "survived", "score", "outcome"]].copy()
    data["seed"] = data["seed"].astype(str)
    outcomes = sorted(set(data["outcome"]) - {RAN_TO_END}) + [RAN_TO_END]
    color = color_enc("seed", "seed", data["seed"].nunique())
    shapes = [*(RULE_SHAPES[i % len(RULE_SHAPES)] for i in range(len(outcomes) - 1)), END_SHAPE]
    shape = nominal("outcome", "how the run ended", sort=outcomes,
                    scale={"domain": outcomes, "range": shapes})  # fmt: skip
    tooltip = [nominal("run"), nominal("seed"), quant("value", param, format="~g"), nominal("outcome", "ended"),
               quant("survived", "steps survived"), quant("score", "final score", format=".3f")]  # fmt: skip
    dash = (
        {"strokeDash": nominal("others", "other thresholds")}
        if (data["others"] != "").any()
        else {}
    )
    views = []
    for field, y_title in (("survived", "steps survived"), ("score", "final score")):
        pts = data.dropna(subset=[field])
        means = pts.groupby(["value", "others"], as_index=False)[field].mean()
        layers: list[Spec] = [
            {
                "data": {"name": "means"},
                "mark": {"type": "line", "color": MEAN_COLOR, "strokeWidth": 1.5,
                         "point": {"filled": True, "size": 30, "color": MEAN_COLOR}},
                "encoding": {"x": x, "y": quant(field, y_title, scale={"zero": False, "padding": 10}),
                             **dash, "tooltip": [quant("value", param, format="~g"), nominal("others"),
                                                 quant(field, f"seed mean of {y_title}", format=".3g")]},
            },
            {
                "data": {"name": "runs"},
                "mark": {"type": "point", "filled": True, "size": 60, "opacity": 0.85},
                "encoding": {"x": quant("value"), "y": quant(field), "color": color, "shape": shape,
                             "tooltip": tooltip},
            },
        ]  # fmt: skip
        ref = control.get(field)
        if ref is not None:
            layers += [
                {
                    "data": {"values": [{"y": ref, "label": CONTROL}]},
                    "mark": {"type": "rule", "strokeDash": [4, 3], "color": REF_COLOR},
                    "encoding": {"y": quant("y")},
                },
                {
                    "data": {"values": [{"y": ref, "label": CONTROL}]},
                    "mark": {"type": "text", "align": "left", "dx": 4, "dy": -6,
                             "color": REF_COLOR},
                    "encoding": {"y": quant("y"), "x": {"value": 0}, "text": nominal("label")},
                },
            ]  # fmt: skip
        title = f"{group}: {y_title} vs {param}"
        views.append(_view(title, width, THRESHOLD_HEIGHT, layers, runs=pts, means=means))
    ended = (
        data.groupby(["value", "outcome"], as_index=False)
        .agg(runs=("run", "size"), which=("run", lambda r: "; ".join(r)))
        .assign(label=lambda d: d["runs"].astype(str))
    )
    y_end = nominal("outcome", "how the run ended", sort=outcomes)
    end_tip = [quant("value", param, format="~g"), nominal("outcome", "ended"),
               quant("runs", "runs"), nominal("which", "which")]  # fmt: skip
    end_layers: list[Spec] = [
        {
            "data": {"name": "ended"},
            "mark": {"type": "point", "filled": True, "color": "#4c78a8", "opacity": 0.8},
            "encoding": {
                "x": x, "y": y_end, "tooltip": end_tip,
                "size": quant("runs", "runs", scale={"range": [40, 400], "zero": True},
                              legend=None),
            },
        },
        {
            "data": {"name": "ended"},
            "mark": {"type": "text", "align": "left", "dx": 12, "color": MEAN_COLOR},
            "encoding": {"x": quant("value"), "y": y_end, "text": nominal("label"),
                         "tooltip": end_tip},
        },
    ]  # fmt: skip
    views.append(
        _view(f"{group}: runs per ending vs {param}", width, THRESHOLD_HEIGHT, end_layers,
              ended=ended)
    )  # fmt: skip
    return views
