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

Files: ``base.py`` (decisions, the registry, a rule's state and step contract, the
``ControlView`` and the ``Watcher``), ``library.py`` (the rules, with the evidence for
each default), ``sets.py`` (``RuleSet`` and ``build``).
``rule(history, control)`` and ``RuleSet.evaluate(history, control)`` answer about the
last step of a whole history (a convenience for tests and one-off questions; they replay
the history through a fresh watcher).
"""

from gapwatch.orchestrator.rules.base import (
    ACTIONS,
    ControlView,
    Decision,
    Rule,
    State,
    Watcher,
    alternatives,
    get,
    names,
    needs_control,
    register,
    required_metrics,
    step_of,
    value,
)
from gapwatch.orchestrator.rules.sets import RuleSet, build

__all__ = [
    "ACTIONS",
    "ControlView",
    "Decision",
    "Rule",
    "RuleSet",
    "State",
    "Watcher",
    "alternatives",
    "build",
    "get",
    "names",
    "needs_control",
    "register",
    "required_metrics",
    "step_of",
    "value",
]
