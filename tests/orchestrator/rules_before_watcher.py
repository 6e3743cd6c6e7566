"""The stop rules as they were before the incremental watcher: the oracle of
``test_watcher_equivalence.py``, frozen on purpose (do not edit; the rules it checks live
in ``orchestrator/rules.py``). Each rule re-evaluated the whole history at every step.

Stop rules: pure functions of a run's metric history that say continue, warn or stop.

Each rule is a small frozen dataclass registered by name with :func:`register`; its
thresholds are typed keyword fields (``float | None`` where a test can be switched off),
and ``rule(history, control)`` returns one :class:`Decision` about the *latest* step.
The registry is the one list of rule names for YAML validation, the Tune Stopper,
``gapwatch run`` and ``gapwatch replay``; all of them run the same :class:`RuleSet`,
built from a sweep's ``rules:`` section by :func:`build`.

Conventions every rule follows:

- ``history`` is a list of dicts, oldest first, each with ``"step"`` (int) and metric
  names from :mod:`correction.names`. A name may be absent at a step.
- A missing, non-numeric, NaN or infinite value never trips a rule and never raises: it counts as
  "not crossing" at that step, so it also ends a run of consecutive crossing steps
  (a rule needing k steps in a row starts counting again after it).
- ``grace``: while the history holds ``grace`` steps or fewer the rule only continues.
- Evidence is JSON-able: the numbers that crossed, the thresholds and the window.

Not here: I/O, Ray, the store. The Stopper feeds histories in; :mod:`orchestrator.watch.replay`
feeds logs in.

Call :func:`build` (``RuleSet``), :func:`get` (one rule), :func:`names`,
:func:`required_metrics` / :func:`alternatives` (which figures a rule reads).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, TypeVar

from gapwatch.correction import names as N

Action = Literal["continue", "warn", "stop"]
ACTIONS: Final[tuple[Action, ...]] = ("continue", "warn", "stop")
Row = Mapping[str, Any]
History = Sequence[Row]
Evidence = dict[str, float | int | str]

__all__ = [
    "ACTIONS",
    "Decision",
    "Rule",
    "RuleSet",
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
    """The step the decision is about: the history's latest (gap_vs_control's warning is
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
R = TypeVar("R", bound="type[Rule]")


def register(name: str) -> Callable[[R], R]:
    """Class decorator: register a :class:`Rule` subclass under ``name`` (once)."""

    def deco(cls: R) -> R:
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
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown rule {name!r}; valid rules: {', '.join(names())}") from None


def get(name: str, **params: Any) -> Rule:
    """A rule by name with thresholds by keyword; unknown names or params fail listing valid ones."""
    cls = _cls(name)
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)} for rule {name!r}; "
            f"valid parameters: {', '.join(valid)}"
        )
    return cls(**params)


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
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def streak(history: History, crosses: Callable[[Row], bool]) -> int:
    """How many of the latest steps in a row satisfy ``crosses``."""
    n = 0
    for row in reversed(history):
        if not crosses(row):
            break
        n += 1
    return n


def _step(row: Row) -> int:
    s = row.get("step")
    if isinstance(s, bool) or not isinstance(s, int | float) or not math.isfinite(s) or s != int(s):
        raise ValueError(f"history row has no integer 'step' (got {s!r}); every row needs one")
    return int(s)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(rule: str, fname: str, hint: Any, v: Any) -> Any:
    """Check one YAML/keyword value against the field's type; ints pass for floats."""
    args = typing.get_args(hint)
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if args else hint
    if v is None:
        if optional:
            return None
        raise ValueError(f"rule {rule!r}: {fname} may not be null")
    if base is float and isinstance(v, int | float) and not isinstance(v, bool):
        if not math.isfinite(v):
            raise ValueError(f"rule {rule!r}: {fname} must be a finite number, got {v!r}")
        return float(v)
    if base is int and isinstance(v, int) and not isinstance(v, bool):
        return v
    if base is bool and isinstance(v, bool):
        return v
    if base is str and isinstance(v, str):
        return v
    kind = getattr(base, "__name__", str(base)) + (" or null" if optional else "")
    raise ValueError(f"rule {rule!r}: {fname} must be {kind}, got {v!r}")


# --- the rule base ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Rule:
    """Base of every rule: a grace period, type-checked fields and the call contract."""

    name: ClassVar[str] = ""
    feeds: ClassVar[tuple[frozenset[str], ...]] = ()
    """Metric sets that can feed the rule; any one set, fully present, suffices."""
    control_only: ClassVar[bool] = False
    """True where the rule can only decide with the paired control's history."""

    grace: int = 0
    """Steps at the start of a run during which the rule only continues."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            hint = _hints(type(self))[f.name]
            object.__setattr__(
                self, f.name, _coerce(self.name, f.name, hint, getattr(self, f.name))
            )
        if self.grace < 0:
            raise ValueError(f"rule {self.name!r}: grace must be >= 0, got {self.grace}")
        k = getattr(self, "k", 1)
        if k < 1:
            raise ValueError(f"rule {self.name!r}: k must be >= 1, got {k}")

    def can_feed(self, available: Iterable[str]) -> bool:
        """Whether a log holding the metric names ``available`` can feed this rule."""
        have = set(available)
        return any(alt <= have for alt in self.feeds)

    def params(self) -> dict[str, Any]:
        """The rule's thresholds as a plain dict (for display and the store)."""
        return dataclasses.asdict(self)

    def __call__(self, history: History, control: History | None = None) -> Decision:
        if not history:
            raise ValueError(f"rule {self.name!r} got an empty history; pass at least one step")
        step = _step(history[-1])
        # If still in grace period, do not decide yet.
        if len(history) <= self.grace:
            return Decision("continue", self.name, step)
        return self.decide(history, control, step)

    def decide(self, history: History, control: History | None, step: int) -> Decision:
        """The rule proper, after the grace period (override)."""
        raise NotImplementedError

    def _go_on(self, step: int) -> Decision:
        return Decision("continue", self.name, step)


# --- the rules -------------------------------------------------------------------------


@register("score_collapse")
@dataclass(frozen=True, kw_only=True)
class ScoreCollapse(Rule):
    """Mean score below ``floor``, or below the control's at the same step by
    ``control_margin``, for ``k`` steps in a row. Without a control only the floor test."""

    feeds = (frozenset({N.SCORE_MEAN}),)

    k: int = 2
    """Consecutive crossing steps needed. Evidence: the product requirement is a stop no
    later than 2 steps after the score first falls below zero; k=2 stops at the 2nd
    sub-zero step (seed: first below zero at step 6 -> stop at 7), leaving one step of
    slack for a score that dips under zero once and recovers."""
    floor: float | None = 0.0
    """Score below this crosses (seed: below zero at step 6, -0.1 format penalty only
    from step 17; a healthy run scores >= 0 since only a format error is negative)."""
    control_margin: float | None = 0.5
    """Also crosses where the control's score at the same step exceeds this run's by
    more than this. 0.5 is half the task reward of 1: far beyond step-to-step noise of a
    run of 32 trajectories, yet caught before the floor where the control is healthy."""
    grace: int = 2
    """The first 2 steps are noisy; with k=2 a run below zero from step 1 stops at step
    3, still within the 2-step requirement."""

    def decide(self, history: History, control: History | None, step: int) -> Decision:
        ctl = {_step(r): c for r in control or () if (c := value(r, N.SCORE_MEAN)) is not None}

        def crosses(row: Row) -> bool:
            s = value(row, N.SCORE_MEAN)
            if s is None:
                return False
            if self.floor is not None and s < self.floor:
                return True
            c = ctl.get(_step(row))
            return self.control_margin is not None and c is not None and c - s > self.control_margin

        n = streak(history, crosses)
        if n < self.k:
            return self._go_on(step)
        s = value(history[-1], N.SCORE_MEAN) or 0.0
        ev: Evidence = {"score": s, "k": self.k, "streak": n}
        below_floor = self.floor is not None and s < self.floor
        ev["crossed"] = "floor" if below_floor else "control_margin"
        if self.floor is not None:
            ev["floor"] = self.floor
        c = ctl.get(step)
        if c is not None and self.control_margin is not None:
            ev["control_score"] = c
            ev["control_margin"] = self.control_margin
        return Decision("stop", self.name, step, ev)


@register("length_runaway")
@dataclass(frozen=True, kw_only=True)
class LengthRunaway(Rule):
    """Interactions cut at the budget (clip ratio >= ``clip_level``) or tokens per
    interaction >= ``budget_frac`` of the budget, for ``k`` steps in a row."""

    feeds = (
        frozenset({N.CLIP_RATIO}),
        frozenset({N.RESPONSE_LENGTH_MEAN, N.RESPONSE_BUDGET}),
    )

    k: int = 2
    """Seed: tokens per interaction reached the budget (512) by step 5 and the score fell
    below zero at step 6; with k=2 the rule stops at step 6 at the latest, a step before
    score_collapse can."""
    clip_level: float | None = 0.5
    """Clip ratio at or above this crosses. Truncated actions are unparseable (-0.1), so
    half the interactions cut means the score is mostly format penalty. The Post-Training
    Toolkit's heuristic uses 0.3 but only after 30 steps; a healthy tool-call action is a
    few dozen tokens and is essentially never cut."""
    budget_frac: float | None = 0.9
    """Mean tokens per interaction at or above this fraction of
    ``response_length/budget`` crosses (seed: the mean ran to the budget itself)."""
    grace: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        for nm in ("clip_level", "budget_frac"):
            v = getattr(self, nm)
            if v is not None and not 0.0 < v <= 1.0:
                raise ValueError(f"rule {self.name!r}: {nm} must be in (0, 1], got {v}")

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

    def decide(self, history: History, control: History | None, step: int) -> Decision:
        n = streak(history, lambda r: self._crossing(r) is not None)
        if n < self.k:
            return self._go_on(step)
        ev = self._crossing(history[-1]) or {}
        return Decision("stop", self.name, step, {**ev, "k": self.k, "streak": n})


@register("constant_advantage")
@dataclass(frozen=True, kw_only=True)
class ConstantAdvantage(Rule):
    """Zero-advantage group fraction >= ``frac`` for ``k`` steps in a row (where a log has
    no such figure, a step whose score min equals its max counts as fraction 1)."""

    feeds = (
        frozenset({N.ZERO_ADV_FRAC}),
        frozenset({N.SCORE_MIN, N.SCORE_MAX}),
    )

    frac: float = 0.95
    """Issue 5's level: nearly every group's rewards are equal, so nothing is learned."""
    k: int = 3
    """Seed: from step 17 every trajectory scored exactly -0.1; 3 steps rule out a batch
    that is uniform by chance."""
    score_at_most: float | None = 0.0
    """Only cross where the mean score is at or below this (None: the fraction alone). A
    group whose answers are all correct has zero advantage too; a run that solved the task
    is not collapsing, and a dense control must never be stopped. Seed: the constant was
    -0.1. Where a step has no mean score, the fraction alone decides."""
    grace: int = 2

    def _frac(self, row: Row) -> float | None:
        f = value(row, N.ZERO_ADV_FRAC)
        if f is not None:
            return f
        lo, hi = value(row, N.SCORE_MIN), value(row, N.SCORE_MAX)
        if lo is None or hi is None:
            return None
        return 1.0 if lo == hi else 0.0

    def _crosses(self, row: Row) -> bool:
        f = self._frac(row)
        if f is None or f < self.frac:
            return False
        s = value(row, N.SCORE_MEAN)
        return self.score_at_most is None or s is None or s <= self.score_at_most

    def decide(self, history: History, control: History | None, step: int) -> Decision:
        n = streak(history, self._crosses)
        if n < self.k:
            return self._go_on(step)
        row = history[-1]
        ev: Evidence = {"zero_group_frac": self._frac(row) or 0.0, "frac": self.frac}
        if value(row, N.ZERO_ADV_FRAC) is None:
            ev["source"] = "score min == max"
        s = value(row, N.SCORE_MEAN)
        if s is not None:
            ev["score"] = s
        return Decision("stop", self.name, step, {**ev, "k": self.k, "streak": n})


@register("post_tool_tail_growth")
@dataclass(frozen=True, kw_only=True)
class PostToolTailGrowth(Rule):
    """Rolling post-tool p95 |log-ratio| has grown ``factor`` times over its early baseline
    and ``factor`` times more than the text slice's p95 has grown, for ``k`` steps."""

    feeds = (frozenset({N.tail("post_tool", "p95"), N.tail("text", "p95")}),)

    factor: float = 3.0
    """DESIGN.md: instability first shows as the post-tool p95 stretching while text-only
    tails stay flat. No growth curve is measured yet; 3x sits well above the step-to-step
    noise of a healthy run's p95 (the tests' noisy histories vary by +-20%)."""
    baseline_steps: int = 3
    """The first steps whose median p95 is the baseline (step 1 is before any update)."""
    window: int = 3
    """Rolling window: the median of the latest ``window`` p95 values, so a one-step
    spike does not move it."""
    min_tail: float = 0.01
    """Tails are floored at this |log-ratio| before taking ratios: below 1% the ratio is
    numerical noise (DESIGN.md: bf16 sampler vs fp32 trainer, mean gap 0.0008), and a
    dense fp32 sampler gives exactly 0."""
    k: int = 2
    """Consecutive steps the growth must hold."""
    grace: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.factor <= 1.0:
            raise ValueError(f"rule {self.name!r}: factor must be > 1, got {self.factor}")
        if self.baseline_steps < 1 or self.window < 1:
            raise ValueError(f"rule {self.name!r}: baseline_steps and window must be >= 1")
        if self.min_tail <= 0:
            raise ValueError(f"rule {self.name!r}: min_tail must be > 0, got {self.min_tail}")

    def _growth(self, history: History) -> Evidence | None:
        """Growth figures at the latest step of ``history``; None if not computable."""
        post_n, text_n = N.tail("post_tool", "p95"), N.tail("text", "p95")
        early = history[: self.baseline_steps]
        late = history[self.baseline_steps :][-self.window :]
        if len(late) < self.window:
            return None

        def med(rows: History, nm: str) -> float | None:
            vals = [v for r in rows if (v := value(r, nm)) is not None]
            return max(statistics.median(vals), self.min_tail) if vals else None

        bp, bt, rp, rt = (
            med(early, post_n),
            med(early, text_n),
            med(late, post_n),
            med(late, text_n),
        )
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

    def decide(self, history: History, control: History | None, step: int) -> Decision:
        n = 0  # consecutive crossing steps, counted up to k (each count is a window's work)
        for end in range(len(history), max(len(history) - self.k, 0), -1):
            if not self._crosses(self._growth(history[:end])):
                break
            n += 1
        if n < self.k:
            return self._go_on(step)
        g = self._growth(history) or {}
        ev: Evidence = {**g, "factor": self.factor, "window": self.window}
        return Decision("stop", self.name, step, {**ev, "k": self.k, "streak": n})


@register("ess_collapse")
@dataclass(frozen=True, kw_only=True)
class EssCollapse(Rule):
    """Post-tool effective sample size (a fraction in (0, 1]) that has *fallen* below
    ``floor`` for ``k`` steps in a row: its early median was at or above the floor. Where a
    log has no ``ess/post_tool``, verl's whole-batch
    ``rollout_corr/rollout_is_eff_sample_size`` is read instead."""

    feeds = (frozenset({N.ess("post_tool")}), frozenset({N.IS_ESS}))

    floor: float = 0.2
    """DESIGN.md: the ESS of the importance weights falls as the post-tool tail stretches;
    no collapse level is measured yet. Below 0.2 a fifth of the tokens carry the whole
    update; a dense run's ESS is 1.0 (identical weights)."""
    baseline_steps: int | None = 3
    """The rule only fires where the median ESS of the first ``baseline_steps`` steps was
    at or above ``floor`` (None: the floor alone). Measured (examples/logs, tiny model,
    2-bit codec, lr 1e-4): the post-tool ESS is 0.01-0.68 from step 1 on while the score
    holds steady, so a low ESS from the start is the codec's gap (gap_vs_control's
    warning), not a collapse; the floor alone stopped that healthy run at step 6."""
    k: int = 3
    grace: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.floor <= 1.0:
            raise ValueError(f"rule {self.name!r}: floor must be in (0, 1], got {self.floor}")
        if self.baseline_steps is not None and self.baseline_steps < 1:
            raise ValueError(f"rule {self.name!r}: baseline_steps must be >= 1 or null")

    def _ess(self, row: Row) -> tuple[float, str] | None:
        for nm in (N.ess("post_tool"), N.IS_ESS):
            v = value(row, nm)
            if v is not None:
                return v, nm
        return None

    def _crosses(self, row: Row) -> bool:
        e = self._ess(row)
        return e is not None and e[0] < self.floor

    def decide(self, history: History, control: History | None, step: int) -> Decision:
        n = streak(history, self._crosses)
        if n < self.k:
            return self._go_on(step)
        ev: Evidence = {}
        if self.baseline_steps is not None:
            early = [e[0] for r in history[: self.baseline_steps] if (e := self._ess(r))]
            # An ESS low from the start has not collapsed: the codec's gap, not a fall
            if not early or statistics.median(early) < self.floor:
                return self._go_on(step)
            ev["baseline"] = statistics.median(early)
        e = self._ess(history[-1])
        ess, src = e if e is not None else (0.0, "")
        ev.update({"ess": ess, "metric": src, "floor": self.floor})
        return Decision("stop", self.name, step, {**ev, "k": self.k, "streak": n})


@register("gap_vs_control")
@dataclass(frozen=True, kw_only=True)
class GapVsControl(Rule):
    """WARN (never stop) about the run's first step: its gap there is ``ratio`` times the
    control's first-step gap (and at least ``min_gap``). The gap is the mean
    |p_trainer - p_sampler| per token, or the mean |log-ratio| where a log lacks it.

    The decision's ``step`` is the run's first step whenever it is made: a control whose
    first step arrives after the treatment's still gets compared, and the store, the
    Stopper and replay (all keyed on run, step, rule) keep the warning once."""

    feeds = (frozenset({N.PROBS_DIFF_MEAN}), frozenset({N.ABS_LOG_RATIO_MEAN}))
    control_only = True

    ratio: float = 10.0
    """Seed: 0.61 compressed vs 0.006 dense at step 1, before any update (100x); 10x flags
    a codec an order of magnitude off while leaving room for sampler noise (bf16 vs fp32:
    0.0008)."""
    min_gap: float = 0.01
    """A gap below this is never flagged, however small the control's (an fp32 dense
    sampler's gap is exactly 0). The tiny model's 3-bit codec gives 0.0072."""

    def decide(self, history: History, control: History | None, step: int) -> Decision:
        # Nothing to compare with until the control has reported its first step
        if not control:
            return self._go_on(step)
        first = _step(history[0])
        for nm in (N.PROBS_DIFF_MEAN, N.ABS_LOG_RATIO_MEAN):
            t, c = value(history[0], nm), value(control[0], nm)
            if t is None or c is None:
                continue
            if t >= self.min_gap and t >= self.ratio * c:
                ev: Evidence = {
                    "gap": t,
                    "control_gap": c,
                    "metric": nm,
                    "times": t / c if c > 0 else "inf",
                    "ratio": self.ratio,
                    "control_step": _step(control[0]),
                }
                return Decision("warn", self.name, first, ev)
            return self._go_on(step)
        return self._go_on(step)


# --- rule sets -------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleSet:
    """The rules a sweep applies; the Stopper, ``gapwatch run`` and replay all use it."""

    rules: tuple[Rule, ...]

    def names(self) -> list[str]:
        return [r.name for r in self.rules]

    def evaluate(self, history: History, control: History | None = None) -> list[Decision]:
        """Every rule on the latest step of ``history``; the non-continue decisions, stops
        first (so ``decisions[0]`` is the one that ends the run where any stops)."""
        if not history:
            return []
        out = [d for r in self.rules if (d := r(history, control)).action != "continue"]
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
