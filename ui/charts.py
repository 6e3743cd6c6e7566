"""Vega-Lite chart specs for the pages, drawn with ``st.vega_lite_chart``.

One chart per figure with every chosen run on one axis (colour = run, dash = slice), a
hover rule that shows every run's value at the nearest step in one tooltip (W&B style),
optional horizontal reference lines (zero for the score, the token budget for lengths)
and the stop step of each stopped run as a red vertical rule labelled with the rule name.
ECDFs draw |log-ratio| on a log axis.

The specs are plain dicts with their data as named pandas datasets (Streamlit ships them
as Arrow). They are written by hand rather than through Altair because Altair's object
construction and schema validation cost about 0.1 s per chart, which a page of eight
charts over many runs cannot afford. Frames come from ``ui.data``; nothing here reads
the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

HEIGHT = 300
PALETTE = "tableau10"
STOP_COLOR = "#d62728"
REF_COLOR = "#555555"
Y_PAD_PX = 8
"""Pixels the y domain is widened by at each end, so a line at a series' extreme (a
compressed run's gap near 0.7 on a log axis niced to 1, an ESS of exactly 1) is drawn
inside the frame rather than on its edge."""
STOP_LABEL_DY = -4
"""The stop rule's label sits this far above the plot area (y = 0 is its top edge), so it
never covers a line: inside the plot it hid a line that ran along the top."""
HOVER_STEPS = 150
"""Steps the hover rule snaps to (see :func:`hover_frame`)."""

Spec = dict[str, Any]
CONFIG: Spec = {"aria": False, "mark": {"aria": False, "invalid": None}}
"""No ARIA attributes per mark (with thousands of points they cost more to draw than the
marks; the page states the same figures in its tables and captions), and no per-datum
invalid-value filter: the frames hold no NaN (dropped here, listed by the page), and
Streamlit's CSP-safe Vega interprets every per-datum expression, which is slow."""


@dataclass(frozen=True)
class StopMark:
    """A stopped run's stop step, drawn as a labelled vertical rule."""

    run: str
    step: int
    rule: str


def _no_index(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with an empty string index: Streamlit hands a numeric index to Vega as an
    extra ``(index)`` field on every row (shown in whole-row tooltips, converted per row).
    """
    return df.set_axis(pd.Index([""] * len(df), dtype=object), axis=0)


def _datasets(**frames: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {name: _no_index(df) for name, df in frames.items()}


def _q(field: str, title: str | None = None, **kw: Any) -> dict[str, Any]:
    enc: dict[str, Any] = {"field": field, "type": "quantitative", **kw}
    if title is not None:
        enc["title"] = title
    return enc


def _n(field: str, title: str | None = None, **kw: Any) -> dict[str, Any]:
    enc: dict[str, Any] = {"field": field, "type": "nominal", **kw}
    if title is not None:
        enc["title"] = title
    return enc


def _color(field: str, title: str, n: int = 10) -> dict[str, Any]:
    scheme = PALETTE if n <= 10 else "tableau20"  # 20 distinct colours before any repeat
    return _n(field, title, scale={"scheme": scheme}, legend={"orient": "right", "labelLimit": 200})


def _hlines(hlines: Sequence[tuple[float, str]], log: bool) -> tuple[list[Spec], pd.DataFrame]:
    hdf = pd.DataFrame(
        [{"y": float(y), "label": label} for y, label in hlines], columns=["y", "label"]
    )
    if log:
        hdf = hdf[hdf["y"] > 0]
    if hdf.empty:
        return [], hdf
    layers = [
        {
            "data": {"name": "hlines"},
            "mark": {"type": "rule", "strokeDash": [4, 3], "color": REF_COLOR},
            "encoding": {"y": _q("y")},
        },
        {
            "data": {"name": "hlines"},
            "mark": {"type": "text", "align": "left", "dx": 4, "dy": -6, "color": REF_COLOR},
            "encoding": {"y": _q("y"), "x": {"value": 0}, "text": _n("label")},
        },
    ]
    return layers, hdf


def _stops(stops: Sequence[StopMark]) -> tuple[list[Spec], pd.DataFrame]:
    sdf = pd.DataFrame(
        [{"step": s.step, "rule": s.rule, "run": s.run} for s in stops],
        columns=["step", "rule", "run"],
    )
    if sdf.empty:
        return [], sdf
    tooltip = [_n("run"), _n("rule"), _q("step")]
    layers = [
        {
            "data": {"name": "stops"},
            "mark": {"type": "rule", "color": STOP_COLOR, "strokeWidth": 2},
            "encoding": {"x": _q("step"), "tooltip": tooltip},
        },
        {
            "data": {"name": "stops"},
            "mark": {
                "type": "text",
                "align": "right",  # left of the line: a stop is often a run's last step
                "dx": -3,
                "baseline": "bottom",
                "color": STOP_COLOR,
            },
            "encoding": {"x": _q("step"), "y": {"value": STOP_LABEL_DY}, "text": _n("rule")},
        },
    ]
    return layers, sdf


def hover_frame(data: pd.DataFrame, max_steps: int = HOVER_STEPS) -> pd.DataFrame:
    """Step -> one column per line (named by ``key``), at most ``max_steps`` even steps.

    Each line's value at a step is its newest point at or before it (downsampled series
    of different runs keep different steps), rounded to 4 significant digits because the
    tooltip shows the row as it is. Few steps keep the hover layer cheap: its rules and
    the nearest-point search scale with them, not with the drawn points.
    """
    if data.empty:
        return pd.DataFrame({"step": []})
    last = data.drop_duplicates(["step", "key"], keep="last")
    wide = last.pivot(index="step", columns="key", values="value").sort_index()
    wide = wide.ffill().where(wide.bfill().notna())  # fill gaps, never past a line's end
    if len(wide) > max_steps:
        pick = sorted({round(i * (len(wide) - 1) / (max_steps - 1)) for i in range(max_steps)})
        wide = wide.iloc[pick]
    wide = pd.DataFrame(_sig4(wide.to_numpy(dtype=float)), index=wide.index, columns=wide.columns)
    wide.columns = [str(c) for c in wide.columns]
    return wide.reset_index()


def _sig4(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to 4 significant digits (zeros and NaN kept)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        mag = np.where(x == 0, 1.0, 10.0 ** (np.floor(np.log10(np.abs(x))) - 3))
        return np.where(np.isfinite(x) & (x != 0), np.round(x / mag) * mag, x)


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
) -> Spec:
    """Lines of ``value`` over ``step`` per ``color_by`` (and ``dash_by``) with a hover rule.

    ``df`` has columns step, value, run (+ the dash column). Non-finite values (NaN) are
    left out, so a line runs straight across them (the page lists where they are). On a
    log axis non-positive values cannot be drawn and are left out too.
    """
    cols = ["step", "value", color_by, *([dash_by] if dash_by else [])]
    data = df.dropna(subset=["value"])[cols]
    if log:
        data = data[data["value"] > 0]
    # the hover rule's tooltip is its whole row: step, then one column per line, named
    # by the line's label (a whole-row tooltip costs Vega one expression, not one per field)
    key_cols = [color_by, dash_by] if dash_by else [color_by]
    labels = data[key_cols[0]].astype(str)
    for col in key_cols[1:]:
        labels = labels + " · " + data[col].astype(str)
    hover = hover_frame(data.assign(key=labels))
    x = _q("step", "step", axis={"format": "d", "tickMinStep": 1})
    scale = {"type": "log"} if log else {"zero": False}
    y = _q("value", y_title, scale={**scale, "padding": Y_PAD_PX})
    line_enc: dict[str, Any] = {
        "x": x,
        "y": y,
        "color": _color(color_by, color_by, data[color_by].nunique()),
    }
    if dash_by:
        line_enc["strokeDash"] = _n(dash_by, dash_by)
    layers: list[Spec] = [
        {
            "data": {"name": "series"},
            "mark": {"type": "line", "strokeWidth": 1.6},
            "encoding": line_enc,
        },
        {
            "data": {"name": "hover"},
            "mark": {"type": "rule", "color": "#888888", "tooltip": {"content": "data"}},
            "encoding": {
                "x": _q("step"),
                "opacity": {
                    "condition": {"param": "hover", "empty": False, "value": 0.6},
                    "value": 0,
                },
            },
            "params": [
                {
                    "name": "hover",
                    "select": {
                        "type": "point",
                        "fields": ["step"],
                        "nearest": True,
                        "on": "pointerover",
                        "clear": "pointerout",
                    },
                }
            ],
        },  # fmt: skip
    ]
    datasets = _datasets(series=data, hover=hover)
    h_layers, hdf = _hlines(hlines, log)
    if h_layers:
        layers += h_layers
        datasets["hlines"] = _no_index(hdf)
    s_layers, sdf = _stops(stops)
    if s_layers:
        layers += s_layers
        datasets["stops"] = _no_index(sdf)
    return {
        "title": title,
        "height": HEIGHT,
        "config": CONFIG,
        "layer": layers,
        "datasets": datasets,
    }


def ecdf_chart(df: pd.DataFrame, *, title: str) -> Spec:
    """ECDF step lines of |log-ratio| (log x axis) per run, dashed by step label.

    ``df`` has columns value, cdf, run, step (a label such as ``"step 12"``).
    """
    data = df[df["value"] > 0][["value", "cdf", "run", "step"]]
    labels = sorted(data["step"].unique(), key=lambda s: int(str(s).split()[-1]))
    return {
        "title": title,
        "height": HEIGHT,
        "config": CONFIG,
        "mark": {"type": "line", "interpolate": "step-after", "strokeWidth": 1.6},
        "encoding": {
            "x": _q("value", "|log-ratio|", scale={"type": "log"}),
            "y": _q("cdf", "fraction of tokens <= x", scale={"domain": [0, 1]}),
            "color": _color("run", "run", data["run"].nunique()),
            "strokeDash": _n("step", "step", sort=labels),
            "tooltip": [
                _n("run"),
                _n("step"),
                _q("value", "|log-ratio|", format=".3g"),
                _q("cdf", "cdf", format=".3f"),
            ],
        },  # fmt: skip
        "data": {"name": "ecdf"},
        "datasets": _datasets(ecdf=data),
    }


def outcome_chart(df: pd.DataFrame) -> Spec:
    """One point per run: final score against mean gap (log x), colour = strategy,
    shape = status; the zero score line drawn. ``df``: run, strategy, status, score, gap.
    """
    data = df.dropna(subset=["score", "gap"])
    data = data[data["gap"] > 0][["run", "strategy", "status", "score", "gap"]]
    return {
        "title": "Final score vs mean gap, one point per run",
        "height": HEIGHT,
        "config": CONFIG,
        "layer": [
            {
                "data": {"name": "runs"},
                "mark": {"type": "point", "size": 80, "filled": True, "opacity": 0.85},
                "encoding": {
                    "x": _q("gap", "mean probability gap", scale={"type": "log"}),
                    "y": _q("score", "final score"),
                    "color": _color("strategy", "strategy", data["strategy"].nunique()),
                    "shape": _n("status", "status"),
                    "tooltip": [
                        _n("run"),
                        _n("strategy"),
                        _n("status"),
                        _q("score", "score", format=".3f"),
                        _q("gap", "gap", format=".4g"),
                    ],
                },  # fmt: skip
            },
            {
                "data": {"values": [{"y": 0.0}]},
                "mark": {"type": "rule", "strokeDash": [4, 3], "color": REF_COLOR},
                "encoding": {"y": _q("y")},
            },
        ],
        "datasets": _datasets(runs=data),
    }
