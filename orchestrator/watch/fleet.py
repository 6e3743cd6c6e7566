"""``gapwatch watch 'runs/*/metrics.jsonl'``: follow every run of a fleet from one process.

A team launches its runs however it likes (a SLURM array, Kubernetes jobs, a shell loop);
each writes its own log. This module finds them (a glob, a folder with ``--pattern``, a
``--layout`` or a ``--manifest``), re-finding at most every ``rescan`` s so logs that
appear later join; each log is one run with its own ``LogFollower`` and rule watcher
(through a ``TrackedRun``), polled in turn, controls first. Who a run is comes from
``orchestrator.watch.fleet_layout``: its fields, its role, its pair (treatments see the steps
of their seed's control, as ``--control`` gives them for one log). On a stop the run's
actions are carried out, templated with its fields and ``{path}``, ``{dir}``,
``{name}``, ``{run_id}``, ``{rule}``, ``{step}`` (a literal brace is written ``{{``):
``--pid-file`` (its process ended: the whole group where the trainer leads
its own, the process alone where it shares one with its siblings, as a shell loop's
``&`` does) and ``--on-stop``; each action's exit code and output go into the store as a
``stop_action/<kind>`` decision (``continue`` done, ``warn`` failed), a failure is retried
once and said in one line. A log that has not grown for ``idle`` s is finished, and so,
at once, is one whose trainer (``--pid-file``) has exited, once its log is read to the
end; a trainer that lives but has not written its first step yet (loading its model) is
waited for. A trainer that lives but whose log has been silent for ``idle`` s after a
step is hung, as ``watch --pid`` has it: its run fails with one line naming the last
step (``orchestrator.watch.process.hung_line``), and with ``--end-hung`` the trainer is ended as
a stop's ``--pid-file`` ends it (in the same pool). The fleet ends when every run has
finished and no new log has appeared for ``idle`` s.

Open files are bounded (``max_open``): the followers quiet the longest close their file
and keep their place; a parked log is only ``stat``-ed until it grows again.

Stop actions run in a small thread pool (their outcomes are stored from the loop), so a
slow one does not hold up the other logs. Left out: a run's control must be in the same
fleet (not a stored run id).

Call :func:`watch_fleet` with :class:`FleetOptions`. Exit status as ``watch``: 0 no
stop, 3 stops carried out, 4 a stop action failed, 5 a trainer hung (and no action
failed), 2 bad input.
"""

from __future__ import annotations

import glob as globlib
import os
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gapwatch.orchestrator.console import plain
from gapwatch.orchestrator.errors import GapwatchError
from gapwatch.orchestrator.rules import Decision, RuleSet
from gapwatch.orchestrator.tracked import ControlFeed, TrackedRun
from gapwatch.orchestrator.watch import fleet_layout as L
from gapwatch.orchestrator.watch.follow import FOLLOW_FORMATS, LogFollower, Step
from gapwatch.orchestrator.watch.logs import LogError, NameMapper, ReadOptions
from gapwatch.orchestrator.watch.process import alive, end_process_group, hung_end, hung_line
from gapwatch.orchestrator.watch.single import (
    EXIT_DONE,
    EXIT_HUNG,
    EXIT_STOP_FAILED,
    EXIT_STOPPED,
)
from gapwatch.store import Store

ACTION_RULE = "stop_action"
"""The decisions that record the stop actions' outcomes, ``stop_action/pid_file`` and
``stop_action/on_stop`` (evidence: kind, command, exit code, output, attempts)."""
OUTPUT_CHARS = 2000
"""How much of an action's output is stored (its end)."""
GLOB_CHARS = frozenset("*?[")
EXIT_CHECK_S = 1.0
"""Seconds between two reads of a quiet run's pid file (has its trainer exited?): a
finished run is seen within a second, and 200 quiet logs cost 200 small reads a second."""
STOP_FIELDS = ("rule", "step")
"""Template fields a stop adds to a run's own (``{rule}``, ``{step}``)."""


@dataclass
class FleetOptions:
    """What ``gapwatch watch`` takes for a fleet (the CLI's flags, one docstring each)."""

    source: str | None = None
    """A glob of logs, or a folder (with ``pattern`` or ``layout``); None with a manifest
    or a layout alone."""
    pattern: str | None = None
    """The logs under the folder ``source``: ``*/trainer_state.json``."""
    layout: str | None = None
    """``runs/{correction}-s{seed}/metrics.jsonl``: each log's fields read from its path."""
    manifest: Path | None = None
    """A YAML file mapping each log to its fields (``orchestrator.watch.fleet_layout``)."""
    control_when: str | None = None
    """``correction=none``: the fields that make a run its seed's control."""
    sweep: str = "fleet"
    """The store's sweep that holds the fleet's runs."""
    fmt: str = "auto"
    names: str = "auto"
    read: ReadOptions = field(default_factory=ReadOptions)
    ruleset: RuleSet | None = None
    from_start: bool = True
    on_stop: str | None = None
    """A shell command per stop, templated: ``scancel {job}``."""
    pid_file: str | None = None
    """A file holding the trainer's pid, templated: ``{dir}/train.pid``."""
    grace: float = 10.0
    """Seconds between SIGTERM and SIGKILL."""
    action_timeout: float = 120.0
    """Seconds an ``--on-stop`` command may take."""
    idle: float | None = 600.0
    """Seconds without growth after which a log's run is finished, or, where its trainer
    (``pid_file``) still lives, hung (failed)."""
    end_hung: bool = False
    """A hung trainer (alive, its log silent for ``idle`` s): end it as a stop would."""
    wait: float = 120.0
    """Seconds to wait for the first log to appear."""
    poll: float = 0.2
    """Seconds between rounds over the logs."""
    rescan: float = 5.0
    """Seconds between two searches for new logs."""
    max_open: int = 128
    """At most this many logs are held open."""
    say: Any = field(default=print)


class ParkedFollower(LogFollower):
    """A follower whose file can be closed between reads, keeping its place in it."""

    offset: int | None = None
    """Where reading stopped when the file was closed (None: not parked)."""

    @property
    def is_open(self) -> bool:
        return self._fh is not None

    def park(self) -> None:
        """Close the file; the next read that finds it grown reopens it at ``offset``."""
        if self._fh is not None:
            self.offset = self._fh.tell()
            self._fh.close()
            self._fh = None

    def _grown(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return st.st_ino != self._ino or st.st_size != self.offset

    def _open(self) -> bool:
        if self.offset is None:
            return super()._open()
        try:
            fh = self.path.open("rb")
        except OSError:
            return False
        st = os.fstat(fh.fileno())
        if st.st_ino == self._ino and st.st_size >= self.offset:
            fh.seek(self.offset)
        else:  # replaced or truncated while parked: the new content from its start
            self._partial = b""
        self._fh, self._ino, self.offset = fh, st.st_ino, None
        return True

    def poll(self) -> list[Step]:
        if self.offset is not None and not self._grown():
            return []
        return super().poll()


@dataclass
class ActionResult:
    """One stop action as carried out (stored as a ``stop_action`` decision)."""

    kind: str
    """``pid_file`` or ``on_stop``."""
    command: str
    """The rendered command, or the pid file read."""
    code: int
    output: str
    attempts: int

    def evidence(self) -> dict[str, Any]:
        return {"kind": self.kind, "command": self.command, "exit_code": self.code,
                "output": self.output[-OUTPUT_CHARS:], "attempts": self.attempts}  # fmt: skip


def _end_pid(pid: int, grace: float) -> str:
    """End the trainer ``pid``: its process group where it leads one (setsid, srun, a
    job's shell), else the process alone (siblings of a shell loop share a group)."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return f"process {pid} had already exited"
    return end_process_group(pid, grace, pgid=pgid, alone=pgid != pid)


def _pid_action(path_text: str, grace: float) -> tuple[int, str]:
    try:
        text = Path(path_text).read_text().strip()
    except OSError as exc:
        return 1, f"cannot read pid file {path_text}: {exc.strerror}"
    if not text.isdigit():
        return 1, f"pid file {path_text} holds {text[:40]!r}, not a pid"
    return 0, _end_pid(int(text), grace)


def _command_action(cmd: str, env: dict[str, str], timeout: float) -> tuple[int, str]:
    try:
        res = subprocess.run(cmd, shell=True, env=env, capture_output=True, text=True,
                             timeout=timeout, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:g} s"
    return res.returncode, (res.stdout + res.stderr).strip()


class FleetRun:
    """One log of the fleet: its follower, its stored run, its fields."""

    def __init__(
        self, path: Path, name: str, fields: dict[str, Any], control: bool,
        follower: ParkedFollower, tracked: TrackedRun,
    ) -> None:  # fmt: skip
        self.path, self.name, self.fields, self.is_control = path, name, fields, control
        self.follower, self.tracked = follower, tracked
        self.names: NameMapper | None = None
        self.last_growth = time.monotonic()
        self.done = False
        self.checked_at = 0.0
        """When its trainer's pid file was last read (``Fleet.trainer_alive``)."""
        self.alive: bool | None = None
        """Whether its trainer lives, as last read (None: no pid file to read)."""
        self.pid: int | None = None
        """Its trainer's pid, as last read from its pid file."""
        self.pid_text = ""
        self.last_step: int | None = None
        """The newest step read from its log."""
        self.pair = tracked.ident.pair_key

    def template_fields(self) -> dict[str, Any]:
        return {**self.fields, "path": str(self.path), "dir": str(self.path.parent),
                "name": self.name, "run_id": self.tracked.run_id}  # fmt: skip


class Fleet:
    """The fleet's state and its polling loop (see the module docstring)."""

    def __init__(self, opts: FleetOptions, st: Store) -> None:
        self.opts, self.st = opts, st
        self.say = lambda text: opts.say(plain(text))
        self.when = L.parse_control_when(opts.control_when)
        self.layout = L.Layout(opts.layout) if opts.layout else None
        self.manifest = L.load_manifest(opts.manifest) if opts.manifest else None
        self.glob, self.root = self._where()
        self.sweep_id = st.ensure_sweep(
            opts.sweep, "runs followed with `gapwatch watch` as a fleet"
        )
        self.runs: dict[Path, FleetRun] = {}
        self.controls: dict[str, FleetRun] = {}
        self.skipped: set[Path] = set()
        self.told = False
        self.failed_actions = 0
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="stop-action")
        """Stop actions run here, so a slow one (a trainer that ignores SIGTERM for
        ``grace`` s, a hanging ``scancel``) does not hold up the other runs' logs."""
        self.pending: list[tuple[Future[Any], Callable[[Any], None]]] = []
        """Actions under way in ``pool``, each with what records its outcome."""
        self.stops = 0
        self.hung = 0

    # --- finding the logs -------------------------------------------------------------

    def _where(self) -> tuple[str | None, Path]:
        """The glob that finds the logs and the folder their names are relative to."""
        o = self.opts
        if self.manifest is not None:
            return None, o.manifest.parent if o.manifest else Path(".")
        if o.source is not None and not GLOB_CHARS & set(o.source):
            if not Path(o.source).is_dir():
                raise GapwatchError(
                    f"{o.source} is not a folder; give a glob ('runs/*/metrics.jsonl') or a "
                    "folder with --pattern"
                )
            if o.pattern is None and self.layout is None:
                raise GapwatchError(
                    f"{o.source} is a folder: say which files in it are logs with --pattern "
                    "('*/metrics.jsonl') or --layout"
                )
            pattern = o.pattern or "**/*"
            return str(Path(o.source) / pattern), Path(o.source)
        if o.source is None and self.layout is None:
            raise GapwatchError(
                "give the logs: a glob, a folder with --pattern, --layout or --manifest"
            )
        text = o.source if o.source is not None else self.layout.glob  # type: ignore[union-attr]
        fixed = [p for p in Path(text).parts if not GLOB_CHARS & set(p) and "{" not in p]
        root = Path(*Path(text).parts[: len(fixed)]) if fixed else Path(".")
        while GLOB_CHARS & set(str(root)):  # pragma: no cover - parts are checked above
            root = root.parent
        return text, root if root.is_dir() else root.parent

    def discover(self) -> None:
        """Add the logs that exist now and are not followed yet."""
        if self.manifest is not None:
            found = [(p, dict(f)) for p, f in self.manifest.items() if p.exists()]
        else:
            assert self.glob is not None
            found = []
            for text in sorted(globlib.glob(self.glob, recursive=True)):
                p = Path(text)
                if p in self.runs or p in self.skipped or not (p.is_file() or p.is_dir()):
                    continue
                if self.layout is not None:
                    fields = self.layout.match(p)
                    if fields is None:
                        self.skipped.add(p)
                        self.say(f"skipped {p}: it does not fit --layout {self.layout.template}")
                        continue
                    found.append((p, dict[str, Any](fields)))
                else:
                    found.append((p, {}))
        for p, fields in found:
            if p not in self.runs and p not in self.skipped:
                self._add(p, fields)

    def _name(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return path.as_posix()

    def _add(self, path: Path, fields: dict[str, Any]) -> None:
        o = self.opts
        name = self._name(path)
        try:
            control = L.is_control(fields, self.when)
            ident = L.identity_of(o.sweep, fields, control, str(path))
            follower = ParkedFollower(path, o.fmt, from_start=o.from_start, options=o.read)
        except (L.LayoutError, LogError) as exc:
            self.skipped.add(path)
            self.say(f"skipped {path}: {exc}")
            return
        config = {"source": "watch", "log": str(path), "format": o.fmt, "fields": fields}
        tracked = TrackedRun(self.st, self.sweep_id, name, ident, config, o.ruleset)
        run = FleetRun(path, name, fields, control, follower, tracked)
        run.names = NameMapper(o.names)
        self.runs[path] = run
        for template in (o.on_stop, o.pid_file):
            if template is not None:
                known = {*run.template_fields(), *STOP_FIELDS}
                lacks = [f for f in L.template_fields(template) if f not in known]
                if lacks:
                    self.say(f"{name}: {template!r} names {', '.join(lacks)}, which it lacks; "
                             "its stop action will fail")  # fmt: skip
        role = "control" if control else "treatment"
        self.say(f"following {path} as run {tracked.run_id} ({name}, {role}, pair {run.pair})")
        if control:
            if run.pair in self.controls:
                self.say(f"{name}: a second control for pair {run.pair}; its treatments keep "
                         f"{self.controls[run.pair].name}")  # fmt: skip
                return
            self.controls[run.pair] = run
            for other in self.runs.values():
                if not other.is_control and other.pair == run.pair:
                    self._pair(other, run)
        elif (ctl := self.controls.get(run.pair)) is not None:
            self._pair(run, ctl)

    def _pair(self, treatment: FleetRun, control: FleetRun) -> None:
        """The treatment's rules see the control's steps: those stored, then live ones."""
        cid, st = control.tracked.run_id, self.st
        feed = ControlFeed(lambda a, u, n: st.history(cid, after=a, until=u, names=n))
        feed.live = True
        treatment.tracked.control = feed

    # --- following --------------------------------------------------------------------

    def poll_run(self, run: FleetRun, now: float) -> None:
        """Read what the run's log has grown by; judge, store, act; finish it when idle."""
        try:
            steps = run.follower.poll()
        except LogError as exc:
            run.follower.error = exc
            steps = []
        if steps:
            run.last_growth = now
        for s in steps:
            if self._take(run, s):
                return
        if run.follower.error is not None:
            msg = " ".join(str(run.follower.error).split())
            self.say(f"{run.name}: log unreadable, run failed: {msg}")
            run.tracked.finish(error=f"log unreadable: {msg}")
            run.follower.close()
            run.done = True
            return
        alive = run.alive if steps else self.trainer_alive(run, now)
        exited = not steps and alive is False
        idle = self.opts.idle is not None and now - run.last_growth > self.opts.idle
        if idle and alive and not run.tracked.steps:
            idle = False  # its trainer lives and has not written a step yet: still loading
        if idle or exited:
            for s in run.follower.close():
                if self._take(run, s):
                    return
            if idle and alive:
                self._hung(run)
                return
            status = run.tracked.finish()
            run.done = True
            why = f"its trainer ({run.pid_text}) has exited" if exited else (
                f"no growth for {self.opts.idle:g} s")  # fmt: skip
            self.say(f"{run.name}: {why}; run {run.tracked.run_id} {status} "
                     f"after {run.tracked.steps} steps")  # fmt: skip

    def trainer_alive(self, run: FleetRun, now: float) -> bool | None:
        """Whether the run's trainer, named by ``--pid-file``, lives: an exited one's log
        is finished at once (not after ``idle``), a live one that has written no step yet
        is not finished by ``idle``. None where there is no pid file to read (yet). The
        file is read at most every ``EXIT_CHECK_S``; between reads the last answer holds."""
        if self.opts.pid_file is None or now - run.checked_at < EXIT_CHECK_S:
            return run.alive
        run.checked_at = now
        try:
            path = L.render(self.opts.pid_file, run.template_fields())
            text = Path(path).read_text().strip()
        except (L.LayoutError, OSError):  # a template naming {rule}, a file not written yet
            run.alive = None
            return None
        run.pid = int(text) if text.isdigit() else None
        run.alive = None if run.pid is None else alive(run.pid)
        run.pid_text = f"pid {text}, {path}"
        return run.alive

    def _hung(self, run: FleetRun) -> None:
        """Its trainer lives, its log silent for ``idle`` s: the run fails as hung, said in
        one line; with ``end_hung`` the trainer is ended first (in the pool)."""
        assert self.opts.idle is not None and run.pid is not None
        run.done = True
        self.hung += 1
        line, pid = hung_line(self.opts.idle, run.last_step), run.pid

        def record(outcome: str | None) -> None:
            said = line + hung_end(pid, outcome)
            run.tracked.finish(error=said)
            self.say(f"{run.name}: run {run.tracked.run_id} failed: {said}")

        if self.opts.end_hung:
            self.pending.append((self.pool.submit(_end_pid, pid, self.opts.grace), record))
        else:
            record(None)

    def _take(self, run: FleetRun, s: Step) -> bool:
        """One step into the store and the rules; True where it stopped the run."""
        assert run.names is not None
        row = run.names({"step": s.step, **s.metrics})
        metrics = {k: v for k, v in row.items() if k != "step"}
        if s.addition:
            run.tracked.add(s.step, metrics)
            return False
        run.last_step = s.step
        stop = run.tracked.step(s.step, metrics)
        if run.is_control and self.controls.get(run.pair) is run:
            for other in self.runs.values():
                feed = other.tracked.control
                if other.pair == run.pair and feed is not None and other.tracked.watcher:
                    feed.give(other.tracked.watcher, row)
        if not self.told and run.tracked.watcher is not None:
            from gapwatch.orchestrator.watch.single import _tell_feeds

            self.told = _tell_feeds(run.tracked, run.names, self.say, run.pair in self.controls)
        if stop is None:
            return False
        self._stop(run, stop)
        return True

    def _stop(self, run: FleetRun, stop: Decision) -> None:
        ev = ", ".join(f"{k}={v}" for k, v in stop.evidence.items())
        self.say(f"{run.name}: stop: {stop.rule} at step {stop.step} ({ev})")
        run.follower.close()
        run.tracked.finish()
        run.done = True
        self.stops += 1
        fields = {**run.template_fields(), "rule": stop.rule, "step": stop.step}
        fut = self.pool.submit(self.carry_out, run, fields, stop)
        self.pending.append((fut, lambda results: self._record(run, stop, results)))

    def collect(self, wait: bool = False) -> None:
        """Store and say the outcome of each action that has finished (all, ``wait``)."""
        left = []
        for fut, record in self.pending:
            if wait or fut.done():
                record(fut.result())
            else:
                left.append((fut, record))
        self.pending = left

    def _record(self, run: FleetRun, stop: Decision, results: list[ActionResult]) -> None:
        for result in results:
            action = "continue" if result.code == 0 else "warn"
            rule = f"{ACTION_RULE}/{result.kind}"
            self.st.write_decision(run.tracked.run_id, stop.step, rule, action, result.evidence())
            tail = " ".join(result.output.split())[-200:]
            if result.code == 0:
                self.say(f"{run.name}: {result.kind} {result.command}: {tail or 'done'}")
            else:
                self.failed_actions += 1
                tries = "twice" if result.attempts == 2 else "(not retried: a template error)"
                self.say(f"{run.name}: {result.kind} {result.command} failed {tries} "
                         f"(exit {result.code}): {tail}")  # fmt: skip

    def carry_out(
        self, run: FleetRun, fields: dict[str, Any], stop: Decision
    ) -> list[ActionResult]:
        """The run's stop actions, each retried once on failure."""
        o = self.opts
        env = {**os.environ, "GAPWATCH_RUN_ID": str(run.tracked.run_id),
               "GAPWATCH_STOP_RULE": stop.rule, "GAPWATCH_STOP_STEP": str(stop.step),
               "GAPWATCH_LOG": str(run.path)}  # fmt: skip
        out: list[ActionResult] = []
        for kind, template in (("pid_file", o.pid_file), ("on_stop", o.on_stop)):
            if template is None:
                continue
            try:
                text = L.render(template, fields)
            except L.LayoutError as exc:
                out.append(ActionResult(kind, template, 2, str(exc), 1))
                continue
            for attempt in (1, 2):
                if kind == "pid_file":
                    code, output = _pid_action(text, o.grace)
                else:
                    code, output = _command_action(text, env, o.action_timeout)
                if code == 0 or attempt == 2:
                    break
                time.sleep(1.0)
            out.append(ActionResult(kind, text, code, output, attempt))
        return out

    def bound_open_files(self) -> None:
        """Park the followers quiet the longest until at most ``max_open`` are open."""
        live = [r for r in self.runs.values() if not r.done and r.follower.is_open]
        extra = len(live) - self.opts.max_open
        if extra > 0:
            for r in sorted(live, key=lambda r: r.last_growth)[:extra]:
                r.follower.park()


def watch_fleet(opts: FleetOptions, db_url: str | None) -> int:
    """Follow every log of the fleet into the store, judge each, act on stops; the exit
    status."""
    from gapwatch.store import open_store

    if opts.fmt not in FOLLOW_FORMATS:
        raise GapwatchError(f"unknown log format {opts.fmt!r}; valid: {', '.join(FOLLOW_FORMATS)}")
    if opts.max_open < 1:
        raise GapwatchError(f"--max-open {opts.max_open}: give at least 1")
    try:
        st = open_store(db_url)
        fleet = Fleet(opts, st)
    except L.LayoutError as exc:
        raise GapwatchError(str(exc)) from None
    say = fleet.say
    where = fleet.glob or str(opts.manifest)
    say(f"watching {where} as sweep {opts.sweep!r} in {st.url_display}")
    t0 = last_new = time.monotonic()
    next_scan = 0.0
    try:
        while True:
            now = time.monotonic()
            if now >= next_scan:
                before = len(fleet.runs)
                fleet.discover()
                next_scan = now + opts.rescan
                if len(fleet.runs) > before:
                    last_new = now
            if not fleet.runs and now - t0 > opts.wait:
                raise GapwatchError(
                    f"no log matched {where} within {opts.wait:g} s; check the glob or "
                    "layout, or wait longer with --wait"
                )
            active = [r for r in fleet.runs.values() if not r.done]
            for run in sorted(active, key=lambda r: not r.is_control):
                fleet.poll_run(run, time.monotonic())
            fleet.bound_open_files()
            fleet.collect()
            if fleet.runs and not fleet.pending and all(r.done for r in fleet.runs.values()):
                quiet = time.monotonic() - last_new
                if opts.idle is None or quiet > opts.idle:
                    break
            time.sleep(opts.poll)
    except KeyboardInterrupt:
        say("interrupted: unfinished runs stay 'running' in the store")
        fleet.pool.shutdown(wait=False, cancel_futures=True)
        raise
    fleet.collect(wait=True)
    fleet.pool.shutdown()
    statuses = [st.run(r.tracked.run_id).status for r in fleet.runs.values()]
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in sorted(set(statuses)))
    say(f"fleet done: {len(statuses)} runs ({counts})")
    if fleet.failed_actions:
        return EXIT_STOP_FAILED
    if fleet.hung:
        return EXIT_HUNG
    return EXIT_STOPPED if fleet.stops else EXIT_DONE
