"""The rules' contract: decisions, the registry, a rule's state and its step, the watcher.

Everything a rule is built from and followed with; the rules themselves are in
``orchestrator.rules.library``, rule sets in ``orchestrator.rules.sets``. See the package
docstring (``orchestrator.rules``) for the conventions every rule follows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, TypeVar

from pydantic import ConfigDict, Field, ValidationError
from pydantic.dataclasses import dataclass as checked

from gapwatch.workers.validation import Int, check_name, describe, unknown_keys

Action = Literal["continue", "warn", "stop"]
ACTIONS: Final[tuple[Action, ...]] = ("continue", "warn", "stop")
OnFire = Literal["stop", "warn"]
"""What a rule does when it fires (its ``action`` setting)."""
Row = Mapping[str, Any]
History = Sequence[Row]
Evidence = dict[str, float | int | str]
CHECKED = ConfigDict(extra="forbid")
"""The pydantic config of every rule dataclass: unknown parameters refused."""


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
    """The numbers that crossed, the thresholds and the window (strict JSON: a figure that
    overflowed to infinity is kept as the string ``"inf"``)."""

    def __post_init__(self) -> None:
        if self.evidence and any(
            isinstance(v, float) and not math.isfinite(v) for v in self.evidence.values()
        ):
            fixed = {k: _finite_or_text(v) for k, v in self.evidence.items()}
            object.__setattr__(self, "evidence", fixed)

    def to_dict(self) -> dict[str, Any]:
        """``{"step", "rule", "action", "evidence"}``, as replay's JSON and the store want."""
        return {
            "step": self.step,
            "rule": self.rule,
            "action": self.action,
            "evidence": dict(self.evidence),
        }


def _finite_or_text(v: float | int | str) -> float | int | str:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    return v


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
    """The metric sets that can feed rule ``name`` with its default settings: any one set,
    fully present, suffices (a configured rule's own: :meth:`Rule.sources`)."""
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
    """A rule's memory of one run: the rows it has read so far (rules extend it)."""

    seen: int = 0
    """Rows the rule has read (rows without its figures are not read)."""
    first_step: int | None = None
    """The trainer step of the first row it read."""
    prev: int | None = None
    """The trainer step of the row it read before the one being judged."""


# --- the rule base ---------------------------------------------------------------------


@checked(frozen=True, kw_only=True, config=CHECKED)
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
    """Trainer steps at the start of training during which the rule only continues: it
    decides at steps after ``grace`` (steps are the trainer's own numbers, whatever the
    logging interval; a log logged every 5th step has no row inside a grace of 2)."""
    action: OnFire = "stop"
    """What the rule does when it fires: ``stop`` the run, or only ``warn`` (recorded and
    shown like a stop, the run goes on; the ``warn`` rules preset)."""

    def sources(self) -> tuple[frozenset[str], ...]:
        """The metric sets that can feed this rule as configured: ``feeds``, unless a
        setting picks other figures (e.g. a ``ratio:`` family)."""
        return self.feeds

    def caveat(self, have: Iterable[str]) -> str | None:
        """What this rule cannot tell on a log holding the metric names ``have``, though
        it can decide there (e.g. a sign rule without a score to check learning by);
        None: nothing (override)."""
        return None

    def reads(self, row: Row) -> bool:
        """Whether ``row`` holds a figure this rule reads (any name of its ``sources()``,
        NaN and strings included). A row without one is passed over: the rule neither
        counts it nor ends a streak with it, so a figure logged at every other row (or only
        at some steps) is judged over the steps it was logged at."""
        feeds = self.sources()
        return not feeds or any(n in row for alt in feeds for n in alt)

    def can_feed(self, available: Iterable[str]) -> bool:
        """Whether a log holding the metric names ``available`` can feed this rule."""
        have = set(available)
        return any(alt <= have for alt in self.sources())

    def params(self) -> dict[str, Any]:
        """The rule's thresholds as a plain dict (for display and the store)."""
        return dataclasses.asdict(self)

    def start(self) -> State:
        """A fresh state for one run (override with the rule's own :class:`State`)."""
        return State()

    def observe(self, state: Any, row: Row, control: ControlView, step: int) -> Decision:
        """Take the run's next step, ``row`` at ``step`` (its state updated in place); the
        decision about it."""
        # A row without the rule's figures is not one of its steps
        if not self.reads(row):
            return self._go_on(step)
        state.seen += 1
        if state.first_step is None:
            state.first_step = step
        self.update(state, row, control, step)
        state.prev = step
        # If still in grace period, do not decide yet
        if step <= self.grace:
            return self._go_on(step)
        d = self.decide(state, row, control, step)
        if d.action == "stop" and self.action == "warn":
            return dataclasses.replace(d, action="warn")
        return d

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
    """How long (in trainer steps, up to the latest row) the rule's line has been crossed."""

    n: int = 0
    """Trainer steps the current crossing has lasted (0: the latest row does not cross)."""
    since: int | None = None
    """The step the current crossing is taken to have begun at."""


def extend(state: Streak, crossing: bool, step: int) -> int:
    """``state.n`` after a row at ``step`` that crosses (or not); call before ``state.prev``
    moves on. A crossing is taken to have begun right after the last row that did not
    cross (``prev + 1``; step 1 for the first row): the earliest it can have begun. So a
    streak of ``k`` means ``k`` trainer steps, and a run logged every ``m``-th step
    reaches it within ``m`` steps of the same run logged every step."""
    if not crossing:
        state.since = None
        state.n = 0
        return 0
    if state.since is None:
        state.since = state.prev + 1 if state.prev is not None else min(step, 1)
    state.n = step - state.since + 1
    return state.n


class StreakRule(Rule):
    """A rule that stops once its line has been crossed for ``k`` trainer steps in a row
    (``k`` is the subclass's field)."""

    k: ClassVar[int]  # each subclass declares it as a field

    def start(self) -> Streak:
        return Streak()

    def crosses(self, row: Row, control: ControlView, step: int) -> bool:
        """Whether this step crosses the rule's line (override)."""
        raise NotImplementedError

    def update(self, state: Any, row: Row, control: ControlView, step: int) -> None:
        extend(state, self.crosses(row, control, step), step)

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
