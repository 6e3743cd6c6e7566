"""``gapwatch replay``: run the stop rules over a metrics log from elsewhere, step by step.

One :class:`orchestrator.rules.Watcher`, as the Tune Stopper uses, takes the log's steps
in order, and the control log's steps up to each one. The first ``stop`` is the verdict:
the step where a sweep would have ended the run. Replay keeps going past it so every
rule's firing is shown; each rule's decision is listed when its action changes (a rule
that stays tripped for 30 steps is listed once). Rules whose metrics the log lacks (or
that need a control log not given) are skipped and named. Time is linear in the number
of steps and the rules' memory constant.

Not here: reading the store (use ``gapwatch export`` to write a run as a log first).

Call :func:`replay` (pure, on histories) or :func:`replay_cli` (the command).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape as _escape
from rich.table import Table

from gapwatch.orchestrator import rules as R
from gapwatch.orchestrator.console import plain
from gapwatch.orchestrator.watch.logs import LogReport, NameMapper, ReadOptions, open_log

__all__ = ["ReplayResult", "replay", "replay_cli", "ruleset_for"]


@dataclass
class ReplayResult:
    """What the rules said over a whole log."""

    decisions: list[R.Decision]
    """Each rule's decision whenever its action changed to warn or stop, in step order."""
    stop: R.Decision | None
    """The first stop: the verdict (None: no rule would stop this run)."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Rule name -> why it could not run on this log."""
    caveats: dict[str, str] = field(default_factory=dict)
    """Rule name -> what it ran without (``RuleSet.caveats``: e.g. no score)."""

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` object."""
        return {
            "stopped": self.stop is not None,
            "rule": None if self.stop is None else self.stop.rule,
            "step": None if self.stop is None else self.stop.step,
            "decisions": [d.to_dict() for d in self.decisions],
            "skipped_rules": list(self.skipped),
            "caveats": dict(self.caveats),
        }


def lockstep(
    w: R.Watcher, history: Iterable[dict[str, Any]], control: Iterator[dict[str, Any]]
) -> Iterator[tuple[dict[str, Any], list[R.Decision]]]:
    """Feed the watcher ``w`` the run row by row, and before each row the control's rows up
    to its step, as a lock-stepped control would have sent them (both in step order); yield
    each row with its step's decisions. ``control`` is read only as far as the run reaches
    (one row past it at most)."""
    pending = next(control, None)
    for row in history:
        while pending is not None and int(pending["step"]) <= int(row["step"]):
            w.control(pending)
            pending = next(control, None)
        yield row, w.step(row)


def _noting(rows: Iterable[dict[str, Any]], names: set[str]) -> Iterator[dict[str, Any]]:
    """``rows``, adding each row's names to ``names`` as it is read."""
    for row in rows:
        names.update(row)
        yield row


def replay(
    history: Iterable[dict[str, Any]],
    control: Iterable[dict[str, Any]] | None,
    ruleset: R.RuleSet,
) -> ReplayResult:
    """Run ``ruleset`` over ``history`` step by step (both in step order, read once).

    A rule the log cannot feed (or, needing the control, the control log cannot) never
    decides anything; it is named in ``skipped``, with why.
    """
    w = ruleset.watch()
    order = {r.name: i for i, r in enumerate(ruleset.rules)}
    have: set[str] = set()
    have_ctl: set[str] = set()
    ctl = _noting(control or (), have_ctl)
    decisions: list[R.Decision] = []
    for row, ds in lockstep(w, history, ctl):
        have.update(row)
        decisions += sorted(ds, key=lambda d: order[d.rule])  # in rule order
    for _ in ctl:  # the names of the control's rows past the run's last step
        pass
    skipped = ruleset.unfed(have - {"step"}, None if control is None else have_ctl - {"step"})
    caveats = ruleset.caveats(have - {"step"})
    return ReplayResult(decisions=decisions, stop=w.first_stop, skipped=skipped, caveats=caveats)


def ruleset_for(rules: str | None, config: Path | None) -> R.RuleSet:
    """The RuleSet from ``--config`` (its ``rules:`` section) narrowed by ``--rules a,b``."""
    settings: dict[str, Any] = {}
    if config is not None:
        if not Path(config).is_file():
            raise ValueError(f"config file {config} does not exist")
        try:
            doc = yaml.safe_load(Path(config).read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise ValueError(f"{config} is not valid YAML: {' '.join(str(e).split())}") from None
        if doc is not None and not isinstance(doc, dict):
            raise ValueError(f"{config} must be a YAML mapping with a `rules:` section")
        section = (doc or {}).get("rules") or {}
        if not isinstance(section, dict):
            raise ValueError(f"{config}: `rules:` must map rule names to their parameters")
        settings = section
    if rules is None:
        return R.build(settings)
    wanted = [n.strip() for n in rules.split(",") if n.strip()]
    if not wanted:
        raise ValueError(f"--rules is empty; give rule names from: {', '.join(R.names())}")
    # --rules picks rules; an `enabled: false` in the config does not hide a picked one
    for n in wanted:
        R.get(n)  # unknown names fail listing the valid ones
    picked: dict[str, Any] = {}
    for n in wanted:
        given = settings.get(n)
        if isinstance(given, dict):
            picked[n] = {k: v for k, v in given.items() if k != "enabled"}
        elif given is None:
            picked[n] = {}
    return R.build({**settings, **picked}).select(wanted)


def escape(text: str) -> str:
    """Outside text on the console: control characters made visible, markup escaped."""
    return _escape(plain(text))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _evidence(ev: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_fmt(v)}" for k, v in ev.items())


def _print(
    res: ReplayResult,
    log: LogReport,
    control: LogReport | None,
    rs: R.RuleSet,
    mapped: str | None = None,
) -> None:
    con = Console(highlight=False, soft_wrap=True)
    con.print(
        f"replay of [bold]{escape(str(log.path))}[/] ({log.format}, {log.steps} steps, "
        f"{log.first_step}..{log.last_step})"
        + (
            ""
            if control is None
            else f" against control {escape(str(control.path))} ({control.steps} steps)"
        )
    )
    if mapped is not None:
        con.print(escape(mapped))
    for read in (log, control):
        if read is not None:
            for told in read.notes:
                con.print(f"{escape(str(read.path))}: read as {read.format}: {escape(told)}")
    for rep in (log, control):
        if rep is not None and (note := rep.skipped_text()) is not None:
            con.print(f"[yellow]{escape(str(rep.path))}[/]: {escape(note)}")
    applied = [n for n in rs.names() if n not in res.skipped]
    con.print(f"rules applied: {', '.join(applied) or 'none'}")
    for name, why in res.skipped.items():
        con.print(f"[yellow]skipped {name}[/]: {escape(why)}")
    for name, why in res.caveats.items():
        con.print(f"[yellow]{name}[/]: {escape(why)}")
    if log.ignored:
        con.print(f"ignored non-numeric fields: {escape(', '.join(sorted(log.ignored)))}")
    if res.decisions:
        after_stop = False
        table = Table(
            "step",
            "rule",
            "action",
            "evidence",
            caption=(
                "dim rows: after the verdict's step (what the rules would have said had the "
                "run gone on)"
                if res.stop is not None and res.decisions[-1].step > res.stop.step
                else None
            ),
        )
        table.columns[3].overflow = "fold"
        for d in res.decisions:
            after_stop = res.stop is not None and d.step > res.stop.step
            color = "red" if d.action == "stop" else "yellow"
            table.add_row(
                str(d.step),
                d.rule,
                f"[{color}]{d.action}[/]",
                escape(_evidence(d.evidence)),
                style="dim" if after_stop else None,
            )
        con.print(table)
    else:
        con.print("no rule warned or stopped at any step")
    if res.stop is None:
        con.print("[bold green]verdict: no rule would stop this run[/]")
    else:
        s = res.stop
        con.print(
            f"[bold red]verdict: would stop at step {s.step} by {s.rule}[/]: {escape(_evidence(s.evidence))}"
        )


def replay_cli(
    log: Path,
    *,
    control: Path | None,
    rules: str | None,
    config: Path | None,
    as_json: bool,
    fmt: str = "auto",
    names: str = "auto",
    options: ReadOptions | None = None,
) -> int:
    """``gapwatch replay``: print the decisions and the verdict; 0 whether or not a rule fired.

    Raises ValueError (one line, naming the file and line) for bad input.
    """
    rs = ruleset_for(rules, config)
    run = open_log(log, fmt, options)
    ctl = None if control is None else open_log(control, fmt, options)
    mapper, ctl_mapper = NameMapper(names), NameMapper(names)
    res = replay(
        (mapper(r) for r in run), None if ctl is None else (ctl_mapper(r) for r in ctl), rs
    )
    if as_json:
        print(json.dumps(res.to_json(), allow_nan=False))
    else:
        _print(res, run.report, None if ctl is None else ctl.report, rs, mapper.describe())
    return 0
