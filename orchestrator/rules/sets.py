"""Rule sets: the rules a sweep (or a run, or a replay) applies, built from YAML settings."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gapwatch.orchestrator.rules import library as _library  # noqa: F401  (registers the rules)
from gapwatch.orchestrator.rules import presets as _presets
from gapwatch.orchestrator.rules.base import Decision, History, Rule, Watcher, _cls, get, names


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

    def unfed(self, have: Iterable[str], have_control: Iterable[str] | None) -> dict[str, str]:
        """Rule name -> why it cannot decide on a run whose log holds the metric names
        ``have`` (and whose control's holds ``have_control``; None: no control)."""
        got, ctl = set(have), None if have_control is None else set(have_control)
        out: dict[str, str] = {}
        for rule in self.rules:
            lacks = " or ".join(" + ".join(sorted(alt)) for alt in rule.sources())
            if not rule.can_feed(got):
                out[rule.name] = f"log lacks {lacks}"
            elif rule.control_only and ctl is None:
                out[rule.name] = "needs the control's log (--control)"
            elif rule.control_only and not rule.can_feed(ctl or set()):
                out[rule.name] = f"control log lacks {lacks}"
        return out

    def caveats(self, have: Iterable[str]) -> dict[str, str]:
        """Rule name -> what it cannot tell on a log holding ``have``, for the rules that
        can decide there (:meth:`Rule.caveat`)."""
        got = set(have)
        out: dict[str, str] = {}
        for rule in self.rules:
            if rule.can_feed(got) and (why := rule.caveat(got)) is not None:
                out[rule.name] = why
        return out

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
    ``preset: NAME`` starts from a named preset's settings (``orchestrator.rules.presets``,
    e.g. ``ranking``), the rest of the section laid over it.
    Unknown rules, presets or parameters raise ValueError listing the valid ones.
    """
    settings = settings or {}
    if not isinstance(settings, Mapping):
        raise ValueError(
            f"rules settings must be a mapping of rule name to parameters, got {settings!r}"
        )
    settings = _presets.expand(settings)
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
