"""The stop rules, each registered by name with its thresholds and their evidence.

Every default carries, in its docstring, the measurement or the fact it rests on. The
thresholds of ``score_collapse``, ``constant_advantage``, ``length_runaway``,
``post_tool_tail_growth`` and ``ess_collapse`` were chosen by ``bench/calibrate_rules.py``
on the ground truth (``bench/ground_truth.py``: 140 runs of the quick preset carried to
step 30 without stopping; collapsed = last-5 mean score below 0.05, onset = first step
from which the score stays below it): per rule, the setting with no false stop on seeds
0-1 that catches the most collapses soonest, then scored on held-out seeds 2-3
(bench/results/calibrate_rules.md). All rules together, held out: 57 of 59 collapses
caught, median 2 steps after onset, no control stopped.
Conventions: see ``orchestrator.rules``.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field
from pydantic.dataclasses import dataclass as checked

from correction import names as N
from orchestrator.rules.base import (
    CHECKED,
    ControlView,
    Decision,
    Evidence,
    Row,
    Rule,
    State,
    Streak,
    StreakRule,
    register,
    value,
)
from workers.validation import Float, Int


@register("score_collapse")
@checked(frozen=True, kw_only=True, config=CHECKED)
class ScoreCollapse(StreakRule):
    """Mean score below ``floor``, or below the control's at the same step by
    ``control_margin``, for ``k`` steps in a row. Without a control only the floor test."""

    feeds = (frozenset({N.SCORE_MEAN}),)
    control_feeds = frozenset({N.SCORE_MEAN})

    k: Int = Field(default=2, ge=1)  # type: ignore[misc]
    """Consecutive crossing steps needed. The requirement is a stop within 2 steps of the
    onset; k=2 stops at the 2nd crossing step, one step of slack for a single dip.
    Calibration (k in 2..6, seeds 0-1): k=2 catches the most with no false stop; k=3
    caught 49 of 54 instead of 53, with 278 steps late in total instead of 172."""
    floor: Float | None = 0.01
    """Score below this crosses. A collapsed policy of the quick preset neither calls the
    tool nor solves tasks and scores -0.1 to +0.01 (ground truth), so the floor sits just
    above it; a dead run scoring exactly 0 never crosses a floor of 0 (calibration,
    seeds 0-1, floor alone: 0.01 caught 50 of 54 collapses, 168 steps late in total;
    0.0 caught 49 of 54, 295 steps late). No dense control scored below +0.025 at any
    step (8 seeds)."""
    control_margin: Float | None = 0.6
    """Also crosses where the control's score at the same step exceeds this run's by
    more than this. Calibration (None, 0.3-0.6): 0.6 is the one that never stopped a
    treatment that did not collapse on seeds 0-1; at 0.5 (the old default) it stopped
    stalling runs that score about 0.03-0.1 beside a control at 0.6 (7 false stops on
    seeds 0-1). The learned control reaches 0.5-0.6, so the margin mostly speeds up a
    stop that the floor makes anyway."""
    grace: Int = Field(default=2, ge=0)
    """The first 2 steps are noisy; with k=2 a run below zero from step 1 stops at step
    3, still within the 2-step requirement."""

    def _control_score(self, control: ControlView, step: int) -> float | None:
        c = control.at(step)
        return None if c is None else value(c, N.SCORE_MEAN)

    def crosses(self, row: Row, control: ControlView, step: int) -> bool:
        s = value(row, N.SCORE_MEAN)
        if s is None:
            return False
        if self.floor is not None and s < self.floor:
            return True
        c = self._control_score(control, step)
        return self.control_margin is not None and c is not None and c - s > self.control_margin

    def evidence(self, state: Streak, row: Row, control: ControlView, step: int) -> Evidence:
        s = value(row, N.SCORE_MEAN) or 0.0
        ev: Evidence = {"score": s, "k": self.k, "streak": state.n}
        below_floor = self.floor is not None and s < self.floor
        ev["crossed"] = "floor" if below_floor else "control_margin"
        if self.floor is not None:
            ev["floor"] = self.floor
        c = self._control_score(control, step)
        if c is not None and self.control_margin is not None:
            ev["control_score"] = c
            ev["control_margin"] = self.control_margin
        return ev


@register("length_runaway")
@checked(frozen=True, kw_only=True, config=CHECKED)
class LengthRunaway(StreakRule):
    """Interactions cut at the budget (clip ratio >= ``clip_level``) or tokens per
    interaction >= ``budget_frac`` of the budget, for ``k`` steps in a row."""

    feeds = (
        frozenset({N.CLIP_RATIO}),
        frozenset({N.RESPONSE_LENGTH_MEAN, N.RESPONSE_BUDGET}),
    )

    k: Int = Field(default=2, ge=1)  # type: ignore[misc]
    """Seed (DESIGN.md): tokens per interaction reached the budget by step 5 and the score
    fell below zero at step 6; k=2 stops at step 6 at the latest. Calibration: k=2."""
    clip_level: Float | None = Field(default=0.3, gt=0, le=1)
    """Clip ratio at or above this crosses (truncated actions are unparseable). The
    Post-Training Toolkit's level; calibration (0.3, 0.5): 0.3 with no false stop on seeds
    0-1 (22 of 54 caught; 0.5: 21), a healthy tool-call action being a few dozen tokens.
    Most collapses of the quick preset die as short wrong guesses, not at the budget, so
    this rule is the early one for the DESIGN.md kind of collapse, not a general one."""
    budget_frac: Float | None = Field(default=0.9, gt=0, le=1)
    """Mean tokens per interaction at or above this fraction of
    ``response_length/budget`` crosses (seed: the mean ran to the budget itself)."""
    grace: Int = Field(default=1, ge=0)

    def _crossing(self, row: Row) -> Evidence | None:
        clip = value(row, N.CLIP_RATIO)
        if self.clip_level is not None and clip is not None and clip >= self.clip_level:
            return {"clip_ratio": clip, "clip_level": self.clip_level}
        length = value(row, N.RESPONSE_LENGTH_MEAN)
        budget = value(row, N.RESPONSE_BUDGET)
        if (
            self.budget_frac is not None
            and length is not None
            and budget is not None
            and budget > 0
            and length >= self.budget_frac * budget
        ):
            return {"response_length": length, "budget": budget, "budget_frac": self.budget_frac}
        return None

    def crosses(self, row: Row, control: ControlView, step: int) -> bool:
        return self._crossing(row) is not None

    def evidence(self, state: Streak, row: Row, control: ControlView, step: int) -> Evidence:
        return self._crossing(row) or {}


@register("constant_advantage")
@checked(frozen=True, kw_only=True, config=CHECKED)
class ConstantAdvantage(StreakRule):
    """Zero-advantage group fraction >= ``frac`` for ``k`` steps in a row (where a log has
    no such figure, a step whose score min equals its max counts as fraction 1)."""

    feeds = (
        frozenset({N.ZERO_ADV_FRAC}),
        frozenset({N.SCORE_MIN, N.SCORE_MAX}),
    )

    frac: Float = 0.8
    """Four groups in five with equal rewards: little is learned. Calibration (0.8-1.0):
    0.8 catches 47 of 54 collapses on seeds 0-1 with no false stop, guarded by
    ``score_at_most``; a collapsed run of the quick preset has most but not all groups
    uniform (an occasional lucky guess), so the old 0.95 with k=3 caught 29 of 54."""
    k: Int = Field(default=2, ge=1)  # type: ignore[misc]
    """Calibration (k in 2..5): 2 steps, no false stop, the least delay (0.95 with k=2:
    38 of 54)."""
    score_at_most: Float | None = 0.0
    """Only cross where the mean score is at or below this (None: the fraction alone). A
    group whose answers are all correct has zero advantage too; a run that solved the task
    is not collapsing, and a dense control must never be stopped. Seed: the constant was
    -0.1. Where a step has no mean score, the fraction alone decides."""
    grace: Int = Field(default=2, ge=0)

    def _frac(self, row: Row) -> float | None:
        f = value(row, N.ZERO_ADV_FRAC)
        if f is not None:
            return f
        lo, hi = value(row, N.SCORE_MIN), value(row, N.SCORE_MAX)
        if lo is None or hi is None:
            return None
        return 1.0 if lo == hi else 0.0

    def crosses(self, row: Row, control: ControlView, step: int) -> bool:
        f = self._frac(row)
        if f is None or f < self.frac:
            return False
        s = value(row, N.SCORE_MEAN)
        return self.score_at_most is None or s is None or s <= self.score_at_most

    def evidence(self, state: Streak, row: Row, control: ControlView, step: int) -> Evidence:
        ev: Evidence = {"zero_group_frac": self._frac(row) or 0.0, "frac": self.frac}
        if value(row, N.ZERO_ADV_FRAC) is None:
            ev["source"] = "score min == max"
        s = value(row, N.SCORE_MEAN)
        if s is not None:
            ev["score"] = s
        return ev


@dataclass
class TailState(Streak):
    """The first steps' p95s (the baseline) and the latest ``window`` steps' p95s."""

    early: list[tuple[float | None, float | None]] = field(default_factory=list)
    late: deque[tuple[float | None, float | None]] = field(default_factory=deque)
    baseline: tuple[float | None, float | None] | None = None
    """The early medians (post-tool, text), once the baseline steps are all in."""
    growth: Evidence | None = None


@register("post_tool_tail_growth")
@checked(frozen=True, kw_only=True, config=CHECKED)
class PostToolTailGrowth(Rule):
    """Rolling post-tool p95 |log-ratio| has grown ``factor`` times over its early baseline
    and ``factor`` times more than the text slice's p95 has grown, for ``k`` steps."""

    feeds = (frozenset({N.tail("post_tool", "p95"), N.tail("text", "p95")}),)

    factor: Float = Field(default=3.0, gt=1)
    """DESIGN.md: instability first shows as the post-tool p95 stretching while text-only
    tails stay flat. Measured on the ground truth (bench/calibrate_rules.md), it does not
    separate collapse from health at this scale: up to 2 steps after onset, collapsed runs'
    post-tool p95 grew by a median of 1.04x (p90 1.97x, max 5.47x) over the baseline,
    while runs that did not collapse grew *more* (median 2.46x, max 6.82x), dense controls
    1x. 3x (calibration: 2x-10x) is the lowest factor without a false stop on seeds 0-1;
    it catches 9 of 54 collapses there (6 of 59 held out, with 2 false stops), so the
    rule stays on as a late witness, and score_collapse does the catching."""
    baseline_steps: Int = Field(default=3, ge=1)
    """The first steps whose median p95 is the baseline (step 1 is before any update)."""
    window: Int = Field(default=3, ge=1)
    """Rolling window: the median of the latest ``window`` p95 values, so a one-step
    spike does not move it."""
    min_tail: Float = Field(default=0.01, gt=0)
    """Tails are floored at this |log-ratio| before taking ratios: below 1% the ratio is
    numerical noise (DESIGN.md: bf16 sampler vs fp32 trainer, mean gap 0.0008), and a
    dense fp32 sampler gives exactly 0."""
    k: Int = Field(default=2, ge=1)
    """Consecutive steps the growth must hold."""
    grace: Int = Field(default=3, ge=0)

    def start(self) -> TailState:
        return TailState(late=deque(maxlen=self.window))

    def _med(self, pairs: Iterable[tuple[float | None, float | None]], i: int) -> float | None:
        vals = [v for p in pairs if (v := p[i]) is not None]
        return max(statistics.median(vals), self.min_tail) if vals else None

    def update(self, state: TailState, row: Row, control: ControlView, step: int) -> None:
        p95s = (value(row, N.tail("post_tool", "p95")), value(row, N.tail("text", "p95")))
        if state.seen <= self.baseline_steps:
            state.early.append(p95s)
        else:
            state.late.append(p95s)
        state.growth = self._growth(state)
        state.n = state.n + 1 if self._crosses(state.growth) else 0

    def _growth(self, state: TailState) -> Evidence | None:
        """Growth figures at the latest step; None if not computable yet."""
        if len(state.late) < self.window:
            return None
        if state.baseline is None:  # the first steps never change: their medians once
            state.baseline = (self._med(state.early, 0), self._med(state.early, 1))
        bp, bt = state.baseline
        rp, rt = self._med(state.late, 0), self._med(state.late, 1)
        if bp is None or bt is None or rp is None or rt is None:
            return None
        return {
            "post_tool_p95": rp,
            "post_tool_baseline": bp,
            "post_tool_growth": rp / bp,
            "text_p95": rt,
            "text_baseline": bt,
            "text_growth": rt / bt,
        }

    def _crosses(self, g: Evidence | None) -> bool:
        if g is None:
            return False
        post, text = float(g["post_tool_growth"]), float(g["text_growth"])
        return post >= self.factor and post / max(text, 1.0) >= self.factor

    def decide(self, state: TailState, row: Row, control: ControlView, step: int) -> Decision:
        if state.n < self.k:
            return self._go_on(step)
        ev: Evidence = {**(state.growth or {}), "factor": self.factor, "window": self.window}
        # the streak is reported up to k: the steps the decision needed
        return Decision("stop", self.name, step, {**ev, "k": self.k, "streak": self.k})


@dataclass
class EssState(Streak):
    """The ESS values of the first ``baseline_steps`` steps."""

    early: list[float] = field(default_factory=list)


@register("ess_collapse")
@checked(frozen=True, kw_only=True, config=CHECKED)
class EssCollapse(StreakRule):
    """Post-tool effective sample size (a fraction in (0, 1]) that has *fallen* below
    ``floor`` for ``k`` steps in a row: its early median was at or above the floor. Where a
    log has no ``ess/post_tool``, verl's whole-batch
    ``rollout_corr/rollout_is_eff_sample_size`` is read instead."""

    feeds = (frozenset({N.ess("post_tool")}), frozenset({N.IS_ESS}))

    floor: Float = Field(default=0.05, gt=0, le=1)
    """DESIGN.md: the ESS of the importance weights falls as the post-tool tail stretches.
    Measured on the ground truth (bench/calibrate_rules.md): the lowest post-tool ESS
    after step 3 was median 0.041 in collapsed runs (up to 2 steps after onset) but
    ranged from 0.001 to 0.98, and 0.006-0.96 in runs that did not collapse; dense
    controls stay at 0.995-1. It separates poorly. 0.05 (calibration: 0.05-0.3) is the
    level with no false stop on seeds 0-1 that catches the most, and with the early-ESS
    guard below it fires on few runs (4 of 54 there, 8 of 59 held out, no false stop);
    the old 0.2 with k=3 caught none of the 54."""
    baseline_steps: Int | None = Field(default=3, ge=1)
    """The rule only fires where the median ESS of the first ``baseline_steps`` steps was
    at or above ``floor`` (None: the floor alone). Measured (examples/logs, tiny model,
    2-bit codec, lr 1e-4): the post-tool ESS is 0.01-0.68 from step 1 on while the score
    holds steady, so a low ESS from the start is the codec's gap (gap_vs_control's
    warning), not a collapse; the floor alone stopped that healthy run at step 6."""
    k: Int = Field(default=2, ge=1)  # type: ignore[misc]
    """Calibration (k in 2, 3, 5): 2."""
    grace: Int = Field(default=3, ge=0)

    def start(self) -> EssState:
        return EssState()

    def _ess(self, row: Row) -> tuple[float, str] | None:
        for nm in (N.ess("post_tool"), N.IS_ESS):
            v = value(row, nm)
            if v is not None:
                return v, nm
        return None

    def update(self, state: EssState, row: Row, control: ControlView, step: int) -> None:
        e = self._ess(row)
        if self.baseline_steps is not None and state.seen <= self.baseline_steps and e:
            state.early.append(e[0])
        super().update(state, row, control, step)

    def crosses(self, row: Row, control: ControlView, step: int) -> bool:
        e = self._ess(row)
        return e is not None and e[0] < self.floor

    def evidence(
        self, state: EssState, row: Row, control: ControlView, step: int
    ) -> Evidence | None:
        ev: Evidence = {}
        if self.baseline_steps is not None:
            # An ESS low from the start has not collapsed: the codec's gap, not a fall
            if not state.early or statistics.median(state.early) < self.floor:
                return None
            ev["baseline"] = statistics.median(state.early)
        e = self._ess(row)
        ess, src = e if e is not None else (0.0, "")
        ev.update({"ess": ess, "metric": src, "floor": self.floor})
        return ev


@dataclass
class FirstState(State):
    """The run's first step (its step and gap figures)."""

    first: dict[str, Any] | None = None


_GAPS = (N.PROBS_DIFF_MEAN, N.ABS_LOG_RATIO_MEAN)


@register("gap_vs_control")
@checked(frozen=True, kw_only=True, config=CHECKED)
class GapVsControl(Rule):
    """WARN (never stop) about the run's first step: its gap there is ``ratio`` times the
    control's first-step gap (and at least ``min_gap``). The gap is the mean
    |p_trainer - p_sampler| per token, or the mean |log-ratio| where a log lacks it.

    The decision's ``step`` is the run's first step whenever it is made: a control whose
    first step arrives after the treatment's still gets compared, and the store, the
    Stopper and replay (all keyed on run, step, rule) keep the warning once."""

    feeds = (frozenset({N.PROBS_DIFF_MEAN}), frozenset({N.ABS_LOG_RATIO_MEAN}))
    control_feeds = frozenset(_GAPS)
    control_only = True

    ratio: Float = 10.0
    """Seed: 0.61 compressed vs 0.006 dense at step 1, before any update (100x); 10x flags
    a codec an order of magnitude off while leaving room for sampler noise (bf16 vs fp32:
    0.0008)."""
    min_gap: Float = 0.01
    """A gap below this is never flagged, however small the control's (an fp32 dense
    sampler's gap is exactly 0). The tiny model's 3-bit codec gives 0.0072."""

    def start(self) -> FirstState:
        return FirstState()

    def update(self, state: FirstState, row: Row, control: ControlView, step: int) -> None:
        if state.first is None:
            state.first = {"step": step, **{k: row[k] for k in _GAPS if k in row}}

    def decide(self, state: FirstState, row: Row, control: ControlView, step: int) -> Decision:
        # Nothing to compare with until the control has reported its first step
        ctl = control.first
        if ctl is None or state.first is None:
            return self._go_on(step)
        for nm in _GAPS:
            t, c = value(state.first, nm), value(ctl, nm)
            if t is None or c is None:
                continue
            if t >= self.min_gap and t >= self.ratio * c:
                ev: Evidence = {
                    "gap": t,
                    "control_gap": c,
                    "metric": nm,
                    "times": t / c if c > 0 else "inf",
                    "ratio": self.ratio,
                    "control_step": int(ctl["step"]),
                }
                return Decision("warn", self.name, int(state.first["step"]), ev)
            return self._go_on(step)
        return self._go_on(step)


NON_FINITE_WATCHED: tuple[str, ...] = (
    N.SCORE_MEAN, N.PG_LOSS, "loss", N.GRAD_NORM, N.PROBS_DIFF_MEAN, N.ABS_LOG_RATIO_MEAN,
)  # fmt: skip
"""The score, the loss (gapwatch's and a Trainer's ``loss``), the gradient norm and the gap."""


@dataclass
class NonFiniteState(Streak):
    """Steps in a row with a non-finite figure, and those figures at the latest."""

    bad: dict[str, str] = field(default_factory=dict)


@register("non_finite")
@checked(frozen=True, kw_only=True, config=CHECKED)
class NonFinite(Rule):
    """Stop after ``k`` steps in a row in which any watched figure (``names``: the score,
    the loss, the gradient norm, the gap) is NaN or infinite.

    The one rule that reads non-finite values instead of passing over them: a NaN loss or
    an infinite gradient norm is among the most reported RL failures, and every other rule
    treats such a step as "not crossing", so without this rule a blown-up run goes on.
    Figures a step does not have are not counted."""

    feeds = tuple(frozenset({n}) for n in NON_FINITE_WATCHED)

    k: Int = Field(default=1, ge=1)
    """Steps in a row needed. One: a NaN does not heal, and the optimiser state it has
    already poisoned makes every later step meaningless."""
    names: tuple[str, ...] = NON_FINITE_WATCHED
    """The figures watched."""
    grace: Int = Field(default=0, ge=0)

    def start(self) -> NonFiniteState:
        return NonFiniteState()

    def update(self, state: NonFiniteState, row: Row, control: ControlView, step: int) -> None:
        bad = {}
        for nm in self.names:
            v = row.get(nm)
            if isinstance(v, float) and not math.isfinite(v):
                bad[nm] = "nan" if v != v else ("inf" if v > 0 else "-inf")
        state.bad = bad
        state.n = state.n + 1 if bad else 0

    def decide(self, state: NonFiniteState, row: Row, control: ControlView, step: int) -> Decision:
        if state.n < self.k:
            return self._go_on(step)
        ev: Evidence = {**state.bad, "k": self.k, "streak": state.n}
        return Decision("stop", self.name, step, ev)
