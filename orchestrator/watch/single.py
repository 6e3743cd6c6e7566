"""``gapwatch watch LOG``: follow a run that another program is training, and stop it.

The trainer (verl, TRL, anything that writes a metrics log) writes; this process follows
the log (``orchestrator.watch.follow``), adds gapwatch's names to foreign ones
(``correction.name_maps``), and puts each step into the store as a run (a
``TrackedRun``: it shows live in the UI, beside its control if one is given) while the
rules judge it step by step. On the first stop it stores the decision with its evidence,
then acts: ``--pid`` sends SIGTERM to the trainer's process group (SIGKILL after
``--grace`` seconds), ``--on-stop`` runs a command (``ray job stop ...``,
``scancel ...``). When the trainer finishes (``--pid`` gone, or, without ``--pid``, no
new line for ``--idle`` seconds) the run is marked completed. A ``--pid`` that is still
alive after ``--idle`` seconds without a new line is a hung trainer, not a finished one:
the run is marked failed with one line naming the last step seen, and with
``--end-hung`` its process group is ended (SIGTERM, SIGKILL after ``--grace``).

Exit status: 0 the run ended with no stop; 3 a rule stopped it (and the stop was carried
out, if one was asked for); 4 a rule stopped it but carrying the stop out failed; 5 the
trainer hung; 2 bad input (one ``error:`` line); 130 interrupted.

Call :func:`watch` with :class:`WatchOptions`.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gapwatch.orchestrator.console import plain
from gapwatch.orchestrator.errors import GapwatchError
from gapwatch.orchestrator.rules import Decision, RuleSet
from gapwatch.orchestrator.tracked import TrackedRun
from gapwatch.orchestrator.watch.follow import FOLLOW_FORMATS, LogFollower, Step
from gapwatch.orchestrator.watch.logs import LogError, NameMapper, ReadOptions
from gapwatch.orchestrator.watch.process import alive, end_process_group, hung_end, hung_line
from gapwatch.store import Store, identity

EXIT_DONE, EXIT_STOPPED, EXIT_STOP_FAILED, EXIT_HUNG = 0, 3, 4, 5
WATCH_SWEEP = "watch"
"""The sweep that holds followed runs unless ``--sweep`` names another."""


@dataclass
class WatchOptions:
    """Everything ``gapwatch watch`` takes (the CLI's flags, one docstring each)."""

    log: Path
    """The metrics log the trainer writes (it may not exist yet)."""
    control: str | None = None
    """The paired control: another log (followed too) or a stored run id."""
    sweep: str = WATCH_SWEEP
    """The store's sweep the run goes into."""
    name: str | None = None
    """The run's name in that sweep (its trial key); default: the log file's stem."""
    fmt: str = "auto"
    """``auto`` (told by name and content) or a reader's name (``orchestrator.readers``)."""
    names: str = "auto"
    """Whose metric names the log uses: ``auto``, a built-in map's source
    (``correction.name_maps.SOURCES``), or a YAML name map file
    ``{their_name: gapwatch_name}``."""
    read: ReadOptions = field(default_factory=ReadOptions)
    """What the log does not say: the step field or pattern, the logging interval."""
    ruleset: RuleSet | None = None
    """The rules (None: every rule with its defaults)."""
    from_start: bool = True
    """Read the log from its start (False: only what is written from now on)."""
    pid: int | None = None
    """The trainer's process: its group is ended on a stop; its end ends the run."""
    grace: float = 10.0
    """Seconds between SIGTERM and SIGKILL."""
    on_stop: str | None = None
    """A shell command run on a stop (env: GAPWATCH_RUN_ID, _STOP_RULE, _STOP_STEP)."""
    idle: float | None = 600.0
    """Seconds with no new line after which the trainer is taken to have finished, or,
    where ``pid`` is still alive, to have hung."""
    end_hung: bool = False
    """A hung trainer (``pid`` alive, log silent for ``idle`` s): end its process group."""
    wait: float = 120.0
    """Seconds to wait for the log to appear."""
    poll: float = 0.1
    """Seconds between reads of the log."""
    role: str = "treatment"
    """The run's role (``control`` or ``treatment``)."""
    seed: int = 0
    codec: str = "unknown"
    """A label for the trainer's compression (shown in the UI)."""
    correction: str = "unknown"
    """A label for its correction strategy."""
    say: Any = field(default=print)
    """Where progress lines go (each made ``plain``: no terminal control characters)."""


def _identity(opts: WatchOptions, name: str, pair: str | None) -> identity.RunIdentity:
    role = opts.role if opts.role in ("control", "treatment") else "treatment"
    return identity.RunIdentity(
        seed=opts.seed, task="watch", model=name, settings="external", codec=opts.codec,
        correction=opts.correction, role=role, pair=pair or f"watch/{name}",  # type: ignore[arg-type]
    )  # fmt: skip


class _Control:
    """The paired control: a log followed beside the run (and stored as its own run), or
    a stored run (through the run's ControlFeed)."""

    def __init__(self, opts: WatchOptions, st: Store, sweep_id: int, ruleset: RuleSet | None):
        self.follower: LogFollower | None = None
        self.run_id: int | None = None
        self.pair: str | None = None
        self.tracked: TrackedRun | None = None
        spec = opts.control
        if spec is None:
            return
        if spec.isdigit():
            row = st.run(int(spec))  # a StoreError names a run that is not there
            self.run_id, self.pair = int(row.id), row.pair_key
            return
        path = Path(spec)
        name = f"{path.stem}-control"
        self.pair = f"watch/{name}"
        self.follower = LogFollower(path, opts.fmt, from_start=True, options=opts.read)
        ident = identity.RunIdentity(
            seed=opts.seed, task="watch", model=name, settings="external", role="control",
            pair=self.pair,
        )  # fmt: skip
        config = {"source": "watch", "log": str(path), "format": opts.fmt}
        self.tracked = TrackedRun(st, sweep_id, name, ident, config, None)
        self.names = NameMapper(opts.names)

    def catch_up(self, run: TrackedRun, step: int) -> None:
        """Read the control log and hand the run's watcher its steps up to ``step``."""
        if self.follower is None or self.tracked is None or not self.follower.exists():
            return
        for s in self.follower.poll():
            self._take(run, s)

    def _take(self, run: TrackedRun, s: Step) -> None:
        assert self.tracked is not None
        row = self.names({"step": s.step, **s.metrics})
        metrics = {k: v for k, v in row.items() if k != "step"}
        if s.addition:
            self.tracked.add(s.step, metrics)
            return
        self.tracked.step(s.step, metrics)
        if run.watcher is not None:
            run.watcher.control(row)

    def finish(self, run: TrackedRun) -> None:
        if self.follower is not None and self.tracked is not None:
            if self.follower.exists():
                for s in self.follower.close():
                    self._take(run, s)
            self.tracked.finish()


def watch(opts: WatchOptions, db_url: str | None) -> int:
    """Follow ``opts.log`` into the store, judge it, act on a stop; the exit status."""
    from gapwatch.store import open_store

    if opts.fmt not in FOLLOW_FORMATS:
        raise GapwatchError(f"unknown log format {opts.fmt!r}; valid: {', '.join(FOLLOW_FORMATS)}")
    if opts.pid is not None and not alive(opts.pid):
        raise GapwatchError(
            f"--pid {opts.pid}: no such process (it has exited or never ran); give the "
            "trainer's pid, or leave --pid out"
        )
    follower = LogFollower(opts.log, opts.fmt, from_start=opts.from_start, options=opts.read)
    say = lambda text: opts.say(plain(text))  # noqa: E731
    t0 = time.monotonic()
    if not follower.exists():
        say(f"waiting for {opts.log} to appear (up to {opts.wait:g} s)")
    while not follower.exists():
        if time.monotonic() - t0 > opts.wait:
            raise GapwatchError(
                f"log {opts.log} did not appear within {opts.wait:g} s; check the path the "
                "trainer writes to, or wait longer with --wait"
            )
        if opts.pid is not None and not alive(opts.pid):
            raise GapwatchError(f"the trainer (pid {opts.pid}) ended before {opts.log} appeared")
        time.sleep(opts.poll)

    st = open_store(db_url)
    sweep_id = st.ensure_sweep(opts.sweep, "runs followed with `gapwatch watch LOG`")
    control = _Control(opts, st, sweep_id, opts.ruleset)
    name = opts.name or opts.log.stem
    config = {"source": "watch", "log": str(opts.log), "format": opts.fmt, "control": opts.control}
    run = TrackedRun(
        st, sweep_id, name, _identity(opts, name, control.pair), config, opts.ruleset,
        control_run=control.run_id,
    )  # fmt: skip
    say(f"following {opts.log} as run {run.run_id} ({name}) in {st.url_display}")
    names = NameMapper(opts.names)
    told = False
    last_line = time.monotonic()
    last: int | None = None
    try:
        while True:
            steps = follower.poll()
            if steps:
                last_line = time.monotonic()
            for s in steps:
                last = s.step
                stop = _take(run, control, names, s)
                if not told:
                    told = _tell_feeds(run, names, say, opts.control is not None)
                if stop is not None:
                    return _act(opts, st, run, control, stop)
            if follower.error is not None:
                raise follower.error
            if opts.pid is not None and not alive(opts.pid):
                say(f"the trainer (pid {opts.pid}) has ended")
                break
            if opts.idle is not None and time.monotonic() - last_line > opts.idle:
                if opts.pid is not None:
                    return _hung(opts, run, control, last)
                say(f"no new line for {opts.idle:g} s: taking the run as finished")
                break
            time.sleep(opts.poll)
        for s in follower.close():
            stop = _take(run, control, names, s)
            if stop is not None:
                return _act(opts, st, run, control, stop)
    except KeyboardInterrupt:
        say(f"interrupted: run {run.run_id} stays 'running' in the store")
        raise
    except LogError as exc:
        run.finish(error=f"log unreadable: {' '.join(str(exc).split())}")
        control.finish(run)
        raise
    if follower.half_line is not None:
        say(f"ignored a half-written last line: {follower.half_line!r}")
    if (note := follower.report.skipped_text()) is not None:
        say(note)
    for note in follower.report.notes:
        say(f"{follower.fmt}: {note}")
    control.finish(run)
    status = run.finish()
    say(f"run {run.run_id} {status}: {run.steps} steps, no rule stopped it")
    return EXIT_DONE


def _take(run: TrackedRun, control: _Control, names: NameMapper, s: Step) -> Decision | None:
    row = names({"step": s.step, **s.metrics})
    metrics = {k: v for k, v in row.items() if k != "step"}
    if s.addition:
        run.add(s.step, metrics)
        return None
    control.catch_up(run, s.step)
    return run.step(s.step, metrics)


TELL_AFTER = 5
"""Steps a log may start with before its unfed rules are said, while no rule is fed."""


def _tell_feeds(run: TrackedRun, names: NameMapper, say: Any, has_control: bool) -> bool:
    """Say, once, which names were mapped and which rules this log cannot feed (judged
    from the steps stored so far; a control is taken to log what the run logs). Where no
    rule is fed yet, it waits up to :data:`TELL_AFTER` steps: a trainer's first rows may
    hold no training figure (TRL's W&B runs log their timings at step 0). Returns whether
    it has told."""
    if run.watcher is None:
        return True
    rs = RuleSet(run.watcher.rules)
    have = set(run.store.metric_names(run.run_id))
    unfed = rs.unfed(have, have if has_control else None)
    if len(unfed) == len(rs.rules) and run.steps < TELL_AFTER:
        return False
    if (m := names.describe()) is not None:
        say(m)
    for rule, why in unfed.items():
        say(f"rule {rule} cannot decide on this log: {why}")
    for rule, why in rs.caveats(have).items():
        say(f"rule {rule}: {why}")
    return True


def _hung(opts: WatchOptions, run: TrackedRun, control: _Control, last: int | None) -> int:
    """``opts.pid`` is alive but its log has been silent for ``opts.idle`` s: the run
    fails with one line (and the trainer's group is ended if asked); EXIT_HUNG."""
    assert opts.pid is not None and opts.idle is not None
    outcome = end_process_group(opts.pid, opts.grace) if opts.end_hung else None
    line = hung_line(opts.idle, last) + hung_end(opts.pid, outcome)
    control.finish(run)
    run.finish(error=line)
    opts.say(plain(f"run {run.run_id} failed: {line}"))
    return EXIT_HUNG


def _act(opts: WatchOptions, st: Store, run: TrackedRun, control: _Control, stop: Decision) -> int:
    """Record the end, then carry the stop out; the exit status."""
    ev = ", ".join(f"{k}={v}" for k, v in stop.evidence.items())
    opts.say(plain(f"stop: {stop.rule} at step {stop.step} ({ev})"))
    control.finish(run)
    run.finish()
    code = EXIT_STOPPED
    if opts.pid is not None:
        opts.say(end_process_group(opts.pid, opts.grace))
    if opts.on_stop:
        env = {
            **os.environ,
            "GAPWATCH_RUN_ID": str(run.run_id),
            "GAPWATCH_STOP_RULE": stop.rule,
            "GAPWATCH_STOP_STEP": str(stop.step),
        }
        res = subprocess.run(opts.on_stop, shell=True, env=env, check=False)
        if res.returncode != 0:
            opts.say(f"--on-stop command exited with {res.returncode}")
            code = EXIT_STOP_FAILED
    return code
