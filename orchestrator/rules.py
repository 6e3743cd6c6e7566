"""Stop rules: what a run's metrics say, step by step: continue, warn or stop.

Each rule is a small frozen (pydantic) dataclass registered by name with :func:`register`;
its thresholds are typed keyword fields (``float | None`` where a test can be switched
off) validated like every gapwatch config (``workers.validation``). The registry is the
one list of rule names for YAML validation, the Tune Stopper, ``gapwatch run``,
``gapwatch replay`` and ``gapwatch watch``; all of them build a :class:`RuleSet` with
:func:`build` and follow a run with one :class:`Watcher` (``RuleSet.watch()``).

**Incremental.** A rule never re-reads a history. ``rule.start()`` makes its state (a
streak counter, the first steps' baseline values, a rolling window), and
``rule.observe(state, row, control, step)`` takes one step and returns one :class:`Decision`
about it. State is bounded by the rule's own settings (``baseline_steps``, ``window``),
never by the number of steps, so following a 100,000-step log costs linear time and
constant memory. Apart from its own state a rule is pure: no I/O, no Ray, no store.

Conventions every rule follows:

- A row is a dict with ``"step"`` (int) and metric names from :mod:`correction.names`.
  A name may be absent at a step.
- A missing, non-numeric, NaN or infinite value never trips a rule and never raises: it
  counts as "not crossing" at that step, so it also ends a run of consecutive crossing
  steps (a rule needing k steps in a row starts counting again after it).
- ``grace``: while the run has reported ``grace`` steps or fewer the rule only continues
  (its state still counts those steps).
- The paired control is seen through a :class:`ControlView`: its first step, and its
  figures at the step being judged. A treatment step is judged with the control's
  figures at that step where the control has reported it; where the control is behind,
  only the control-free tests apply to that step, and a control step arriving later
  does not re-judge it.
- Evidence is JSON-able: the numbers that crossed, the thresholds and the window.

Call :func:`build` (``RuleSet``), :func:`get` (one rule), :func:`names`,
:func:`required_metrics` / :func:`alternatives` (which figures a rule reads).
``rule(history, control)`` and ``RuleSet.evaluate(history, control)`` answer about the
last step of a whole history (a convenience for tests and one-off questions; they replay
the history through a fresh watcher).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, TypeVar

from pydantic import ConfigDict, Field, ValidationError
from pydantic.dataclasses import dataclass as checked

from correction import names as N
from workers.validation import Float, Int, check_name, describe, unknown_keys

Action = Literal["continue", "warn", "stop"]
ACTIONS: Final[tuple[Action, ...]] = ("continue", "warn", "stop")
Row = Mapping[str, Any]
History = Sequence[Row]
Evidence = dict[str, float | int | str]
_CHECKED = ConfigDict(extra="forbid")

__all__ = [
    "ACTIONS",
    "ControlView",
    "Decision",
    "Rule",
    "RuleSet",
    "Watcher",
    "alternatives",
    "build",
    "get",
    "names",
    "needs_control",
    "register",
    "required_metrics",
]


@dataclass(frozen=True)
class Decision:
    """What one rule says about one step of one run."""

    action: Action
    """``continue``, ``warn`` or ``stop``."""
    rule: str
    """The registered name of the rule that decided."""
    step: int
    """The step the decision is about: the one just observed (gap_vs_control's warning is
    about the run's first step)."""
    evidence: Evidence = field(default_factory=dict)
    """The numbers that crossed, the thresholds and the window (JSON-able)."""

    def to_dict(self) -> dict[str, Any]:
        """``{"step", "rule", "action", "evidence"}``, as replay's JSON and the store want."""
        return {
            "step": self.step,
            "rule": self.rule,
            "action": self.action,
            "evidence": dict(self.evidence),
        }


# --- registry --------------------------------------------------------------------------

_REGISTRY: dict[str, type[Rule]] = {}
R = TypeVar("R", bound=type)


def register(name: str) -> Callable[[R], R]:
    """Class decorator: register a :class:`Rule` subclass under ``name`` (once)."""

    def deco(cls: R) -> R:
        if not issubclass(cls, Rule):
            raise TypeError(f"rule {name!r}: {cls.__name__} is not a Rule")
        if name in _REGISTRY:
            raise ValueError(f"rule {name!r} is registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def names() -> list[str]:
    """Every registered rule name, sorted."""
    return sorted(_REGISTRY)


def _cls(name: str) -> type[Rule]:
    check_name("rule", name, names())
    return _REGISTRY[name]


def get(name: str, **params: Any) -> Rule:
    """A rule by name with thresholds by keyword; a bad name, parameter or value fails in
    one line naming the valid ones."""
    cls = _cls(name)
    try:
        unknown_keys("parameter", params, [f.name for f in dataclasses.fields(cls)])
        return cls(**params)
    except ValidationError as exc:
        raise ValueError(f"rule {name!r}: {describe(exc)}") from None
    except ValueError as exc:
        raise ValueError(f"rule {name!r}: {exc}") from None


def alternatives(name: str) -> tuple[frozenset[str], ...]:
    """The metric sets that can feed rule ``name``: any one set, fully present, suffices."""
    return _cls(name).feeds


def required_metrics(name: str) -> set[str]:
    """Every metric name rule ``name`` may read (the union of its :func:`alternatives`).

    Some rules accept alternatives (``constant_advantage`` reads the zero-advantage
    fraction or, where a log lacks it, score min and max); use :func:`alternatives`
    or :meth:`Rule.can_feed` to ask whether a given set of names is enough.
    """
    return set().union(*_cls(name).feeds)


def needs_control(name: str) -> bool:
    """True where rule ``name`` can only decide with the paired control's history."""
    return _cls(name).control_only


# --- helpers ---------------------------------------------------------------------------


def value(row: Row, name: str) -> float | None:
    """``row[name]`` as a float, or None where it is absent, not a number, NaN or infinite
    (so evidence stays strict JSON)."""
    v = row.get(name)
    if type(v) is float:  # the common case first: this runs for every rule at every step
        return v if math.isfinite(v) else None
    if v is None or isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def step_of(row: Row) -> int:
    """The row's integer ``step``; ValueError where it has none."""
    s = row.get("step")
    if isinstance(s, bool) or not isinstance(s, int | float) or not math.isfinite(s) or s != int(s):
        raise ValueError(f"history row has no integer 'step' (got {s!r}); every row needs one")
    return int(s)


class ControlView:
    """What the rules of one run know of its paired control, fed step by step.

    Keeps only the figures some rule reads (``Rule.control_feeds``): those of the
    control's first step, and those of steps the run has not yet been judged at (a
    control ahead of its run waits here; a step the run has passed is dropped).
    """

    def __init__(self, keep: Iterable[str]) -> None:
        self.keep = frozenset(keep)
        self.first: dict[str, Any] | None = None
        """The control's first step (``step`` and the kept figures), once it has reported."""
        self._at: dict[int, dict[str, Any]] = {}
        self._judged = 0  # steps below this are never asked for again

    def add(self, row: Row) -> None:
        """One control step (in step order)."""
        step = step_of(row)
        kept = {"step": step, **{k: row[k] for k in self.keep if k in row}}
        if self.first is None:
            self.first = kept
        if step >= self._judged and len(kept) > 1:
            self._at[step] = kept

    def at(self, step: int) -> dict[str, Any] | None:
        """The control's figures at ``step``, where it has reported that step."""
        return self._at.get(step)

    def judged(self, step: int) -> None:
        """The run has been judged at ``step``: forget the control's figures up to it."""
        self._judged = step + 1
        for s in [s for s in self._at if s <= step]:
            del self._at[s]


@dataclass
class State:
    """A rule's memory of one run: how many steps it has seen (rules extend it)."""

    seen: int = 0


# --- the rule base ---------------------------------------------------------------------


@checked(frozen=True, kw_only=True, config=_CHECKED)
class Rule:
    """Base of every rule: a grace period, validated fields and the step contract."""

    name: ClassVar[str] = ""
    feeds: ClassVar[tuple[frozenset[str], ...]] = ()
    """Metric sets that can feed the rule; any one set, fully present, suffices."""
    control_feeds: ClassVar[frozenset[str]] = frozenset()
    """The control's figures the rule reads (kept by the :class:`ControlView`)."""
    control_only: ClassVar[bool] = False
    """True where the rule can only decide with the paired control's history."""

    grace: Int = Field(default=0, ge=0)
    """Steps at the start of a run during which the rule only continues."""

    def can_feed(self, available: Iterable[str]) -> bool:
        """Whether a log holding the metric names ``available`` can feed this rule."""
        have = set(available)
        return any(alt <= have for alt in self.feeds)

    def params(self) -> dict[str, Any]:
        """The rule's thresholds as a plain dict (for display and the store)."""
        return dataclasses.asdict(self)

    def start(self) -> State:
        """A fresh state for one run (override with the rule's own :class:`State`)."""
        return State()

    def observe(self, state: Any, row: Row, control: ControlView, step: int) -> Decision:
        """Take the run's next step, ``row`` at ``step`` (its state updated in place); the
        decision about it."""
        state.seen += 1
        self.update(state, row, control, step)
        # If still in grace period, do not decide yet
        if state.seen <= self.grace:
            return self._go_on(step)
        return self.decide(state, row, control, step)

    def update(self, state: Any, row: Row, control: ControlView, step: int) -> None:
        """Fold the step into the state (override)."""

    def decide(self, state: Any, row: Row, control: ControlView, step: int) -> Decision:
        """The rule proper, after the grace period (override)."""
        raise NotImplementedError

    def __call__(self, history: History, control: History | None = None) -> Decision:
        """The decision about the last step of ``history`` (replayed from its first step;
        every step of ``control`` is known throughout)."""
        if not history:
            raise ValueError(f"rule {self.name!r} got an empty history; pass at least one step")
        w = Watcher((self,))
        for row in control or ():
            w.control(row)
        for row in history:
            w.step(row)
        return w.last[self.name]

    def _go_on(self, step: int) -> Decision:
        return Decision("continue", self.name, step)


@dataclass
class Streak(State):
    """Steps in a row (up to the latest) that crossed the rule's line."""

    n: int = 0


class StreakRule(Rule):
    """A rule that stops after ``k`` crossing steps in a row (``k`` is the subclass's)."""

    k: ClassVar[int]  # each subclass declares it as a field

    def start(self) -> Streak:
        return Streak()

    def crosses(self, row: Row, control: ControlView, step: int) -> bool:
        """Whether this step crosses the rule's line (override)."""
        raise NotImplementedError

    def update(self, state: Any, row: Row, control: ControlView, step: int) -> None:
        state.n = state.n + 1 if self.crosses(row, control, step) else 0

    def decide(self, state: Any, row: Row, control: ControlView, step: int) -> Decision:
        if state.n < self.k:
            return self._go_on(step)
        ev = self.evidence(state, row, control, step)
        if ev is None:
            return self._go_on(step)
        return Decision("stop", self.name, step, {**ev, "k": self.k, "streak": state.n})

    def evidence(self, state: Any, row: Row, control: ControlView, step: int) -> Evidence | None:
        """What crossed at this step (None: do not stop after all) (override)."""
        raise NotImplementedError


# --- the rules -------------------------------------------------------------------------


@register("score_collapse")
@checked(frozen=True, kw_only=True, config=_CHECKED)
class ScoreCollapse(StreakRule):
    """Mean score below ``floor``, or below the control's at the same step by
    ``control_margin``, for ``k`` steps in a row. Without a control only the floor test."""

    feeds = (frozenset({N.SCORE_MEAN}),)
    control_feeds = frozenset({N.SCORE_MEAN})

    k: Int = Field(default=2, ge=1)  # type: ignore[misc]
    """Consecutive crossing steps needed. Evidence: the product requirement is a stop no
    later than 2 steps after the score first falls below zero; k=2 stops at the 2nd
    sub-zero step (seed: first below zero at step 6 -> stop at 7), leaving one step of
    slack for a score that dips under zero once and recovers."""
    floor: Float | None = 0.0
    """Score below this crosses (seed: below zero at step 6, -0.1 format penalty only
    from step 17; a healthy run scores >= 0 since only a format error is negative)."""
    control_margin: Float | None = 0.5
    """Also crosses where the control's score at the same step exceeds this run's by
    more than this. 0.5 is half the task reward of 1: far beyond step-to-step noise of a
    run of 32 trajectories, yet caught before the floor where the control is healthy."""
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
@checked(frozen=True, kw_only=True, config=_CHECKED)
class LengthRunaway(StreakRule):
    """Interactions cut at the budget (clip ratio >= ``clip_level``) or tokens per
    interaction >= ``budget_frac`` of the budget, for ``k`` steps in a row."""

    feeds = (
        frozenset({N.CLIP_RATIO}),
        frozenset({N.RESPONSE_LENGTH_MEAN, N.RESPONSE_BUDGET}),
    )

    k: Int = Field(default=2, ge=1)  # type: ignore[misc]
    """Seed: tokens per interaction reached the budget (512) by step 5 and the score fell
    below zero at step 6; with k=2 the rule stops at step 6 at the latest, a step before
    score_collapse can."""
    clip_level: Float | None = Field(default=0.5, gt=0, le=1)
    """Clip ratio at or above this crosses. Truncated actions are unparseable (-0.1), so
    half the interactions cut means the score is mostly format penalty. The Post-Training
    Toolkit's heuristic uses 0.3 but only after 30 steps; a healthy tool-call action is a
    few dozen tokens and is essentially never cut."""
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
@checked(frozen=True, kw_only=True, config=_CHECKED)
class ConstantAdvantage(StreakRule):
    """Zero-advantage group fraction >= ``frac`` for ``k`` steps in a row (where a log has
    no such figure, a step whose score min equals its max counts as fraction 1)."""

    feeds = (
        frozenset({N.ZERO_ADV_FRAC}),
        frozenset({N.SCORE_MIN, N.SCORE_MAX}),
    )

    frac: Float = 0.95
    """Issue 5's level: nearly every group's rewards are equal, so nothing is learned."""
    k: Int = Field(default=3, ge=1)  # type: ignore[misc]
    """Seed: from step 17 every trajectory scored exactly -0.1; 3 steps rule out a batch
    that is uniform by chance."""
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
@checked(frozen=True, kw_only=True, config=_CHECKED)
class PostToolTailGrowth(Rule):
    """Rolling post-tool p95 |log-ratio| has grown ``factor`` times over its early baseline
    and ``factor`` times more than the text slice's p95 has grown, for ``k`` steps."""

    feeds = (frozenset({N.tail("post_tool", "p95"), N.tail("text", "p95")}),)

    factor: Float = Field(default=3.0, gt=1)
    """DESIGN.md: instability first shows as the post-tool p95 stretching while text-only
    tails stay flat. No growth curve is measured yet; 3x sits well above the step-to-step
    noise of a healthy run's p95 (the tests' noisy histories vary by +-20%)."""
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
@checked(frozen=True, kw_only=True, config=_CHECKED)
class EssCollapse(StreakRule):
    """Post-tool effective sample size (a fraction in (0, 1]) that has *fallen* below
    ``floor`` for ``k`` steps in a row: its early median was at or above the floor. Where a
    log has no ``ess/post_tool``, verl's whole-batch
    ``rollout_corr/rollout_is_eff_sample_size`` is read instead."""

    feeds = (frozenset({N.ess("post_tool")}), frozenset({N.IS_ESS}))

    floor: Float = Field(default=0.2, gt=0, le=1)
    """DESIGN.md: the ESS of the importance weights falls as the post-tool tail stretches;
    no collapse level is measured yet. Below 0.2 a fifth of the tokens carry the whole
    update; a dense run's ESS is 1.0 (identical weights)."""
    baseline_steps: Int | None = Field(default=3, ge=1)
    """The rule only fires where the median ESS of the first ``baseline_steps`` steps was
    at or above ``floor`` (None: the floor alone). Measured (examples/logs, tiny model,
    2-bit codec, lr 1e-4): the post-tool ESS is 0.01-0.68 from step 1 on while the score
    holds steady, so a low ESS from the start is the codec's gap (gap_vs_control's
    warning), not a collapse; the floor alone stopped that healthy run at step 6."""
    k: Int = Field(default=3, ge=1)  # type: ignore[misc]
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
@checked(frozen=True, kw_only=True, config=_CHECKED)
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


# --- following a run -------------------------------------------------------------------


class Watcher:
    """One run's rules, followed step by step: the one way every path applies them.

    Feed the paired control's steps with :meth:`control` as they come, and the run's with
    :meth:`step`, in step order. ``step`` returns the decisions to record: each rule's
    warn or stop when its action changes (a rule that stays tripped is recorded once),
    stops first. :attr:`first_stop` is the first stop of the run: where a sweep ends it.
    Memory: each rule's bounded state, and the control's figures for steps the run has
    not reached yet.
    """

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        self._states = [r.start() for r in self.rules]
        self._control = ControlView(set().union(*(r.control_feeds for r in self.rules)))
        self.last: dict[str, Decision] = {}
        """Each rule's decision about the latest step (continue included)."""
        self.first_stop: Decision | None = None
        self.last_step: int | None = None

    @property
    def control_names(self) -> frozenset[str]:
        """The control's figures these rules read (none: no need to feed the control)."""
        return self._control.keep

    def control(self, row: Row) -> None:
        """The paired control's next step."""
        self._control.add(row)

    def step(self, row: Row) -> list[Decision]:
        """The run's next step; the new warn/stop decisions about it, stops first."""
        step = step_of(row)
        if self.last_step is not None and step <= self.last_step:
            raise ValueError(
                f"step {step} came after step {self.last_step}: a watcher takes each step "
                "once, in increasing order (start a new one for a run that restarted)"
            )
        self.last_step = step
        new: list[Decision] = []
        for rule, state in zip(self.rules, self._states, strict=True):
            d = rule.observe(state, row, self._control, step)
            before = self.last.get(rule.name)
            if d.action != "continue" and (before is None or before.action != d.action):
                new.append(d)
            self.last[rule.name] = d
        self._control.judged(step)
        new.sort(key=lambda d: d.action != "stop")
        if self.first_stop is None and new and new[0].action == "stop":
            self.first_stop = new[0]
        return new


# --- rule sets -------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleSet:
    """The rules a sweep applies; every path follows a run with :meth:`watch`."""

    rules: tuple[Rule, ...]

    def names(self) -> list[str]:
        return [r.name for r in self.rules]

    def watch(self) -> Watcher:
        """A fresh :class:`Watcher` of these rules for one run."""
        return Watcher(self.rules)

    def evaluate(self, history: History, control: History | None = None) -> list[Decision]:
        """Every rule's non-continue decision about the last step of ``history``, stops
        first (every step of ``control`` known throughout; replays the history)."""
        if not history:
            return []
        w = self.watch()
        for row in control or ():
            w.control(row)
        for row in history:
            w.step(row)
        out = [d for d in w.last.values() if d.action != "continue"]
        return sorted(out, key=lambda d: d.action != "stop")

    def first_stop(self, history: History, control: History | None = None) -> Decision | None:
        """The decision that stops the run at its latest step, or None."""
        ds = self.evaluate(history, control)
        return ds[0] if ds and ds[0].action == "stop" else None

    def select(self, only: Iterable[str]) -> RuleSet:
        """The rules named in ``only`` (registered names; unknown ones fail listing valid)."""
        wanted = list(only)
        for nm in wanted:
            _cls(nm)
        by_name = {r.name: r for r in self.rules}
        missing = [nm for nm in wanted if nm not in by_name]
        if missing:
            raise ValueError(
                f"rule(s) {', '.join(missing)} are disabled in the settings; "
                "remove their `enabled: false` to select them"
            )
        return RuleSet(tuple(by_name[nm] for nm in wanted))


def build(settings: Mapping[str, Any] | None = None) -> RuleSet:
    """A :class:`RuleSet` from a sweep YAML's ``rules:`` section.

    ``settings`` maps rule names to their parameters, e.g.
    ``{"score_collapse": {"k": 3}, "ess_collapse": {"enabled": False}}``. Every registered
    rule is on with its defaults unless set otherwise; ``enabled: false`` turns one off;
    a rule set to null (``score_collapse:`` with nothing after it) keeps its defaults.
    Unknown rules or parameters raise ValueError listing the valid ones.
    """
    settings = settings or {}
    if not isinstance(settings, Mapping):
        raise ValueError(
            f"rules settings must be a mapping of rule name to parameters, got {settings!r}"
        )
    for nm in settings:
        _cls(str(nm))
    chosen: list[Rule] = []
    for nm in names():
        params = settings.get(nm) or {}
        if not isinstance(params, Mapping):
            raise ValueError(f"rules.{nm} must be a mapping of parameters, got {params!r}")
        params = dict(params)
        enabled = params.pop("enabled", True)
        if not isinstance(enabled, bool):
            raise ValueError(f"rules.{nm}.enabled must be true or false, got {enabled!r}")
        rule = get(nm, **params)  # validates even a disabled rule's parameters
        if enabled:
            chosen.append(rule)
    return RuleSet(tuple(chosen))
