"""Vega-Lite chart specs for the pages, drawn with ``st.vega_lite_chart``.

One view per figure with every chosen run on one axis (colour = run, dash = slice), a
hover rule that shows every run's value at the nearest step in one tooltip (W&B style),
optional horizontal reference lines (zero for the score, the token budget for lengths)
and the stop step of each stopped run as a red vertical rule labelled with the rule name
(labels laid out by ``ui.labels`` so they never overlap). ECDFs draw |log-ratio| on a log
axis. ``ui.sweep_charts`` has the sweep page's views.

A page's views go to the browser as **one** chart (:func:`concat`): the browser then
compiles, lays out and draws one Vega view instead of one per figure, which measured
about 0.1 s per figure on a 2-core VM (bench/ui_bench.py). The specs are plain dicts with
their data as named pandas datasets (Streamlit ships them as Arrow). They are written by
hand rather than through Altair because Altair's object construction and schema
validation cost about 0.1 s per chart. Frames come from ``ui.data``; nothing here reads
the store.

Length (~450 lines): the line chart with its hover, reference lines and stop marks is
most of it; the views share encodings and the concat, so they stay in one module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from gapwatch.ui import labels

HEIGHT = 300
WIDTH = 420
"""Plot width of one view in a page's concatenated chart (two columns, the shared legend
and the axes fit a 1,280 px window)."""
ASSUMED_WIDTH = 300
"""Plot width assumed for laying out stop labels when a chart stretches to its container
(the narrowest it is drawn): labels then get at least the room they need."""
PALETTE = "tableau10"
STOP_COLOR = "#d62728"
REF_COLOR = "#555555"
Y_PAD_PX = 8
"""Pixels the y domain is widened by at each end, so a line at a series' extreme (a
compressed run's gap near 0.7 on a log axis niced to 1, an ESS of exactly 1) is drawn
inside the frame rather than on its edge."""
STOP_LABEL_DY = -4
"""The lowest row of stop labels sits this far above the plot area (y = 0 is its top
edge), so a label never covers a line: inside the plot it hid a line along the top."""
TITLE_PAD = 6
"""Pixels between a view's title and what the view draws below it."""
HOVER_STEPS = 100
"""Steps the hover rule snaps to (see :func:`hover_frame`)."""

Spec = dict[str, Any]
CONFIG: Spec = {"aria": False, "mark": {"aria": False, "invalid": None}}
USERMETA: Spec = {"embedOptions": {"renderer": "svg"}}
"""Always SVG: Streamlit would switch a chart of many rule or point marks to canvas by
itself, and the browser tests read the drawn marks from the SVG."""
"""No ARIA attributes per mark (with thousands of points they cost more to draw than the
marks; the page states the same figures in its tables and captions), and no per-datum
invalid-value filter: the frames hold no NaN (dropped here, listed by the page), and
Streamlit's CSP-safe Vega interprets every per-datum expression, which is slow."""


StopMark = labels.Stop
"""A stopped run's stop step, drawn as a red vertical rule under its label."""


def _no_index(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with an empty string index: Streamlit hands a numeric index to Vega as an
    extra ``(index)`` field on every row (shown in whole-row tooltips, converted per row).
    """
    return df.set_axis(pd.Index([""] * len(df), dtype=object), axis=0)


def named_datasets(**frames: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {name: _no_index(df) for name, df in frames.items()}


def quant(field: str, title: str | None = None, **kw: Any) -> dict[str, Any]:
    enc: dict[str, Any] = {"field": field, "type": "quantitative", **kw}
    if title is not None:
        enc["title"] = title
    return enc


def nominal(field: str, title: str | None = None, **kw: Any) -> dict[str, Any]:
    enc: dict[str, Any] = {"field": field, "type": "nominal", **kw}
    if title is not None:
        enc["title"] = title
    return enc


LEGEND_RIGHT: Spec = {"orient": "right", "labelLimit": 220}
LEGEND_TOP: Spec = {"orient": "top", "columns": 3, "labelLimit": 330, "title": None}
"""The run legend of a page's concatenated chart: above all its views, three columns,
so long run names need no width beside two columns of plots."""


def color_enc(
    field: str,
    title: str,
    n: int = 10,
    domain: Sequence[str] | None = None,
    legend: Spec | None = None,
) -> dict[str, Any]:
    """Colour by ``field``; ``domain`` fixes the order (legend and colours) when given."""
    scheme = PALETTE if n <= 10 else "tableau20"  # 20 distinct colours before any repeat
    scale: dict[str, Any] = {"scheme": scheme}
    if domain is not None:
        scale["domain"] = list(domain)
    return nominal(field, title, scale=scale, legend=legend or LEGEND_RIGHT)


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
            "encoding": {"y": quant("y")},
        },
        {
            "data": {"name": "hlines"},
            "mark": {"type": "text", "align": "left", "dx": 4, "dy": -6, "color": REF_COLOR},
            "encoding": {"y": quant("y"), "x": {"value": 0}, "text": nominal("label")},
        },
    ]
    return layers, hdf


def _stops(
    stops: Sequence[StopMark], x_max: float, width_px: float
) -> tuple[list[Spec], dict[str, pd.DataFrame]]:
    """Layers and datasets of the stop rules and their labels."""
    if not stops:
        return [], {}
    sdf = pd.DataFrame(
        [{"step": s.step, "rule": s.rule, "run": s.run} for s in stops],
        columns=["step", "rule", "run"],
    )
    placed = labels.layout(stops, x_max=x_max, width_px=width_px)
    ldf = pd.DataFrame(
        [
            {
                "step": lab.step,
                "y": STOP_LABEL_DY - lab.row * labels.ROW_PX,
                "label": lab.text,
                "runs": lab.runs,
                "side": lab.side,
            }
            for lab in placed
        ],
        columns=["step", "y", "label", "runs", "side"],
    )
    layers: list[Spec] = [
        {
            "data": {"name": "stops"},
            "mark": {"type": "rule", "color": STOP_COLOR, "strokeWidth": 2},
            "encoding": {
                "x": quant("step"),
                "tooltip": [nominal("run"), nominal("rule"), quant("step")],
            },
        }
    ]
    datasets = {"stops": sdf}
    for side, align, dx in (("left", "right", -labels.SIDE_PX), ("right", "left", labels.SIDE_PX)):
        part = ldf[ldf["side"] == side].drop(columns="side")
        if part.empty:
            continue
        datasets[f"stop_labels_{side}"] = part
        layers.append(
            {
                "data": {"name": f"stop_labels_{side}"},
                "mark": {
                    "type": "text",
                    "align": align,
                    "dx": dx,
                    "baseline": "bottom",
                    "color": STOP_COLOR,
                },
                "encoding": {
                    "x": quant("step"),
                    "y": quant("y", scale=None),  # pixels above the plot, from the layout
                    "text": nominal("label"),
                    "tooltip": [nominal("label", "rule"), nominal("runs", "runs (stop step)")],
                },
            }  # fmt: skip
        )
    return layers, datasets


def view_title(text: str) -> Spec:
    """A view title, left-aligned. Vega places it above everything the view draws (its
    frame is the view's bounds), so stacked stop labels push it up by themselves."""
    return {"text": text, "offset": TITLE_PAD, "anchor": "start"}


def view(title: str, width: int | None, body: Spec, **data: pd.DataFrame) -> Spec:
    """One view: its title, height, the shared config, ``body`` (a ``mark`` with its
    ``encoding`` and ``data``, or a ``layer`` list) and its named datasets; ``width``
    None leaves the width to the container."""
    spec: Spec = {"title": view_title(title), "height": HEIGHT, "config": CONFIG,
                  "usermeta": USERMETA, **body, "datasets": named_datasets(**data)}  # fmt: skip
    if width is not None:
        spec["width"] = width
    return spec


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
    color_domain: Sequence[str] | None = None,
    width: int | None = None,
) -> Spec:
    """Lines of ``value`` over ``step`` per ``color_by`` (and ``dash_by``) with a hover rule.

    ``df`` has columns step, value, run (+ the dash column). Non-finite values (NaN) are
    left out, so a line runs straight across them (the page lists where they are). On a
    log axis non-positive values cannot be drawn and are left out too. ``width``: the plot
    width in pixels (None: stretch to the container); ``color_domain``: the runs in the
    order their colours and legend entries take.
    """
    cols = ["step", "value", color_by, *([dash_by] if dash_by else [])]
    data = df.dropna(subset=["value"])[cols]
    if log:
        data = data[data["value"] > 0]
    # the hover rule's tooltip is its whole row: step, then one column per line, named
    # by the line's label (a whole-row tooltip costs Vega one expression, not one per field)
    key_cols = [color_by, dash_by] if dash_by else [color_by]
    keys = data[key_cols[0]].astype(str)
    for col in key_cols[1:]:
        keys = keys + " · " + data[col].astype(str)
    hover = hover_frame(data.assign(key=keys))
    # a fixed x domain, so ui.labels can place the stop labels in pixels
    last = [int(data["step"].max())] if not data.empty else []
    x_max = float(max([1, *last, *(s.step for s in stops)]))
    x = quant(
        "step", "step", axis={"format": "d", "tickMinStep": 1},
        scale={"domain": [0, x_max], "nice": False},
    )  # fmt: skip
    scale = {"type": "log"} if log else {"zero": False}
    y = quant("value", y_title, scale={**scale, "padding": Y_PAD_PX})
    n_colors = len(color_domain) if color_domain is not None else data[color_by].nunique()
    line_enc: dict[str, Any] = {
        "x": x,
        "y": y,
        "color": color_enc(
            color_by, color_by, n_colors, color_domain, LEGEND_TOP if width else None
        ),
    }
    if dash_by:
        line_enc["strokeDash"] = nominal(dash_by, dash_by)
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
                "x": quant("step"),
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
    datasets = {"series": data, "hover": hover}
    h_layers, hdf = _hlines(hlines, log)
    if h_layers:
        layers += h_layers
        datasets["hlines"] = hdf
    s_layers, s_sets = _stops(stops, x_max, width or ASSUMED_WIDTH)
    layers += s_layers
    datasets.update(s_sets)
    return view(title, width, {"layer": layers}, **datasets)


def ecdf_chart(
    df: pd.DataFrame,
    *,
    title: str,
    color_domain: Sequence[str] | None = None,
    width: int | None = None,
) -> Spec:
    """ECDF step lines of |log-ratio| (log x axis) per run, dashed by step label.

    ``df`` has columns value, cdf, run, step (a label such as ``"step 12"``).
    """
    data = df[df["value"] > 0][["value", "cdf", "run", "step"]]
    steps = sorted(data["step"].unique(), key=lambda s: int(str(s).split()[-1]))
    n_colors = len(color_domain) if color_domain is not None else data["run"].nunique()
    body: Spec = {
        "mark": {"type": "line", "interpolate": "step-after", "strokeWidth": 1.6},
        "encoding": {
            "x": quant("value", "|log-ratio|", scale={"type": "log"}),
            "y": quant("cdf", "fraction of tokens <= x", scale={"domain": [0, 1]}),
            "color": color_enc("run", "run", n_colors, color_domain, LEGEND_TOP if width else None),
            "strokeDash": nominal("step", "step", sort=steps),
            "tooltip": [
                nominal("run"),
                nominal("step"),
                quant("value", "|log-ratio|", format=".3g"),
                quant("cdf", "cdf", format=".3f"),
            ],
        },  # fmt: skip
        "data": {"name": "ecdf"},
    }
    return view(title, width, body, ecdf=data)


def turn_chart(
    df: pd.DataFrame,
    *,
    title: str,
    y_title: str,
    turns: Sequence[str],
    log: bool = False,
    color_domain: Sequence[str] | None = None,
    width: int | None = None,
) -> Spec:
    """One line with points per run across interaction-index buckets (``turns`` in order):
    which round of a multi-turn episode diverges most. ``df``: run, turn, gap, steps."""
    data = df[df["gap"] > 0] if log else df
    n_colors = len(color_domain) if color_domain is not None else data["run"].nunique()
    y: dict[str, Any] = quant("gap", y_title)
    if log:
        y["scale"] = {"type": "log"}
    body: Spec = {
        "mark": {"type": "line", "point": True, "strokeWidth": 1.6},
        "encoding": {
            "x": nominal(
                "turn", "interaction (turn) index", sort=list(turns), axis={"labelAngle": 0}
            ),
            "y": y,
            "color": color_enc("run", "run", n_colors, color_domain, LEGEND_TOP if width else None),
            "tooltip": [
                nominal("run"),
                nominal("turn"),
                quant("gap", y_title, format=".3g"),
                quant("steps", "steps averaged"),
            ],
        },  # fmt: skip
        "data": {"name": "turns"},
    }
    return view(title, width, body, turns=data[["run", "turn", "gap", "steps"]])


def _renamed(obj: Any, prefix: str) -> Any:
    """A view spec with its dataset and param names prefixed, so that several views can
    share one top-level spec without their names clashing."""
    if isinstance(obj, list):
        return [_renamed(x, prefix) for x in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: _renamed(v, prefix) for k, v in obj.items()}
    if set(obj) == {"name"} or "select" in obj:  # {"data": {"name": ...}}, a param
        out["name"] = prefix + str(obj["name"])
    if "param" in obj:  # a condition on a param
        out["param"] = prefix + str(obj["param"])
    return out


def concat(
    specs: Sequence[Spec], *, columns: int = 2, independent: Sequence[str] = ("strokeDash",)
) -> Spec:
    """One chart holding the views ``specs``, ``columns`` to a row (see :func:`grid`)."""
    rows = [list(specs[i : i + columns]) for i in range(0, len(specs), columns)]
    return grid(rows, independent=independent)


def grid(rows: Sequence[Sequence[Spec]], *, independent: Sequence[str] = ("strokeDash",)) -> Spec:
    """One chart holding the views of ``rows``, row by row.

    Each view keeps its own size (give it a ``width``: a concatenated chart cannot
    stretch to its container) and its own axes. Channels in ``independent`` get a scale
    and a legend per row (by default the dash, which means slices in one figure and steps
    in another); the others share one scale and one legend across all views, so a run has
    the same colour in every figure. Rows are ``hconcat`` views inside a ``vconcat``:
    Streamlit draws a bare ``concat`` with ``columns`` as an empty chart.
    """
    out_rows: list[Spec] = []
    datasets: dict[str, pd.DataFrame] = {}
    skip = ("datasets", "config", "usermeta")
    i = 0
    for row in rows:
        views = []
        for spec in row:
            prefix = f"v{i}_"
            i += 1
            views.append(_renamed({k: v for k, v in spec.items() if k not in skip}, prefix))
            datasets.update({prefix + name: df for name, df in spec.get("datasets", {}).items()})
        out_rows.append({"hconcat": views})
    resolve = {ch: "independent" for ch in independent}
    return {
        "vconcat": out_rows,
        "spacing": 28,
        "autosize": {"type": "pad", "contains": "padding"},  # "fit" cannot size a concat
        "resolve": {"scale": resolve, "legend": dict(resolve)},
        "config": CONFIG,
        "usermeta": USERMETA,
        "datasets": datasets,
    }
