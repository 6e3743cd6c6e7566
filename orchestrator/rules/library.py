"""The stop rules, each registered by name with its thresholds and their evidence.

Every default carries, in its docstring, the measurement or the fact it rests on. The
thresholds of ``score_collapse``, ``constant_advantage``, ``length_runaway``,
``post_tool_tail_growth`` and ``ess_collapse`` were chosen by ``bench/calibrate_rules.py``
on the ground truth (``bench/ground_truth.py``: 140 runs of the quick preset carried to
step 30 without stopping; collapsed = last-5 mean score below 0.05, onset = first step
from which the score stays below it): per rule, the setting with no false stop on seeds
0-1 that catches the most collapses soonest, then scored on held-out seeds 2-3
(bench/results/calibrate_rules.md). All rules together, held out: 57 of 59 collapses
caught, median 2 steps after onset, no control stopped. Issue 37 added what follows from
what a collapse is rather than a cut-off: ``score_collapse``'s control test in standard
errors of two step means, ``constant_advantage``'s streak that chance would rarely make
given the groups a step (and the real corpus criterion's dead run), ``length_at_cap``'s
warning and patience; bench/results/detection_bench.md and real_runs_bench.md measure
them.
Conventions: see ``orchestrator.rules``.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import Field, field_validator
from pydantic.dataclasses import dataclass as checked

from gapwatch.correction import names as N
from gapwatch.orchestrator.rules.base import (
    CHECKED,
    ControlView,
    Decision,
    Evidence,
    OnFire,
    Row,
    Rule,
    State,
    Streak,
    StreakRule,
    extend,
    register,
    value,
)
from gapwatch.workers.validation import Float, Int, check_name


def spread(row: Row) -> float | None:
    """A step's spread of rewards over its batch: ``critic/score/std``, or where a log has
    no std (verl logs mean, min and max), a quarter of the range ``max - min`` (a batch of
    a few hundred rewards spans about four standard deviations). The unit score rules
    measure in: it scales with the reward, so a test in these units holds whatever the
    reward's scale and offset."""
    sd = value(row, N.SCORE_STD)
    if sd is not None:
        return abs(sd)
    lo, hi = value(row, N.SCORE_MIN), value(row, N.SCORE_MAX)
    return None if lo is None or hi is None else abs(hi - lo) / 4


NOISE_LEAST = 5
"""Trainer steps a run must have run before its step means' noise is trusted: four
successive differences where every step is logged (with two, the estimate of a standard
deviation is off by half or more as often as not). Counted in trainer steps, so a log
written every m-th step is judged as soon as its rows cover as many steps (two rows at
least)."""
NOISE_ROWS = 5
"""Rows the noise estimate keeps at least, reaching back past ``noise_steps`` where a log
written every m-th step has fewer in that span: four differences, so that a change of
level inside the span (which the estimator takes for noise) weighs about as much as in a
log of every step. With the span's 20 steps alone, a log of every 5th step held a fall
of the score beside a flat control at z = sqrt(2 * 3) = 2.45, just under the line, until
the change had left the span, 18 steps after the log of every step had stopped it (found
by the logging-interval property test, tests/orchestrator/test_rule_invariance.py)."""


def mssd(points: Iterable[tuple[int, float]]) -> float | None:
    """The noise of a run's step means: the root of half the mean squared difference of
    successive values (von Neumann's estimator of a series' standard deviation, which a
    steady trend barely moves); None for fewer than two values."""
    vals = [v for _, v in points]
    if len(vals) < 2:
        return None
    sq = [(b - a) ** 2 for a, b in zip(vals, vals[1:], strict=False)]
    return math.sqrt(sum(sq) / (2 * len(sq)))


@dataclass
class Baseline:
    """A figure's median over the first ``steps`` trainer steps it was logged at (from
    ``start``), known once a row after them has come."""

    vals: list[float] = field(default_factory=list)
    start: int | None = None
    level: float | None = None
    span: float | None = None
    """The range (max - min) of the values in the window."""
    rms: float | None = None
    """The root mean square of the values in the window."""
    sd: float | None = None
    """The standard deviation of the values in the window (0 for one value)."""
    done: bool = False

    def feed(self, v: float | None, step: int, steps: int, *, positive: bool = False) -> None:
        """One row's value (None: not a number); ``positive``: the window starts at the
        first value above zero (a KL or a gradient norm that is 0 before any update)."""
        if self.done:
            return
        if self.start is None:
            if v is None or (positive and v <= 0):
                return
            self.start = step
        if step < self.start + steps:
            if v is not None:
                self.vals.append(v)
            return
        self.done = True
        self.level = statistics.median(self.vals) if self.vals else None
        self.span = max(self.vals) - min(self.vals) if self.vals else None
        self.rms = math.sqrt(statistics.fmean(x * x for x in self.vals)) if self.vals else None
        self.sd = statistics.pstdev(self.vals) if self.vals else None
        self.vals = []


@dataclass
class Rolling:
    """A figure's values over the latest ``window`` trainer steps, each row weighted by
    the trainer steps it stands for (those since the row before it): a log written every
    5th step and one written every step then weigh the same stretch of training alike."""

    vals: deque[tuple[int, int, float]] = field(default_factory=deque)
    """(step, the step of the row before it, value)."""
    last: int | None = None

    def feed(
        self, v: float | None, step: int, window: int, *, mean: bool = False, high: bool = False
    ) -> float | None:
        """Add the row at ``step``; the median (or ``mean``) over ``(step - window, step]``
        in trainer steps (None: no value there). The median is the lower one (``high``:
        the upper): a value crosses a rule's line only when rows standing for more than
        half the window's steps do, so a window half across a change does not cross."""
        prev = self.last if self.last is not None else step - 1
        self.last = step
        if v is not None:
            self.vals.append((step, prev, v))
        start = step - window
        while self.vals and self.vals[0][0] <= start:
            self.vals.popleft()
        if not self.vals:
            return None
        weighted = [(x, s - max(p, start)) for s, p, x in self.vals]
        total = sum(w for _, w in weighted)
        if mean:
            return sum(x * w for x, w in weighted) / total
        cum = 0
        for x, w in sorted(weighted, reverse=high):
            cum += w
            if 2 * cum >= total:
                return x
        return weighted[-1][0]  # not reached: the weights add up to the total


@dataclass
class ScoreState(Streak):
    """The early score and spread, and what crossed at the latest step."""

    early: Baseline = field(default_factory=Baseline)
    early_spread: Baseline = field(default_factory=Baseline)
    rolling: Rolling = field(default_factory=Rolling)
    best: float | None = None
    crossed: Evidence | None = None
    own: Streak = field(default_factory=Streak)
    """How long the tests against the run's own history have crossed (``k_own``); the
    state's own streak counts the control and floor tests (``k``)."""
    means: deque[tuple[int, float]] = field(default_factory=deque)
    """(step, score) of the run over the latest ``noise_steps`` trainer steps."""
    control_means: deque[tuple[int, float]] = field(default_factory=deque)
    """(step, score) of the control at the same steps (those it had reported)."""


@register("score_collapse")
@checked(frozen=True, kw_only=True, config=CHECKED)
class ScoreCollapse(StreakRule):
    """The mean score has fallen below its own early level by ``drop`` of its early spread,
    for ``k_own`` trainer steps, or below the control's at the same step by
    ``control_margin`` spreads, or by ``control_z`` standard errors of the two step means'
    difference, for ``k`` trainer steps. No absolute floor: every test is in the run's
    (or the control's) own units, so the decision is the same for any reward ``a*r + b``
    (a > 0).

    The early level is the median score of the first ``baseline_steps`` trainer steps;
    the run's unit is its early batch reward spread (:func:`spread`, root mean square
    over the early window) or the spread of its early mean scores, whichever is larger;
    the control test's is the larger of the run's and the control's batch spread at the
    step. A run that
    starts low and rises (most healthy real runs) never crosses the first test; a run
    without a control is judged by it alone."""

    feeds = (frozenset({N.SCORE_MEAN}),)
    control_feeds = frozenset({N.SCORE_MEAN, N.SCORE_STD, N.SCORE_MIN, N.SCORE_MAX})

    k: Int = Field(default=2, ge=1)  # type: ignore[misc]
    """Trainer steps the fall must last. The requirement is a stop within 2 steps of the
    onset: k=2 stops at the 2nd crossing step, one step of slack for a single dip
    (calibration on the ground truth, bench/calibrate_rules.md)."""
    drop: Float | None = Field(default=1.5, gt=0)
    """Crosses where the (smoothed) score is below its early level by more than this many
    of the run's own units. Real runs (bench/results/real_runs_bench.md): Unsloth's
    notebooks score one prompt per step, so their step means swing by several batch std
    (a healthy run from -7 to +2.5 and back between steps); at 0.4 with a 3-step early
    window (the ground truth's choice) this test stopped 25 of 40 healthy real runs, at
    1.5 with a 10-step window and 5-step median none of the held-out ones. On the ground
    truth the paired control catches the collapses (``control_margin``), this test
    speeding a few (110 of 113 at 0.4, 108 of 113 at 1.5; bench/calibrate_rules.md)."""
    control_margin: Float | None = Field(default=1.2, gt=0)
    """Crosses where the control's score at the same step exceeds this run's by more than
    this many spreads. The old absolute margin 0.6 beside a control whose batch std is
    about 0.5 (ground truth): 1.2 spreads. A spread is that of single rewards, not of a
    step's mean: a collapsed run at 0 beside a control at 0.4 whose rewards spread 0.5 is
    never 1.2 spreads below it, which is why ``control_z`` exists."""
    control_z: Float | None = Field(default=2.5, gt=0)
    """Crosses where the control's score at the same step exceeds this run's by more than
    this many standard errors of the difference of two step means. The standard error is
    estimated from the runs themselves, without their batch sizes: each run's step means
    vary from step to step by their noise (and by learning), so the root of half the mean
    squared successive difference of its step means over the latest ``noise_steps`` steps
    (von Neumann's estimator, which a steady trend barely moves) is its step mean's
    noise, and the two add in quadrature. 2.5 with ``k`` = 2: a run is judged at every
    step, so the line is set for about one false stop in a hundred 100-step runs whose
    means do not differ (each step's one-sided chance 0.01, squared for two steps in a
    row, times 100 steps; 2.33 for a known standard error, 2.5 for one estimated from
    about 20 differences); bench/results/detection_bench.md measures it on simulated
    pairs of runs alike (about one in a hundred; 2 stopped about one in ten). On
    the ground truth the spread test (``control_margin``) stopped collapses a median of
    5 and up to 25 steps after their onset, or never (a dead run's score sits 0.3-0.5
    below a control whose rewards spread 0.5); this test stops them within 2 steps of
    onset (bench/results/detection_bench.md). It stops stalls too (a run that merely
    trails its control), as the spread test did later: the ``ranking`` preset turns this
    rule off for that reason."""
    noise_steps: Int = Field(default=20, ge=NOISE_LEAST)
    """The latest trainer steps whose step means give each run's noise (``control_z``);
    the test waits for ``NOISE_LEAST`` (5) trainer steps. 20: about twenty
    differences per estimate, the basis of ``control_z``'s line (with 10 the false stops
    of runs alike about doubled, bench/results/detection_bench.md)."""
    from_best: Float | None = Field(default=None, gt=0)
    """Crosses where the (smoothed) score is below the best it has reached by more than
    this many of the run's own units (a run that learned, then lost it). Off by default:
    on the real corpus 2.0 stopped two healthy runs that drift over hundreds of steps
    (bench/results/real_runs_bench.md); the ground truth's dense controls dipped at most
    0.66 spreads below their best."""
    window: Int = Field(default=5, ge=1)
    """The tests against the run's own history read the median score over this many
    trainer steps (the control test reads the step's own score): one-prompt steps of
    real runs swing too much to judge one at a time."""
    k_own: Int | None = Field(default=None, ge=1)
    """Trainer steps a fall below the run's own history (``drop``, ``from_best``) must
    last; None: ``window`` (or ``k`` if larger), so that the fall holds over a whole
    window of steps, not over a few windows that share most of their steps. Consecutive
    windows of 5 steps share 4, so ``k`` = 2 asked next to nothing more than one window:
    on the real corpus it let chance excursions of one-prompt runs (2-4 completions a
    step, step means swinging over several spreads) stop 4 healthy runs, at steps 26-330;
    at ``window`` none, with the same dead and degenerate runs caught
    (bench/results/real_runs_bench.md). The ground truth's collapses are caught by the
    control test, which keeps ``k`` (bench/detection_bench.py)."""
    drop_without_spread: Float | None = Field(default=3.0, gt=0)
    """Where the log has no batch spread (no std, min or max: a score-only log), the unit
    is the range of the mean score over the early window, and the score must fall this
    many such ranges below the early level. The range of 3 means is noise-sized, hence
    the larger multiple; a run flat over its first steps (range 0) crosses on any fall."""
    floor: Float | None = None
    """Opt-in absolute floor: the score below this crosses too. Off by default: a floor
    depends on the reward's scale (issue 18: the old floor 0.01 stopped 7 of 8 healthy
    real runs whose rewards are negative by design or start low); set it only for a
    reward whose scale you know."""
    baseline_steps: Int = Field(default=10, ge=1)
    """The first trainer steps whose median is the early level and whose spread is the
    unit (10: three steps of a real one-prompt run give no level; the real corpus's own
    criterion reads its first 5 rows)."""
    grace: Int = Field(default=2, ge=0)
    """The first 2 steps are noisy (the early window covers them anyway)."""

    def start(self) -> ScoreState:
        return ScoreState()

    def update(self, state: ScoreState, row: Row, control: ControlView, step: int) -> None:
        s = value(row, N.SCORE_MEAN)
        state.early.feed(s, step, self.baseline_steps)
        state.early_spread.feed(spread(row), step, self.baseline_steps)
        smooth = state.rolling.feed(s, step, self.window, high=True)  # a fall crosses
        if s is not None and smooth is not None:
            state.best = smooth if state.best is None else max(state.best, smooth)
        self._remember(state, s, control, step)
        own = other = None
        if s is not None and smooth is not None:
            own = self._own(state, smooth)
            other = self._other(state, s, row, control, step)
        state.own.prev = state.prev
        extend(state.own, own is not None, step)
        extend(state, other is not None, step)
        # the evidence: a test whose streak is long enough first
        state.crossed = other if other is not None and state.n >= self.k else own or other

    def decide(self, state: ScoreState, row: Row, control: ControlView, step: int) -> Decision:
        own_k = self.k_own if self.k_own is not None else max(self.k, self.window)
        if state.crossed is None:
            return self._go_on(step)
        if state.crossed["crossed"] in ("own_early", "own_best"):
            k, n = own_k, state.own.n
        else:
            k, n = self.k, state.n
        if n < k:
            return self._go_on(step)
        return Decision("stop", self.name, step, {**state.crossed, "k": k, "streak": n})

    def _own(self, state: ScoreState, s: float) -> Evidence | None:
        """The tests against the run's own history, on ``s``: the score's median over the
        window."""
        # the run's own unit: the early batch spread (root mean square: a step whose groups
        # all scored alike has spread 0), or the spread of its early means if larger
        rms, sd = state.early_spread.rms, state.early.sd
        own = None if rms is None else max(rms, sd or 0.0)
        base = state.early.level
        # The unit: the early batch spread, or where none is logged the early range of means
        unit, drop, kind = own, self.drop, "early_spread"
        if own is None:
            unit, drop, kind = state.early.span, self.drop_without_spread, "early_range"
        if drop is not None and base is not None and unit is not None and base - s > drop * unit:
            return {"crossed": "own_early", "score": s, "early_score": base, kind: unit,
                    "drop": drop, "units_below": (base - s) / unit if unit > 0 else "inf"}  # fmt: skip
        best, top = state.best, self.from_best
        if own is not None and top is not None and best is not None and best - s > top * own:
            return {"crossed": "own_best", "score": s, "best_score": best, "early_spread": own,
                    "from_best": top, "units_below": (best - s) / own if own > 0 else "inf"}  # fmt: skip
        return None

    def _remember(
        self, state: ScoreState, s: float | None, control: ControlView, step: int
    ) -> None:
        """Keep the run's and the control's step means of the latest ``noise_steps``."""
        c_row = control.at(step)
        c = None if c_row is None else value(c_row, N.SCORE_MEAN)
        for q, v in ((state.means, s), (state.control_means, c)):
            if v is not None:
                q.append((step, v))
            while q and q[0][0] <= step - self.noise_steps and len(q) > NOISE_ROWS:
                q.popleft()

    def _other(
        self, state: ScoreState, s: float, row: Row, control: ControlView, step: int
    ) -> Evidence | None:
        """The floor and control tests, on ``s``: the score at the step."""
        if self.floor is not None and s < self.floor:
            return {"crossed": "floor", "score": s, "floor": self.floor}
        c_row = control.at(step)
        c = None if c_row is None else value(c_row, N.SCORE_MEAN)
        if c_row is None or c is None:
            return None
        units = [u for u in (spread(c_row), spread(row)) if u is not None]
        if self.control_margin is not None and units:
            unit = max(units)
            if c - s > self.control_margin * unit:
                return {"crossed": "control_margin", "score": s, "control_score": c,
                        "spread": unit, "control_margin": self.control_margin,
                        "units_below": (c - s) / unit if unit > 0 else "inf"}  # fmt: skip
        if self.control_z is not None and step >= NOISE_LEAST:
            noise = [mssd(q) for q in (state.means, state.control_means)]
            if noise[0] is None or noise[1] is None:
                return None
            se = math.hypot(noise[0], noise[1])
            if c - s > self.control_z * se and c - s > 1e-9 * (abs(c) + abs(s)):
                return {"crossed": "control_z", "score": s, "control_score": c,
                        "standard_error": se, "control_z": self.control_z,
                        "z": (c - s) / se if se > 0 else "inf"}  # fmt: skip
        return None

    def evidence(self, state: ScoreState, row: Row, control: ControlView, step: int) -> Evidence:
        return dict(state.crossed or {})


SCORE_STEPS = 10
"""The trainer steps whose median score is a :class:`Learning` reference (the run's first,
as ``score_collapse``'s early level; those before a sign)."""
SCORE_WINDOW = 10
"""At most this many of the latest trainer steps since a sign began are the score held
against the references: since the sign began, so that a score that rose with it is seen
at once, not after a window's worth of steps."""


@dataclass
class Learning:
    """Is the run's score improving while a sign lasts? A sign (a length cut at the cap,
    collapsed, an entropy or KL gone far from its start) is a collapse only "together
    with broken learning" (the real corpus's criterion, bench/data/real/manifest.yaml):
    no improvement after the sign's onset, or a fall back after a rise. So the score's
    median over the trainer steps since the sign began (the latest ``window`` of them) is
    held against two references, each in the run's own unit (the standard deviation of
    the step scores it is made of, so the test is the same for any reward ``a*r + b``):

    - the run's early level: the median of its first ``steps`` trainer steps (a run that
      has learned since its start is improving);
    - its level just before the sign: the median of the ``steps`` trainer steps before
      the sign's first crossing (a run still gaining as the sign comes is improving).
      For a sign smoothed over a window (a median of ``w`` steps), those end ``lag`` =
      ``w // 2 + 1`` steps before the crossing: the median crosses only once more than
      half its window has changed, so the steps just before the crossing are already
      the sign's. Without the lag, a score that changed with the figure made the
      reference a mixture of before and after, whose median and spread sat exactly on
      the test's line (found by the logging-interval property test: the same run logged
      every 2nd step was decided the other way).

    The score improves where it is above either by more than ``margin`` units. Unknown
    (None) where neither reference exists yet (a sign from the first step, before the
    early window has passed) or no score is logged."""

    early: Baseline = field(default_factory=Baseline)
    recent: deque[tuple[int, float]] = field(default_factory=deque)
    """(step, score) over the latest ``steps`` trainer steps before the sign."""
    before: tuple[float, float] | None = None
    """(median, sd) of the scores before the sign's current crossing began."""
    since: Rolling = field(default_factory=Rolling)
    sign_from: int | None = None
    """The first step of the sign's current crossing (None: not crossing)."""

    def feed(
        self,
        score: float | None,
        step: int,
        crossing: bool,
        steps: int,
        window: int,
        lag: int = 0,
    ) -> dict[str, float] | None:
        """Fold the row at ``step`` in (``crossing``: the sign crosses there; ``lag``: the
        trainer steps by which the sign's smoothing delays its crossing). The score's
        figures while the sign crosses (``score_since_sign`` and the references), or None:
        not crossing, or unknown."""
        self.early.feed(score, step, steps)
        if not crossing:
            self.sign_from = None
            if score is not None:
                self.recent.append((step, score))
            while self.recent and self.recent[0][0] <= step - steps - lag:
                self.recent.popleft()
            return None
        if self.sign_from is None:
            self.sign_from, self.since = step, Rolling()
            vals = [v for s, v in self.recent if s <= step - lag]
            self.before = (statistics.median(vals), statistics.pstdev(vals)) if vals else None
        latest = self.since.feed(score, step, min(step - self.sign_from + 1, window))
        refs: dict[str, float] = {}
        if self.early.level is not None and self.early.sd is not None:
            refs.update(early_score=self.early.level, early_score_sd=self.early.sd)
        if self.before is not None:
            refs.update(score_before_sign=self.before[0], score_before_sign_sd=self.before[1])
        if latest is None or not refs:
            return None
        return {"score_since_sign": latest, **refs}

    @staticmethod
    def improving(figures: dict[str, float], margin: float, *, early: bool = True) -> bool:
        """Whether the score since the sign is above a reference by ``margin`` units
        (``early``: the run's early level is one; else only the level before the sign)."""
        since = figures["score_since_sign"]
        pairs = [("score_before_sign", "score_before_sign_sd")]
        if early:
            pairs.append(("early_score", "early_score_sd"))
        return any(
            ref in figures and since - figures[ref] > margin * figures[sd] for ref, sd in pairs
        )


@dataclass
class LengthState(Streak):
    """The longest mean length so far, the step it was first reached, and a pinned step."""

    longest: float | None = None
    longest_at: int | None = None
    pinned: Evidence | None = None
    learning: Learning = field(default_factory=Learning)
    early_clip: Baseline = field(default_factory=Baseline)
    clipped: Evidence | None = None
    """The clip test crossed at the latest step with the score not improving."""


@register("length_runaway")
@checked(frozen=True, kw_only=True, config=CHECKED)
class LengthRunaway(StreakRule):
    """Interactions cut at the budget (clip ratio >= ``clip_level``, with the score not
    improving) or tokens per interaction >= ``budget_frac`` of the budget, for ``k``
    trainer steps in a row."""

    feeds = (
        frozenset({N.CLIP_RATIO}),
        frozenset({N.RESPONSE_LENGTH_MEAN, N.RESPONSE_BUDGET}),
    )

    k: Int = Field(default=2, ge=1)  # type: ignore[misc]
    """Seed (DESIGN.md): tokens per interaction reached the budget by step 5 and the score
    fell below zero at step 6; k=2 stops at step 6 at the latest. Calibration: k=2."""
    clip_level: Float | None = Field(default=0.9, gt=0, le=1)
    """Clip ratio at or above this crosses (truncated actions are unparseable) where the
    score is not improving (``improving``). 0.9: nearly every interaction cut at the
    budget, the clip ratio's reading of ``budget_frac`` for a log without the budget
    (verl logs ``response_length/clip_ratio`` and no budget by default). With it the
    seed's compressed run in verl's default keys is stopped at step 6 (cut at 0.97 from
    step 5 as its score falls from 0.42 before the cut). Lower levels stop real healthy
    runs of small batches, where one cut completion in 2 or 8 is a clip ratio of 0.5 or
    0.125 (the real corpus, bench/real_runs_bench.py: at 0.5 the test stopped a healthy
    run at step 8 and two stalls before their windows, score condition or not; at the
    Post-Training Toolkit's 0.3 for 2 steps, without it, two healthy held-out runs)."""
    improving: Float | None = Field(default=1.0, ge=0)
    """The clip test counts only while the score is not above its level before the cut
    began by more than this many units (:class:`Learning`: the standard deviation of the
    step scores before it): a run that is cut a lot while it learns to be brief is
    spared. A run cut from its first steps has no level before: the clip test leaves it
    to ``length_at_cap`` (at the cap over its first 20 steps without learning). None:
    the clip ratio alone crosses. The budget test is not conditioned: a mean at the
    budget leaves nothing to learn with."""
    budget_frac: Float | None = Field(default=0.9, gt=0, le=1)
    """Mean tokens per interaction at or above this fraction of
    ``response_length/budget`` crosses (seed: the mean ran to the budget itself)."""
    start_below: Float = Field(default=0.5, gt=0, le=1)
    """The clip test is for a run that runs to the cap: it applies only where the clip
    ratio's median over the first 3 trainer steps was below this (``length_at_cap``'s
    cap level). A run cut from its start is ``length_at_cap``'s (a healthy real run, cut
    at 0.875-1.0 from step 1 while it learned, flickered around 0.9 and was stopped at
    step 15 without this)."""
    pinned_steps: Int | None = Field(default=None, ge=1)
    """Where a log has neither a clip ratio nor the budget (TRL before 0.16, Unsloth's
    notebooks): the mean length within 1% of the longest mean the run has logged, a
    longest first reached at least this many trainer steps before, crosses (a length
    pinned at the cap it cannot pass). None: off."""
    grace: Int = Field(default=1, ge=0)

    def start(self) -> LengthState:
        return LengthState()

    def update(self, state: LengthState, row: Row, control: ControlView, step: int) -> None:
        length = value(row, N.RESPONSE_LENGTH_MEAN)
        state.pinned = None
        if length is not None:
            if state.longest is None or length > state.longest:
                state.longest, state.longest_at = length, step
            elif (
                self.pinned_steps is not None
                and state.longest_at is not None
                and value(row, N.CLIP_RATIO) is None
                and value(row, N.RESPONSE_BUDGET) is None
                and length >= 0.99 * state.longest
                and step - state.longest_at >= self.pinned_steps
            ):
                state.pinned = {"response_length": length, "longest": state.longest,
                                "longest_at": state.longest_at, "pinned_steps": self.pinned_steps}  # fmt: skip
        state.clipped = None
        clip = value(row, N.CLIP_RATIO)
        state.early_clip.feed(clip, step, 3)
        below = state.early_clip.level is not None and state.early_clip.level < self.start_below
        cut = self.clip_level is not None and clip is not None and clip >= self.clip_level
        cut = cut and (below or self.improving is None)
        score = state.learning.feed(value(row, N.SCORE_MEAN), step, cut, SCORE_STEPS, SCORE_WINDOW)
        if cut and clip is not None and self.clip_level is not None:
            if self.improving is None:
                state.clipped = {"clip_ratio": clip, "clip_level": self.clip_level}
            elif (
                score is not None
                and "score_before_sign" in score
                and not Learning.improving(score, self.improving, early=False)
            ):
                state.clipped = {"clip_ratio": clip, "clip_level": self.clip_level, **score}
        crossing = (
            state.clipped is not None or self._crossing(row) is not None or state.pinned is not None
        )
        extend(state, crossing, step)

    def caveat(self, have: Iterable[str]) -> str | None:
        got = set(have)
        if self.clip_level is None or self.improving is None or N.SCORE_MEAN in got:
            return None
        if N.CLIP_RATIO not in got:
            return None
        return (
            f"no score ({N.SCORE_MEAN}) logged: its clip test, which needs the score to tell a "
            "run learning at the cap from one that is not, is off; the budget test decides"
        )

    def _crossing(self, row: Row) -> Evidence | None:
        """The budget test (the clip test needs the run's score: :meth:`update`)."""
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

    def evidence(self, state: LengthState, row: Row, control: ControlView, step: int) -> Evidence:
        return dict(state.clipped or self._crossing(row) or state.pinned or {})


@dataclass
class Moments:
    """A score's trainer-step-weighted count, sum and sum of squares (each row weighing
    the trainer steps it stands for)."""

    n: float = 0.0
    total: float = 0.0
    squares: float = 0.0

    def add(self, v: float, weight: float) -> None:
        self.n += weight
        self.total += v * weight
        self.squares += v * v * weight

    def stats(self) -> tuple[float, float, float]:
        """(steps, mean, population variance)."""
        if self.n <= 0:
            return 0.0, 0.0, 0.0
        mean = self.total / self.n
        return self.n, mean, max(self.squares / self.n - mean * mean, 0.0)


@dataclass
class CapState(State):
    """The first window's capped steps and scores, the verdict once it has passed, and the
    latest window's, up to the patience's end."""

    start: int | None = None
    """The window's first trainer step (1, or the first logged step where that is later
    than the window)."""
    capped: int = 0
    """Trainer steps in the window (each row standing for those since the row before it)
    whose clip ratio was at or above the level."""
    counted: int = 0
    """Trainer steps in the window with a clip ratio."""
    halves: list[list[float]] = field(default_factory=lambda: [[0.0, 0.0], [0.0, 0.0]])
    """Per half of the window: [sum of score x steps, steps]."""
    widest: float | None = None
    """The largest spread of the score seen in the window (:func:`spread`)."""
    first: Moments = field(default_factory=Moments)
    """The first window's scores (the reference of the patience's learning test)."""
    verdict: Evidence | None = None
    """The warning's evidence, from the window's end until the patience's end."""
    judged: bool = False
    latest_clip: Rolling = field(default_factory=Rolling)
    """The capped share (1 where the clip ratio is at the level, else 0) over the latest
    ``window`` trainer steps."""
    latest_share: float | None = None
    """That share at the latest row."""
    latest_score: deque[tuple[int, int, float]] = field(default_factory=deque)
    """(step, the step of the row before it, score) over the latest ``window`` trainer
    steps."""
    since: Moments = field(default_factory=Moments)
    """The scores after the first window."""
    stop: Evidence | None = None
    """The stop's evidence, at the patience's end."""
    done: bool = False
    """The patience has ended: nothing more to say about this run."""


CAP_CAUSE = "completions cut at the length cap from the start"
CAP_FIX = (
    "raise the generation limit (max_completion_length / max_tokens / max_response_length), "
    "or ask the prompt for an answer that fits in it"
)


def trend_t(first: tuple[float, float, float], later: tuple[float, float, float]) -> float | None:
    """The corpus criterion's reward trend (bench/data/real/manifest.yaml) between two
    spans of a run, each given as (trainer steps, mean score, population variance): the
    later mean minus the first, over their pooled per-step standard deviation times
    sqrt(1/n1 + 1/n2). "Improves" is t >= 2. None: a span under two steps; +inf or -inf:
    both flat (no spread) and their means apart."""
    (n1, m1, v1), (n2, m2, v2) = first, later
    if n1 < 2 or n2 < 2:
        return None
    pooled = math.sqrt((n1 * v1 + n2 * v2) / (n1 + n2))
    diff = m2 - m1
    if abs(diff) <= 1e-9 * (abs(m1) + abs(m2)):  # within rounding: no change
        return 0.0
    if pooled == 0:
        return math.inf if diff > 0 else -math.inf
    return diff / (pooled * math.sqrt(1 / n1 + 1 / n2))


@register("length_at_cap")
@checked(frozen=True, kw_only=True, config=CHECKED)
class LengthAtCap(Rule):
    """A run at the length cap from its start: over its first ``window`` trainer steps the
    clip ratio is >= ``clip_level`` on at least ``share`` of the steps AND the score's
    mean over the window's second half is not above its first half's by more than
    ``improve`` spreads. At the window's end that is a WARNING, with its likely cause and
    fix (completions cut at the cap from the start: raise the generation limit, or the
    prompt asks for more than it allows); the run is STOPPED at the end of ``patience``
    only if it is still at the cap (``share`` of the latest ``window`` steps) and still
    not learning (the corpus criterion's trend test, :func:`trend_t`: the latest window's
    scores, and its scores since the first window, each against the first window's:
    t < 2 for both; learning by either reference spares it, as :class:`Learning` reads
    two references).

    Why a warning first (the corpus criterion, decided in issue 37): at step 20 a healthy
    slow starter and a run that will never learn look alike (the real corpus: 10 healthy
    and 13 dead or degenerate runs at the cap on >= 80% of their first 20 steps without
    learning there, bench/results/real_runs_bench.md); what tells them apart is whether
    the score moves over the steps after. Scale-free (the gain is measured in the run's
    own score spread, the trend in its step scores' own deviation) and counted in trainer
    steps (each row weighs the steps since the row before it)."""

    feeds = (frozenset({N.CLIP_RATIO}),)

    window: Int = Field(default=20, ge=2)
    """Trainer steps from the run's start judged together. 20: the span over which the
    real corpus's written criterion establishes "no improvement", and the onset window
    ``[1, 20]`` of its runs that never learned (bench/data/real/manifest.yaml)."""
    clip_level: Float | None = Field(default=0.5, gt=0, le=1)
    """A step is capped where its clip ratio is at or above this: the corpus criterion's
    ``length_at_cap`` level (clipped ratio >= 0.5). None: off."""
    share: Float = Field(default=0.8, gt=0, le=1)
    """The capped steps' share of the window needed: the criterion's 80%. Calibration
    part of the real corpus, first 20 steps (clip ratio >= 0.5): its runs at the cap from
    the start 0.8 and 1.0 (unsloth-gptoss-20b, toolformer-qwen-math), its healthy runs
    that log a clip ratio 0.0 (bench/real_runs_bench.py's grid: 0.6-0.9 all clean)."""
    improve: Float = Field(default=0.25, ge=0)
    """The largest gain (second half's mean score minus the first half's, in units of the
    largest score spread seen in the window) still counted as no improvement. Calibration
    part: the runs at the cap gain -0.04 spreads over their first 20 steps, its healthy
    runs -0.04 to 0.08 (the cap share, not the gain, tells them apart there); 0.25 spares
    a run that is cut at the cap but visibly learning (the criterion's "improves")."""
    patience: Int | None = Field(default=None, ge=2)
    """Trainer steps from the run's start after which a run still at the cap and still not
    learning is stopped; None: three times ``window`` (step 60 with a 20-step window), as
    the corpus criterion decided (issue 37). The warning comes at the window's end
    whatever this is."""
    trend: Float = Field(default=2.0, gt=0)
    """The patience's learning test: the run is learning where the trend t (:func:`trend_t`)
    of its latest window, or of all its steps since the first window, against the first
    window is at least this. 2: the corpus criterion's "improves"."""

    def start(self) -> CapState:
        return CapState()

    def _patience(self) -> int:
        return self.patience if self.patience is not None else 3 * self.window

    def update(self, state: CapState, row: Row, control: ControlView, step: int) -> None:
        if state.done or self.clip_level is None:
            return
        if state.start is None:
            state.start = 1 if step <= self.window else step
        if state.judged:
            self._follow(state, row, step)
            return
        end = state.start + self.window - 1
        if step > end:
            # logged after the window's end: its figures are not the window's (a sparse log
            # must not read a later regime into it); judge on the rows before
            self._judge(state)
            self._follow(state, row, step)
            return
        prev = state.prev if state.prev is not None else state.start - 1
        steps = max(step - prev, 1)
        clip = value(row, N.CLIP_RATIO)
        if clip is not None:
            state.counted += steps
            state.capped += steps if clip >= self.clip_level else 0
        self._latest(state, row, step)
        s, sp = value(row, N.SCORE_MEAN), spread(row)
        if s is not None:
            state.first.add(s, steps)
            # the row stands for the trainer steps since the row before: split them at the
            # halves' boundary, so a sparse log weighs each half as a dense one would
            second = state.start + self.window // 2  # first step of the second half
            first_n = max(0, min(step, second - 1) - prev)
            for half, n in zip(state.halves, (first_n, steps - first_n), strict=True):
                if n > 0:
                    half[0] += s * n
                    half[1] += n
        if sp is not None:
            state.widest = sp if state.widest is None else max(state.widest, sp)
        if step >= end:
            self._judge(state)

    def _judge(self, state: CapState) -> None:
        state.judged = True
        state.verdict = self._verdict(state)
        if state.verdict is None:
            state.done = True  # not at the cap from the start: nothing more to follow

    def _latest(self, state: CapState, row: Row, step: int) -> None:
        """Fold the row into the latest window's capped share and scores."""
        clip = value(row, N.CLIP_RATIO)
        capped = None if clip is None or self.clip_level is None else float(clip >= self.clip_level)
        prev = state.latest_clip.last
        state.latest_share = state.latest_clip.feed(capped, step, self.window, mean=True)
        s = value(row, N.SCORE_MEAN)
        if s is not None:
            state.latest_score.append((step, prev if prev is not None else step - 1, s))
        while state.latest_score and state.latest_score[0][0] <= step - self.window:
            state.latest_score.popleft()

    def _follow(self, state: CapState, row: Row, step: int) -> None:
        """After the warning: at the patience's end, stop a run still at the cap and still
        not learning."""
        prev = state.latest_clip.last
        self._latest(state, row, step)
        s = value(row, N.SCORE_MEAN)
        if s is not None and prev is not None:
            state.since.add(s, step - prev)
        start = state.start if state.start is not None else 1
        if step < start + self._patience() - 1:
            return
        state.done = True
        share = state.latest_share
        latest = Moments()
        for s_, p_, v in state.latest_score:
            latest.add(v, s_ - max(p_, step - self.window))
        first = state.first.stats()
        t_now = trend_t(first, latest.stats())
        since = trend_t(first, state.since.stats())
        learns = [t for t in (t_now, since) if t is not None]
        if share is None or share < self.share or not learns or max(learns) >= self.trend:
            state.verdict = None  # it left the cap, or it learns: the warning stands alone
            return
        state.stop = {**(state.verdict or {}), "latest_capped_share": share,
                      "trend_t_latest": learns[0] if t_now is not None else "-",
                      "trend_t_since": since if since is not None else "-",
                      "trend": self.trend, "patience": self._patience()}  # fmt: skip

    def _verdict(self, state: CapState) -> Evidence | None:
        (s1, n1), (s2, n2) = state.halves
        if not state.counted or not n1 or not n2 or state.widest is None:
            return None
        frac = state.capped / state.counted
        m1, m2 = s1 / n1, s2 / n2
        # a gain within rounding of the halves' weighted means is none (a flat score logged
        # sparsely must not read as a rise of one ulp over a spread of 0)
        gain = 0.0 if abs(m2 - m1) <= 1e-9 * (abs(m1) + abs(m2)) else m2 - m1
        if frac < self.share or gain > self.improve * state.widest:
            return None
        return {"capped_share": frac, "share": self.share, "clip_level": self.clip_level or 0.0,
                "score_gain": gain, "spread": state.widest, "improve": self.improve,
                "window": self.window, "cause": CAP_CAUSE, "fix": CAP_FIX}  # fmt: skip

    def decide(self, state: CapState, row: Row, control: ControlView, step: int) -> Decision:
        if state.stop is not None:
            ev, state.stop = state.stop, None
            state.verdict = None
            return Decision("stop", self.name, step, ev)
        if state.verdict is None:
            return self._go_on(step)
        return Decision("warn", self.name, step, dict(state.verdict))


@dataclass
class SignalState(Streak):
    """The early score and spread, the best score so far, the largest spread so far."""

    early: Baseline = field(default_factory=Baseline)
    early_spread: Baseline = field(default_factory=Baseline)
    best: float | None = None
    widest: float | None = None
    rolling: Rolling = field(default_factory=Rolling)
    frac: float | None = None
    """The fraction's mean over the window, at the latest step."""
    need: int = 1
    """The streak the latest step's source of the fraction needs."""
    crossed: Evidence | None = None
    groups: int | None = None
    """Groups per step, read off the fraction's granularity (the smallest whole number
    that makes every fraction seen a whole count of groups); None: more than
    ``MAX_GROUPS``, or a fraction that is no count (a large batch)."""
    seen_fracs: set[float] = field(default_factory=set)
    """The distinct fractions logged so far (a handful: the granularity is read off them)."""
    early_rows: list[tuple[int, int, float]] = field(default_factory=list)
    """(step, the step of the row before it, fraction) of the rows in the first
    ``rate_steps`` trainer steps: the run's own early zero-spread rate."""
    chance: Evidence = field(default_factory=dict)
    """How the streak needed was reckoned at the latest step (groups, rate, chance)."""
    first_crossing: int = 0
    """Trainer steps among the first ``dead_steps`` whose fraction crossed."""
    first_counted: int = 0
    """Trainer steps among the first ``dead_steps`` with a fraction."""
    dead: Evidence | None = None
    """The criterion's dead run, decided at the latest row (:meth:`ConstantAdvantage._dead`)."""


MAX_GROUPS = 64
"""Largest groups per step read off a fraction's granularity: beyond it a step holds so
many groups that all of them alike by chance is negligible (the streak needs ``k``)."""


def groups_per_step(fracs: Iterable[float]) -> int | None:
    """The smallest whole number of groups that makes every fraction a whole count of
    groups (within the rounding of a logged float), or None above ``MAX_GROUPS``."""
    vals = list(fracs)
    for g in range(1, MAX_GROUPS + 1):
        if all(abs(v * g - round(v * g)) <= 1e-5 * g for v in vals):
            return g
    return None


RATE_BOUND = 0.9
"""The run's own early rate of alike groups is taken at this upper credible bound of a
uniform prior updated by the groups seen before the streak: where those are few, chance
is given the benefit of the doubt (two early steps of two groups allow a rate from near 0
to near 1)."""


@functools.lru_cache(maxsize=4096)
def rate_bound(alike: int, groups: int, level: float = RATE_BOUND) -> float:
    """The ``level`` quantile of Beta(alike + 1, groups - alike + 1): the rate of alike
    groups that ``alike`` of ``groups`` seen leave below it with that probability (with
    none seen, ``level`` itself). By bisection on the Beta CDF, which for whole counts is
    the binomial tail P(Binom(groups + 1, x) >= alike + 1)."""
    groups = max(groups, 0)
    alike = min(max(alike, 0), groups)
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        cdf = sum(
            math.comb(groups + 1, i) * mid**i * (1 - mid) ** (groups + 1 - i)
            for i in range(alike + 1, groups + 2)
        )
        lo, hi = (mid, hi) if cdf < level else (lo, mid)
    return (lo + hi) / 2


def all_alike_chance(groups: int, rate: float, frac: float) -> float:
    """The chance that at least ``frac`` of ``groups`` independent groups are all-alike
    when each is with probability ``rate`` (the binomial tail)."""
    need = math.ceil(frac * groups - 1e-9)
    return sum(
        math.comb(groups, i) * rate**i * (1 - rate) ** (groups - i)
        for i in range(max(need, 0), groups + 1)
    )


@register("constant_advantage")
@checked(frozen=True, kw_only=True, config=CHECKED)
class ConstantAdvantage(StreakRule):
    """No learning signal: the fraction of groups whose rewards are all equal (zero
    advantage) is >= ``frac`` for ``k`` trainer steps, at any reward level, unless the
    run is saturated (every group solved: its score at its best, a best it rose to).

    Where a log has no such fraction, a step whose score min equals its max counts as
    fraction 1, and one whose batch std is at most ``flat`` of its early std too (TRL's
    ``reward_std``, verl's min and max). A run with no signal from its first steps is
    stopped whatever its level (solved or dead, its groups teach nothing: the real run
    pinned at 0.5, issue 18); a run that rose to its best and stays there is spared.

    **Small batches** (issue 37). With one to four groups a step, every group alike
    happens by chance: two such steps in a row stopped healthy runs of two groups a step
    before step 10. So the streak needed from the logged fraction is the shortest that
    chance would rarely produce at the run's own rate (at least ``k``): with ``G``
    groups a step (read off the fraction's granularity: steps of 0.5 are two groups), a
    rate ``p`` of groups alike over the run's first ``rate_steps`` steps before the
    streak began (taken at the upper end of what those groups allow, ``RATE_BOUND``:
    none before it allow any rate), the chance of a crossing step is ``q`` = P(at least
    ``frac`` of ``G`` groups alike), and the streak ``n`` needs ``t * q^n <= chance``
    after ``t`` trainer steps (the expected number of such streaks by chance in a run
    this long). A fraction only ever 0 or 1 tells no group count and is read as one
    group a step. Large batches keep about ``k``: on the ground truth (16 groups a step)
    the rule alone stops most collapses it catches at the same step as a fixed streak of
    2, the rest a few steps later (bench/results/detection_bench.md). And, as the corpus
    criterion defines a dead run, a run whose first ``dead_steps`` trainer steps cross on
    at least ``dead_share`` of them (a logged fraction, or a fallback's all-alike steps)
    is stopped once that share is certain, unless it is at a best it rose to."""

    feeds = (
        frozenset({N.ZERO_ADV_FRAC}),
        frozenset({N.SCORE_MIN, N.SCORE_MAX}),
        frozenset({N.SCORE_STD}),
    )

    frac: Float = Field(default=0.9, ge=0, le=1)
    """Four groups in five with equal rewards: little is learned. Calibration (0.8-1.0):
    0.8 on the ground truth, where a collapsed run of the quick preset has most but not
    all groups uniform (an occasional lucky guess) and dense controls stay at 0.19-0.63."""
    k: Int = Field(default=2, ge=1)  # type: ignore[misc]
    """Trainer steps the fraction must hold at least (the chance test below may ask for
    more). Calibration (k in 2..5): 2."""
    chance: Float | None = Field(default=0.01, gt=0, lt=1)
    """The streak from a logged fraction must be long enough that a run whose groups are
    alike at its early rate would show one so long, by chance, at most this often over
    its steps so far (the expected count of such streaks; the class docstring). None:
    ``k`` whatever the batch (the rule before issue 37)."""
    rate_steps: Int = Field(default=10, ge=1)
    """The run's first trainer steps whose fractions give its own rate of alike groups."""
    dead_steps: Int = Field(default=20, ge=1)
    """The corpus criterion's dead run: its first trainer steps judged together."""
    dead_share: Float | None = Field(default=0.8, gt=0, le=1)
    """Stopped once at least this share of the first ``dead_steps`` trainer steps cross
    is certain (the criterion's 80%), a logged fraction's steps or a fallback's; spared at
    a best it rose to (``saturation``). None: off. On the real corpus it catches in their
    window the dead runs no streak setting caught without a false stop, and stops the
    healthy run that starts with 20 of 21 steps all alike and learns later, the
    trade-off the table of bench/results/real_runs_bench.md shows (its last row)."""
    saturation: Float | None = Field(default=0.5, gt=0)
    """Spared (saturated) where the score is within this many spreads of its best so far
    and that best is more than this many spreads above the early level (spread: the
    largest batch reward std seen so far, :func:`spread`; where the log has none, the
    range of the early step means). None: never spared. A group
    whose answers are all right has zero advantage too; a run that solved its task is
    not collapsing (the seed: the dead run's constant was -0.1, far below its best)."""
    window: Int = Field(default=1, ge=1)
    """The fraction is its mean over this many trainer steps."""
    k_without_fraction: Int = Field(default=10, ge=1)
    """Trainer steps needed where the fraction comes from a fallback (score std, or min
    and max), which is 0 or 1 at each step: a log without the fraction often has one
    group per step (Unsloth's notebooks), and a healthy run may start with a dozen or
    more all-equal steps before it learns (real corpus: basilenouvellet-grpo, 20 of its
    first 21 steps all-equal at reward 0, then rising to 0.9). The trade-off table of
    bench/results/real_runs_bench.md (this rule alone, whole corpus): at ``frac`` 0.9
    over 10 steps, 10 stops the dead unsloth-qwen3-vl-8b at step 14 and no healthy run;
    5 stops basilenouvellet-grpo at step 9; 20 (the previous default) catches the dead
    run only at step 24, after its window. No setting catches the dead tkg-llama31-8b
    (16 of its first 20 steps all-equal) without stopping basilenouvellet-grpo: the
    dead-share test (``dead_share``) catches it, and stops that healthy run."""
    window_without_fraction: Int = Field(default=10, ge=1)
    """The fallback's 0/1 values are averaged over this many trainer steps (the real
    corpus's dead runs: at least 80% of their first 20 steps all-equal)."""
    flat: Float = Field(default=0.05, ge=0, lt=1)
    """Without a fraction or min/max: a batch std at most this share of its early median
    counts as fraction 1 (the rewards stopped varying)."""
    baseline_steps: Int = Field(default=3, ge=1)
    """The first trainer steps whose median score (and std) is the early level."""
    grace: Int = Field(default=2, ge=0)

    def start(self) -> SignalState:
        return SignalState()

    def _frac(self, state: SignalState, row: Row) -> tuple[float, str] | None:
        f = value(row, N.ZERO_ADV_FRAC)
        if f is not None:
            return f, N.ZERO_ADV_FRAC
        lo, hi = value(row, N.SCORE_MIN), value(row, N.SCORE_MAX)
        if lo is not None and hi is not None:
            return (1.0 if lo == hi else 0.0), "score min == max"
        sd, early = value(row, N.SCORE_STD), state.early_spread.level
        if sd is not None and early is not None:
            return (1.0 if abs(sd) <= self.flat * early else 0.0), "score std vs early std"
        return None

    def update(self, state: SignalState, row: Row, control: ControlView, step: int) -> None:
        got = self._frac(state, row)
        state.frac = None
        direct = got is not None and got[1] == N.ZERO_ADV_FRAC
        if got is not None:
            window = self.window if direct else self.window_without_fraction
            state.frac = state.rolling.feed(got[0], step, window, mean=True)
            state.need = self.k if direct else self.k_without_fraction
        if got is not None:
            self._count(state, got[0], step, direct)
        s, sp = value(row, N.SCORE_MEAN), spread(row)
        state.early.feed(s, step, self.baseline_steps)
        state.early_spread.feed(value(row, N.SCORE_STD), step, self.baseline_steps)
        if s is not None:
            state.best = s if state.best is None else max(state.best, s)
        if sp is not None:
            state.widest = sp if state.widest is None else max(state.widest, sp)
        state.crossed = self._crossing(state, row, s)
        state.dead = self._dead(state, step)  # before state.prev moves on to this row
        extend(state, state.crossed is not None, step)
        if direct and state.crossed is not None:
            state.need = self._need(state, step)

    def _origin(self, state: SignalState, step: int) -> int:
        """Trainer step 1, or the first logged step where a log starts later than the
        first ``dead_steps`` (a resumed run): where the run's early windows begin."""
        first = state.first_step if state.first_step is not None else step
        return 1 if first <= self.dead_steps else first

    def _count(self, state: SignalState, f: float, step: int, direct: bool) -> None:
        """The fraction's granularity (groups per step) and the early rows (a logged
        fraction), and the first steps' crossing share (any source: a fallback's step is
        all alike or not); each row standing for the trainer steps since the row before
        it, or since the windows' start."""
        origin = self._origin(state, step)
        prev = max(state.prev if state.prev is not None else origin - 1, origin - 1)
        f = min(max(f, 0.0), 1.0)  # a share, whatever a log wrote
        if direct and len(state.seen_fracs) < 64 and f not in state.seen_fracs:
            state.seen_fracs.add(f)
            state.groups = groups_per_step(state.seen_fracs)
        if direct and step < origin + self.rate_steps:
            state.early_rows.append((step, prev, f))
        if step < origin + self.dead_steps:
            n = min(step, origin + self.dead_steps - 1) - prev
            state.first_counted += n
            state.first_crossing += n if f >= self.frac else 0

    def _need(self, state: SignalState, step: int) -> int:
        """The streak a crossing from the logged fraction needs at ``step`` (and why, in
        ``state.chance``)."""
        if self.chance is None:
            return self.k
        g = state.groups
        since = state.since if state.since is not None else step
        # the early rows before the streak began (a row it began inside counts up to it)
        before = [(min(s, since - 1), p, f) for s, p, f in state.early_rows if p < since - 1]
        alike = sum(f * (s - p) for s, p, f in before)
        steps = sum(s - p for s, p, _ in before)
        if g is None:
            state.chance = {"groups": f">{MAX_GROUPS}"}
            return self.k
        # the rate of alike groups, at the upper end of what the early groups allow
        rate = rate_bound(round(alike * g), round(steps * g))
        q = all_alike_chance(g, rate, self.frac)
        t = step - self._origin(state, step) + 1
        if q <= 0:
            n = self.k
        elif q >= 1:
            n = 10**9
        else:
            n = max(self.k, math.ceil(math.log(self.chance / t) / math.log(q) - 1e-9))
        state.chance = {"groups": g, "early_rate": rate, "step_chance": q, "need": n}
        return n

    def _dead(self, state: SignalState, step: int) -> Evidence | None:
        """The criterion's dead run: the share of the first ``dead_steps`` that cross is
        at least ``dead_share`` whatever the steps left of them do (decided up to the
        first row at or after the window's end)."""
        if self.dead_share is None or not state.first_counted:
            return None
        end = self._origin(state, step) + self.dead_steps - 1
        if state.prev is not None and state.prev >= end:
            return None  # decided at the window's end: a later fall is another rule's
        left = max(end - step, 0)
        # the share is certain once the steps left could not bring it below the line
        if state.first_crossing < self.dead_share * (state.first_counted + left):
            return None
        return {"dead_share": self.dead_share, "dead_steps": self.dead_steps,
                "crossing_steps": state.first_crossing, "counted_steps": state.first_counted}  # fmt: skip

    def _crossing(self, state: SignalState, row: Row, s: float | None) -> Evidence | None:
        got = self._frac(state, row)
        if got is None or state.frac is None or state.frac < self.frac:
            return None
        ev: Evidence = {"zero_group_frac": state.frac, "frac": self.frac, "window": self.window}
        if got[1] != N.ZERO_ADV_FRAC:
            ev["source"] = got[1]
        if s is None:
            return ev
        ev["score"] = s
        spared = self._saturated(state, s)
        if spared:
            return None
        if spared is False:  # the test applied: say what it read
            ev.update({"best_score": state.best or 0.0, "early_score": state.early.level or 0.0})
        return ev

    def _saturated(self, state: SignalState, s: float | None) -> bool | None:
        """All groups solved: the score at its best, a best it rose to (None: the test
        does not apply)."""
        best, early, unit = state.best, state.early.level, state.widest
        if unit is None:
            # no batch spread logged (Tinker's metrics): the range of the early step means
            unit = state.early.span
        if s is None or self.saturation is None or best is None or early is None or not unit:
            # no spread yet, or none ever (no group has varied): a run that never had a
            # learning signal did not rise to its best, its best is the luck of its
            # prompts (real corpus: tsamtsam-gemma-grpo, reward_std 0 at every step, had
            # its streak broken by each new high of its step means)
            return None
        return best - s <= self.saturation * unit and best - early > self.saturation * unit

    def decide(self, state: SignalState, row: Row, control: ControlView, step: int) -> Decision:
        if state.crossed is not None and state.n >= state.need:
            ev = {**state.crossed, "k": state.need, "streak": state.n}
            if "source" not in state.crossed:
                ev.update(state.chance)
            return Decision("stop", self.name, step, ev)
        dead = None if state.dead is None else dict(state.dead)
        s = value(row, N.SCORE_MEAN)
        if dead is None or self._saturated(state, s):
            return self._go_on(step)  # not dead for sure yet, or at a best it rose to
        if s is not None:
            dead["score"] = s
        got = self._frac(state, row)
        if got is not None and got[1] != N.ZERO_ADV_FRAC:
            dead["source"] = got[1]
        return Decision("stop", self.name, step, dead)

    def evidence(self, state: SignalState, row: Row, control: ControlView, step: int) -> Evidence:
        return dict(state.crossed or {})


@dataclass
class DropState(Streak):
    """The figure's early level, the score's, and what crossed at the latest step."""

    early: Baseline = field(default_factory=Baseline)
    rolling: Rolling = field(default_factory=Rolling)
    learning: Learning = field(default_factory=Learning)
    crossed: Evidence | None = None


class RelativeRule(StreakRule):
    """A figure (``figure``) against its own early level: below ``frac`` of it
    (``falls``) or, smoothed over ``window`` trainer steps, above ``factor`` times it
    (blow-up), for ``k`` trainer steps. Shared by the length, entropy, KL and gradient
    rules; each declares its fields.

    **A sign with broken learning.** Such a sign is not a collapse by itself: real healthy
    runs shorten their answers while their reward rises (learned concision), sharpen
    their entropy, and grow their KL and gradient norm as learning begins (issue 28: two
    Tinker runs, a TRL and an Unsloth run were stopped so). Where the log holds a score,
    the sign counts only at steps where the score is not improving (:class:`Learning`:
    not above the run's early level, nor its level before the sign, by more than
    ``improving`` units). Where no score is logged, or before either level is known (a
    sign from the first steps), the sign alone decides, as a rule without a score to read
    must; ``caveat`` says so in the reports. The score is read from the rows that carry
    the rule's figure."""

    figure: ClassVar[str]
    falls: ClassVar[bool]
    positive_start: ClassVar[bool] = False
    """The early window starts at the figure's first value above zero."""
    baseline_steps: int
    window: int
    improving: float | None

    def start(self) -> DropState:
        return DropState()

    def _line(self, early: float) -> float | None:
        raise NotImplementedError

    def caveat(self, have: Iterable[str]) -> str | None:
        if self.improving is None or N.SCORE_MEAN in set(have):
            return None
        return (
            f"no score ({N.SCORE_MEAN}) logged: it judges the sign alone and cannot tell a "
            "healthy change (e.g. shorter answers that score better) from a collapse"
        )

    def update(self, state: DropState, row: Row, control: ControlView, step: int) -> None:
        v = value(row, self.figure)
        state.early.feed(v, step, self.baseline_steps, positive=self.positive_start)
        smooth = state.rolling.feed(v, step, self.window, high=self.falls)
        early = state.early.level
        state.crossed = None
        if v is not None and smooth is not None and early is not None and early > 0:
            line = self._line(early)
            if line is not None and (smooth < line if self.falls else smooth >= line):
                state.crossed = {"figure": self.figure, "value": smooth, "early": early,
                                 "line": line, "times_early": smooth / early}  # fmt: skip
        lag = self.window // 2 + 1 if self.window > 1 else 0
        score = state.learning.feed(
            value(row, N.SCORE_MEAN), step, state.crossed is not None, SCORE_STEPS,
            SCORE_WINDOW, lag,
        )  # fmt: skip
        if state.crossed is not None and score is not None:
            state.crossed.update(score)
            if self.improving is not None and Learning.improving(score, self.improving):
                state.crossed = None  # the sign, but the run is learning
        extend(state, state.crossed is not None, step)

    def evidence(self, state: DropState, row: Row, control: ControlView, step: int) -> Evidence:
        return {**(state.crossed or {}), "window": self.window}


@register("length_collapse")
@checked(frozen=True, kw_only=True, config=CHECKED)
class LengthCollapse(RelativeRule):
    """Mean response length below ``frac`` of its own early level for ``k`` trainer steps:
    completions collapsing to a few tokens (issue 18: a real run fell from 53 tokens to
    2-5 while its summed reward rose)."""

    feeds = (frozenset({N.RESPONSE_LENGTH_MEAN}),)
    figure = N.RESPONSE_LENGTH_MEAN
    falls = True

    frac: Float | None = Field(default=0.2, gt=0, lt=1)
    """Below a fifth of the early length. The real collapse fell to 0.04-0.09 of its early
    length; healthy runs that learn to be concise shorten by far less
    (bench/results/real_runs_bench.md); the ground truth's lengths never fell (dead runs
    there run into the budget instead)."""
    k: Int = Field(default=2, ge=1)  # type: ignore[misc]
    """Trainer steps the collapse must last."""
    baseline_steps: Int = Field(default=3, ge=1)
    """The first trainer steps whose median is the early level."""
    window: Int = Field(default=1, ge=1)
    """Trainer steps the length is smoothed over (median) before comparing."""
    improving: Float | None = Field(default=1.0, ge=0)
    """The sign counts only while the score is not improving by more than this many early
    score sds (:class:`RelativeRule`); None: the sign alone stops."""
    grace: Int = Field(default=2, ge=0)

    def _line(self, early: float) -> float | None:
        return None if self.frac is None else self.frac * early


@register("entropy_collapse")
@checked(frozen=True, kw_only=True, config=CHECKED)
class EntropyCollapse(RelativeRule):
    """Mean token entropy (``actor/entropy``) below ``frac`` of its own early level for
    ``k`` trainer steps: the policy became deterministic."""

    feeds = (frozenset({N.ENTROPY}),)
    figure = N.ENTROPY
    falls = True

    frac: Float | None = Field(default=0.1, gt=0, lt=1)
    """Below a tenth of the early entropy. The real length collapse of issue 18 took the
    entropy from 0.96 to 0.03 (0.03x); the ground truth's dense controls, which learn,
    fall to 0.23x of their start (0.305 to 0.071), so a healthy sharpening is spared."""
    k: Int = Field(default=2, ge=1)  # type: ignore[misc]
    """Trainer steps the collapse must last."""
    baseline_steps: Int = Field(default=3, ge=1)
    """The first trainer steps whose median is the early level."""
    window: Int = Field(default=1, ge=1)
    """Trainer steps the entropy is smoothed over (median) before comparing."""
    improving: Float | None = Field(default=1.0, ge=0)
    """The sign counts only while the score is not improving by more than this many early
    score sds (:class:`RelativeRule`); None: the sign alone stops."""
    grace: Int = Field(default=2, ge=0)

    def _line(self, early: float) -> float | None:
        return None if self.frac is None else self.frac * early


@register("kl_blowup")
@checked(frozen=True, kw_only=True, config=CHECKED)
class KlBlowup(RelativeRule):
    """KL to the reference (``actor/kl_to_ref``), its median over ``window`` trainer
    steps, at or above ``factor`` times its early level and at least ``min_kl`` nats,
    for ``k`` trainer steps. The early window starts at the first KL above 0 (the KL is
    0 before the first update)."""

    feeds = (frozenset({N.KL_TO_REF}),)
    figure = N.KL_TO_REF
    falls = False
    positive_start = True

    factor: Float | None = Field(default=10.0, gt=1)
    """Ten times the early level. The KL to the reference grows from 0 as any run learns
    (ground truth: dense controls from 0.003 at step 2 to 0.08-0.29; real runs 100-1000x),
    so the factor alone would stop every healthy run: ``min_kl`` sets the scale."""
    min_kl: Float | None = Field(default=10.0, gt=0)
    """A KL below this (nats per token) is never a blow-up. Ground truth: no run reached
    0.6; a healthy real run (the corpus's hotpotqa agent) holds 2.5-5 nats for hundreds
    of steps while its reward improves, so 1 and 5 stopped it. KL has units of its own,
    unlike the reward, so a level in nats does not depend on the reward's scale. No run
    of the corpus is labelled a KL blow-up: the rule is a guard, not yet a proven catch."""
    k: Int = Field(default=2, ge=1)  # type: ignore[misc]
    """Trainer steps the blow-up must last."""
    baseline_steps: Int = Field(default=3, ge=1)
    """The trainer steps (from the first KL above 0) whose median is the early level."""
    window: Int = Field(default=5, ge=1)
    """The KL is the median over this many trainer steps, so a one-step spike does not
    count."""
    improving: Float | None = Field(default=1.0, ge=0)
    """The sign counts only while the score is not improving by more than this many early
    score sds (:class:`RelativeRule`); None: the sign alone stops."""
    grace: Int = Field(default=2, ge=0)

    def _line(self, early: float) -> float | None:
        if self.factor is None:
            return None
        return max(self.factor * early, self.min_kl or 0.0)


@register("grad_norm_blowup")
@checked(frozen=True, kw_only=True, config=CHECKED)
class GradNormBlowup(RelativeRule):
    """Gradient norm (``actor/grad_norm``), its median over ``window`` trainer steps, at
    or above ``factor`` times its early level for ``k`` trainer steps. The early window
    starts at the first norm above 0 (a step with every weight masked has none)."""

    feeds = (frozenset({N.GRAD_NORM}),)
    figure = N.GRAD_NORM
    falls = False
    positive_start = True

    factor: Float | None = Field(default=20.0, gt=1)
    """Twenty times the early level. Ground truth: single steps spike 35x in dense
    controls (0.17 to 6.05), the median over 5 steps stays within 3x; collapsing
    treatments rise 2-5x, so this rule is a guard against a real blow-up, not a
    collapse detector at this scale."""
    k: Int = Field(default=2, ge=1)  # type: ignore[misc]
    """Trainer steps the blow-up must last."""
    baseline_steps: Int = Field(default=50, ge=1)
    """The trainer steps (from the first norm above 0) whose median is the early level:
    as many as the norm is smoothed over (``window``), so the early level and the level
    it is compared with are medians of like spans. 50, not 3: a real agent run logged
    every 20th step (hotpotqa-agent-grpo, healthy) had one row in 3 steps, an early
    level of 7.1 from that single row, and was stopped at step 1,440 when its 50-step
    median reached 152 (its norms swing 0.5-1,927 from row to row all run long); over
    its first 50 steps (3 rows) the early level is 17.9."""
    window: Int = Field(default=50, ge=1)
    """The norm is the median over this many trainer steps: spikes do not count. 50: a
    real log written every 20th step holds one row in a 5-step window, and a healthy
    agent run's single spikes (to 1,927 from an early 7) then stopped it; no run of the
    corpus is labelled a gradient blow-up."""
    improving: Float | None = Field(default=1.0, ge=0)
    """The sign counts only while the score is not improving by more than this many early
    score sds (:class:`RelativeRule`); None: the sign alone stops."""
    grace: Int = Field(default=2, ge=0)

    def _line(self, early: float) -> float | None:
        return None if self.factor is None else self.factor * early


@dataclass
class TailState(Streak):
    """The first steps' p95s (the baseline) and the latest ``window`` steps' p95s."""

    early: list[tuple[float | None, float | None]] = field(default_factory=list)
    late: deque[tuple[int, tuple[float | None, float | None]]] = field(default_factory=deque)
    baseline: tuple[float | None, float | None] | None = None
    """The early medians (post-tool, text), once the baseline steps are all in."""
    growth: Evidence | None = None


@register("post_tool_tail_growth")
@checked(frozen=True, kw_only=True, config=CHECKED)
class PostToolTailGrowth(Rule):
    """Rolling post-tool p95 |log-ratio| has grown ``factor`` times over its early baseline
    and ``factor`` times more than the text slice's p95 has grown, for ``k`` trainer
    steps. Baseline and window are counted in trainer steps."""

    feeds = (frozenset({N.tail("post_tool", "p95"), N.tail("text", "p95")}),)

    ratio: N.Ratio = "mismatch"
    """Which ratio's tails are read (``correction.names.RATIOS``): ``mismatch`` (pi_trainer
    / pi_sampler, the default, on which the thresholds below were calibrated), ``ref_drift``
    (pi_theta / pi_ref, the policy against the frozen reference: the tails the TRL
    diagnostics describe) or ``ppo`` (pi_new / pi_behaviour over the update). The drift
    families have not been calibrated here: ``ref_drift`` is exactly 0 at step 1 (floored
    at ``min_tail``) and grows in healthy runs too, so read its stops as warnings until a
    benchmark says otherwise."""
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
    """The first trainer steps whose median p95 is the baseline (step 1 is before any
    update)."""
    window: Int = Field(default=3, ge=1)
    """Rolling window: the median of the p95 values of the latest ``window`` trainer steps
    (once that many have passed since the baseline), so a one-step spike does not move
    it."""
    min_tail: Float = Field(default=0.01, gt=0)
    """Tails are floored at this |log-ratio| before taking ratios: below 1% the ratio is
    numerical noise (DESIGN.md: bf16 sampler vs fp32 trainer, mean gap 0.0008), and a
    dense fp32 sampler gives exactly 0."""
    k: Int = Field(default=2, ge=1)
    """Trainer steps the growth must hold."""
    grace: Int = Field(default=3, ge=0)
    action: OnFire = "warn"
    """A warning by default, not a stop: what DESIGN.md calls the first warning, and on the
    ground truth a poor stop. On the drift grid (bench/results/ground_truth/drift, the quick
    preset on an Intel Xeon with AMX, where top-k 50%'s step-1 gap is 0.009 against 0.016 on
    the AMD EPYC of the full grid) it stopped all 9 treatments that did not collapse (7
    stalls and 2 that learn), at steps 9-26, and made no catch the other rules missed; with
    it warning, the defaults there stop 2 of 9 and catch the same 25 of 27 collapses. On the
    full grid it stopped 2 of the defaults' 5 stalls (bench/results/detection_bench.md).
    ``action: stop`` restores the stop."""

    @field_validator("ratio", mode="before")
    @classmethod
    def _ratio(cls, v: Any) -> Any:
        return check_name("ratio", v, N.RATIOS)

    def sources(self) -> tuple[frozenset[str], ...]:
        return (frozenset({self._p95("post_tool"), self._p95("text")}),)

    def _p95(self, slice_: N.Slice) -> str:
        return N.tail(slice_, "p95", self.ratio)

    def start(self) -> TailState:
        return TailState()

    def _med(self, pairs: Iterable[tuple[float | None, float | None]], i: int) -> float | None:
        vals = [v for p in pairs if (v := p[i]) is not None]
        return max(statistics.median(vals), self.min_tail) if vals else None

    def update(self, state: TailState, row: Row, control: ControlView, step: int) -> None:
        p95s = (value(row, self._p95("post_tool")), value(row, self._p95("text")))
        first = state.first_step if state.first_step is not None else step
        ends = first + self.baseline_steps  # the first step after the baseline
        if step < ends:
            state.early.append(p95s)
        else:
            state.late.append((step, p95s))
            while state.late[0][0] <= step - self.window:
                state.late.popleft()
        full = step >= ends + self.window - 1
        state.growth = self._growth(state) if full else None
        extend(state, self._crosses(state.growth), step)

    def _growth(self, state: TailState) -> Evidence | None:
        """Growth figures at the latest step; None if not computable yet."""
        if state.baseline is None:  # the first steps never change: their medians once
            state.baseline = (self._med(state.early, 0), self._med(state.early, 1))
        bp, bt = state.baseline
        late = [p for _, p in state.late]
        rp, rt = self._med(late, 0), self._med(late, 1)
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
        if self.ratio != "mismatch":  # the tails' family, where not the default one
            ev["ratio"] = self.ratio
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

    ratio: N.Ratio = "mismatch"
    """Whose ESS is read (``correction.names.RATIOS``): ``mismatch`` (the importance
    weights pi_trainer / pi_sampler, the default, calibrated; verl's whole-batch ESS where
    a log lacks the post-tool one), ``ref_drift`` (pi_theta / pi_ref) or ``ppo`` (pi_new /
    pi_behaviour over the update); the drift families read only their post-tool ESS and
    have not been calibrated here."""
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
    """The rule only fires where the median ESS of the first ``baseline_steps`` trainer
    steps was
    at or above ``floor`` (None: the floor alone). Measured (examples/logs, tiny model,
    2-bit codec, lr 1e-4): the post-tool ESS is 0.01-0.68 from step 1 on while the score
    holds steady, so a low ESS from the start is the codec's gap (gap_vs_control's
    warning), not a collapse; the floor alone stopped that healthy run at step 6."""
    k: Int = Field(default=2, ge=1)  # type: ignore[misc]
    """Calibration (k in 2, 3, 5): 2."""
    grace: Int = Field(default=3, ge=0)

    @field_validator("ratio", mode="before")
    @classmethod
    def _ratio(cls, v: Any) -> Any:
        return check_name("ratio", v, N.RATIOS)

    def sources(self) -> tuple[frozenset[str], ...]:
        return tuple(frozenset({n}) for n in self._names())

    def _names(self) -> tuple[str, ...]:
        ratio = self.ratio
        post = N.ess("post_tool", ratio)
        return (post, N.IS_ESS) if ratio == "mismatch" else (post,)

    def start(self) -> EssState:
        return EssState()

    def _ess(self, row: Row) -> tuple[float, str] | None:
        for nm in self._names():
            v = value(row, nm)
            if v is not None:
                return v, nm
        return None

    def update(self, state: EssState, row: Row, control: ControlView, step: int) -> None:
        e = self._ess(row)
        first = state.first_step if state.first_step is not None else step
        if self.baseline_steps is not None and step < first + self.baseline_steps and e:
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
        ev.update({"ess": ess, "metric": src, "floor": self.floor})  # metric: the family
        return ev


MISMATCH_FLOORS: dict[str, float] = {
    N.PROBS_DIFF_MEAN: 0.02,
    N.ABS_LOG_RATIO_MEAN: 0.05,
    N.KL: 0.01,
    N.K2_KL: 0.01,
    N.K3_KL: 0.01,
    N.MASKED_FRACTION: 0.05,
    N.RS_MASKED_FRACTION: 0.05,
    N.RAW_RATIO_MAX: 3.0,
}
"""The mismatch families ``mismatch_growth`` reads, each with the level its grown value
must also reach (its absolute guard). The KL estimators (k1 signed: its size is read) are
in nats per token; ``rollout_corr/raw_ratio_max`` is read as |log| of the ratio (3: a
token 20x likelier to one engine than the other). Guards: a dense run's mismatch is
bf16 rounding (ground truth: probability gap 0.0003-0.001, |log-ratio| about 0.001, k3
about 1e-5), so ten times it stays far below every guard; prime-rl masks a token once
|p_train - p_infer| > 0.2, so a mean gap of 0.02 is a tenth of its per-token line."""


@dataclass
class MismatchState(Streak):
    """Per family: its early level and its smoothed recent value."""

    early: dict[str, Baseline] = field(default_factory=dict)
    rolling: dict[str, Rolling] = field(default_factory=dict)
    crossed: Evidence | None = None


def _mismatch(row: Row, name: str) -> float | None:
    v = value(row, name)
    if v is None:
        return None
    if name == N.RAW_RATIO_MAX:
        return abs(math.log(v)) if v > 0 else None
    return abs(v)


@register("mismatch_growth")
@checked(frozen=True, kw_only=True, config=CHECKED)
class MismatchGrowth(StreakRule):
    """The trainer/sampler mismatch itself, judged against the run's own early level with no
    control: any family of ``MISMATCH_FLOORS`` (probability gap, mean |log-ratio|, KL k1/k2/
    k3, masked share, the raw importance ratio's extreme) whose median over ``window``
    trainer steps has reached ``factor`` times its early level and its family's absolute
    guard, for ``k`` trainer steps. A mismatch high from the first step does not fire it:
    that is the codec's (or the engines') gap, which ``gap_vs_control`` reports against a
    control and the ESS and tail rules judge as it evolves; this rule is for a mismatch that
    *grows* while training runs (prime-rl's ``mismatch_kl`` climbing 0.001 -> 0.5 -> 3 as its
    masked share goes 0 -> 27%), which no other rule reads without a control."""

    feeds = tuple(frozenset({n}) for n in MISMATCH_FLOORS)

    factor: Float | None = Field(default=10.0, gt=1)
    """Ten times the early level. On the ground truth the mismatch is set by the codec from
    step 1 and does not grow: no run of it, dense or compressed, fires at 10x
    (bench/results/detection_bench.md). A mismatch that grows 10x is a trainer and a sampler
    drifting apart, whatever the level it started from."""
    baseline_steps: Int = Field(default=3, ge=1)
    """The first trainer steps (from the family's first value above 0) whose median is the
    early level."""
    window: Int = Field(default=3, ge=1)
    """Trainer steps the value is smoothed over (the lower median): one spike does not
    count."""
    k: Int = Field(default=2, ge=1)  # type: ignore[misc]
    """Trainer steps the growth must last."""
    grace: Int = Field(default=2, ge=0)

    def start(self) -> MismatchState:
        return MismatchState()

    def update(self, state: MismatchState, row: Row, control: ControlView, step: int) -> None:
        state.crossed = None
        for name, guard in MISMATCH_FLOORS.items():
            v = _mismatch(row, name)
            early = state.early.setdefault(name, Baseline())
            early.feed(v, step, self.baseline_steps, positive=True)
            smooth = state.rolling.setdefault(name, Rolling()).feed(v, step, self.window)
            lvl = early.level
            if v is None or smooth is None or lvl is None or lvl <= 0 or self.factor is None:
                continue
            line = max(self.factor * lvl, guard)
            if smooth >= line and state.crossed is None:
                state.crossed = {"figure": name, "value": smooth, "early": lvl, "line": line,
                                 "guard": guard, "times_early": smooth / lvl}  # fmt: skip
        extend(state, state.crossed is not None, step)

    def evidence(
        self, state: MismatchState, row: Row, control: ControlView, step: int
    ) -> Evidence | None:
        return None if state.crossed is None else {**state.crossed, "window": self.window}


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

    def reads(self, row: Row) -> bool:
        return True  # the control's first step may come at any row of the run

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
    N.ENTROPY, N.KL_TO_REF,
)  # fmt: skip
"""The score, the loss (gapwatch's and a Trainer's ``loss``), the gradient norm, the gap,
the entropy and the KL to the reference."""


@dataclass
class NonFiniteState(Streak):
    """Steps in a row with a non-finite figure, and those figures at the latest."""

    bad: dict[str, str] = field(default_factory=dict)


@register("non_finite")
@checked(frozen=True, kw_only=True, config=CHECKED)
class NonFinite(Rule):
    """Stop after ``k`` trainer steps in a row in which any watched figure (``names``: the score,
    the loss, the gradient norm, the gap) is NaN or infinite.

    The one rule that reads non-finite values instead of passing over them: a NaN loss or
    an infinite gradient norm is among the most reported RL failures, and every other rule
    treats such a step as "not crossing", so without this rule a blown-up run goes on.
    Figures a step does not have are not counted."""

    feeds = tuple(frozenset({n}) for n in NON_FINITE_WATCHED)

    k: Int = Field(default=1, ge=1)
    """Trainer steps in a row needed. One: a NaN does not heal, and the optimiser state it has
    already poisoned makes every later step meaningless."""
    names: tuple[str, ...] = NON_FINITE_WATCHED
    """The figures watched."""
    grace: Int = Field(default=0, ge=0)

    def start(self) -> NonFiniteState:
        return NonFiniteState()

    def reads(self, row: Row) -> bool:
        return any(n in row for n in self.names)

    def update(self, state: NonFiniteState, row: Row, control: ControlView, step: int) -> None:
        bad = {}
        for nm in self.names:
            v = row.get(nm)
            if isinstance(v, float) and not math.isfinite(v):
                bad[nm] = "nan" if v != v else ("inf" if v > 0 else "-inf")
        state.bad = bad
        extend(state, bool(bad), step)

    def decide(self, state: NonFiniteState, row: Row, control: ControlView, step: int) -> Decision:
        if state.n < self.k:
            return self._go_on(step)
        ev: Evidence = {**state.bad, "k": self.k, "streak": state.n}
        return Decision("stop", self.name, step, ev)
