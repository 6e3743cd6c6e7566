"""Where the stop labels of a chart go, so that no two overlap.

A stopped run gets a red vertical rule at its stop step, labelled with the rule that
stopped it, above the plot area. When several runs stop at nearby steps their labels
would collide, so:

1. stops of the **same rule** whose labels would overlap share **one label**,
   ``score_collapse ×3``, whose tooltip lists the runs and their steps;
2. the remaining labels are **stacked** in rows above the plot, each label in the lowest
   row where it overlaps nothing already placed.

The layout is computed here, in pixels, from the plot width and the x domain the chart
draws (``[0, x_max]``, fixed by the chart so this arithmetic holds). Text width is an
upper estimate per character, so a label may get more room than it needs, never less
(``tests/ui/test_browser.py`` checks the drawn boxes). Pure Python: no pandas, no
Streamlit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

CHAR_PX = 7.0
"""Upper estimate of one character's width in an 11 px label (Chromium draws the
Streamlit theme's sans-serif at about 5.5-6.5 px per character)."""
GAP_PX = 6.0
"""Least horizontal space between two labels in one row."""
ROW_PX = 15
"""Vertical distance between two stacked rows of labels: the height of an 11 px label's
box as Chromium draws it (ascent and descent), so stacked boxes do not touch."""
SIDE_PX = 3
"""Distance between a label and its rule."""
LEFT_ROOM_PX = 40
"""How far left of the plot a label may reach (over the empty corner above the y axis)
before it is put right of its rule instead."""


@dataclass(frozen=True)
class Stop:
    """One stopped run: its label in the chart, the step and the rule."""

    run: str
    step: int
    rule: str


@dataclass(frozen=True)
class Label:
    """One drawn label: its text, the step of its rule, the row (0 = nearest the plot),
    the side of the rule it sits on, and the runs it stands for (the tooltip)."""

    text: str
    step: int
    row: int
    side: str
    """``"left"`` (text ends at the rule) or ``"right"`` (text starts at the rule)."""
    runs: str
    left_px: float
    right_px: float
    """The horizontal extent the layout gave the label, in plot pixels."""


def text_px(text: str) -> float:
    """Upper estimate of ``text``'s width in pixels."""
    return len(text) * CHAR_PX


def _cluster_text(rule: str, n: int) -> str:
    return rule if n == 1 else f"{rule} ×{n}"


def _clusters(stops: Sequence[Stop], px_per_step: float) -> list[list[Stop]]:
    """Stops of one rule grouped while a shared label would cover their rules anyway."""
    out: list[list[Stop]] = []
    for rule in sorted({s.rule for s in stops}):
        cur: list[Stop] = []
        for s in sorted((s for s in stops if s.rule == rule), key=lambda s: (s.step, s.run)):
            # the label of the group (with room for its count) measured from its first rule
            reach = text_px(_cluster_text(rule, len(cur) + 1)) + SIDE_PX + GAP_PX
            if cur and (s.step - cur[0].step) * px_per_step > reach:
                out.append(cur)
                cur = []
            cur.append(s)
        if cur:
            out.append(cur)
    return out


def layout(stops: Sequence[Stop], *, x_max: float, width_px: float) -> list[Label]:
    """Labels for ``stops`` on a plot ``width_px`` wide whose x domain is ``[0, x_max]``.

    Every label lies in a row above the plot; within a row no two labels' extents come
    closer than ``GAP_PX``. A label reads left of its rule (the stop is often a run's last
    step) unless that would reach more than ``LEFT_ROOM_PX`` past the plot's left edge.
    """
    if not stops:
        return []
    px_per_step = width_px / max(float(x_max), 1e-9)
    placed: list[Label] = []
    rows: list[list[tuple[float, float]]] = []
    groups = sorted(_clusters(stops, px_per_step), key=lambda g: (g[-1].step, g[0].rule))
    for group in groups:
        text = _cluster_text(group[0].rule, len(group))
        step = group[-1].step  # the rightmost rule: a left-side label then spans the group
        x = step * px_per_step
        w = text_px(text)
        side = "left" if x - SIDE_PX - w >= -LEFT_ROOM_PX else "right"
        lo, hi = (
            (x - SIDE_PX - w, x - SIDE_PX) if side == "left" else (x + SIDE_PX, x + SIDE_PX + w)
        )
        row = next(
            (i for i, taken in enumerate(rows)
             if all(hi + GAP_PX <= a or lo >= b + GAP_PX for a, b in taken)),
            len(rows),
        )  # fmt: skip
        if row == len(rows):
            rows.append([])
        rows[row].append((lo, hi))
        runs = "; ".join(f"{s.run} (step {s.step})" for s in group)
        placed.append(Label(text, step, row, side, runs, lo, hi))
    return placed
