"""The pieces a sweep hands to Ray Tune: the trainable, the Monitor, the Recorder, the table.

- ``trainable(config)``: one trial. Builds ``workers.RunConfig`` from the trial spec,
  iterates ``workers.train`` and calls ``tune.report`` once per step (metrics nested
  under one key, distributions JSON-encoded under another so Tune flattens neither).
- ``SweepState``: the per-trial status board the three driver-side parts share
  (status, step, latest score and gap, stop rule/step, error). Plain data: picklable.
- ``Monitor`` (a ``tune.Stopper``, runs on the driver): keeps each trial's history,
  finds its paired control's history (in this driver's results, else the store),
  applies the ``RuleSet`` and returns True for a trial a ``stop`` decision names.
  Every warn/stop decision goes to the Recorder.
- ``Recorder`` (a ``tune.Callback``): the store's one writer. Creates run rows, buffers
  steps and writes them in batches (callbacks block every trial: it flushes every few
  results or every second, and at trial end), writes decisions, sets run status.
- ``ProgressTable`` (a ``tune.Callback``): a rich Live table instead of Ray's logs on a
  terminal; on a pipe or file (CI, ``nohup``, ``| tee``), where a Live table would show
  nothing until the end, one plain line per trial start and end plus a periodic count.

Not here: config parsing and expansion (``orchestrator.config``), Ray start-up and the
final summary (``orchestrator.sweep``), the rules themselves (``orchestrator.rules``).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ray import tune
from ray.tune import Callback, Stopper

from correction import names
from orchestrator.console import console

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    from store import Store

TRIAL_KEY = "gw_trial"
"""Result key: the trial's stable ``trial_key`` (the store's run ``trial_id``)."""
STEP_KEY = "gw_step"
"""Result key: the GRPO step (from 1) this result reports."""
METRICS_KEY = "gw_metrics"
"""Result key: the step's ``{metric name: value}`` dict."""
DISTS_KEY = "gw_dists"
"""Result key: the step's distributions, JSON-encoded (one string, so Tune keeps it whole)."""
FAULT_ENV = "GAPWATCH_FAULT_INJECT"
"""Fault injection for tests: ``<trial_key>@<step>`` makes that trial raise after that step."""

FINISHED = ("completed", "stopped")
"""Run statuses a resume does not re-run."""


# --- the trainable ---------------------------------------------------------------------


def _check_fault(trial_key: str, step: int) -> None:
    spec = os.environ.get(FAULT_ENV, "")
    for item in filter(None, spec.split(",")):
        key, _, at = item.partition("@")
        if key == trial_key and at.isdigit() and int(at) == step:
            raise RuntimeError(f"injected fault in trial {trial_key} after step {step}")


def trainable(config: dict[str, Any]) -> None:
    """One Tune trial: ``workers.train`` over the spec's RunConfig, one report per step."""
    from workers import RunConfig, train

    spec = config["spec"]
    cfg = RunConfig.from_dict(dict(spec["run"]))
    for res in train(cfg):
        tune.report(
            {
                TRIAL_KEY: spec["trial_key"],
                STEP_KEY: int(res.step),
                METRICS_KEY: {k: float(v) for k, v in res.metrics.items()},
                DISTS_KEY: json.dumps(res.distributions),
            }
        )
        _check_fault(spec["trial_key"], int(res.step))


# --- shared state ----------------------------------------------------------------------


@dataclass
class TrialRow:
    """One trial's line on the status board."""

    spec: dict[str, Any]
    status: str = "pending"
    """pending | running | completed | stopped | failed."""
    step: int = 0
    steps_used: int = 0
    """Steps this trial used: reported to this driver, or stored by an earlier run."""
    score: float | None = None
    gap: float | None = None
    stop_rule: str | None = None
    stop_step: int | None = None
    error: str | None = None
    earlier: bool = False
    """Finished in an earlier run of the sweep (not re-run on resume)."""


@dataclass
class SweepState:
    """What Monitor, Recorder and ProgressTable share about every trial, by trial key."""

    rows: dict[str, TrialRow] = field(default_factory=dict)

    @classmethod
    def of(cls, specs: list[dict[str, Any]]) -> SweepState:
        return cls(rows={s["trial_key"]: TrialRow(spec=s) for s in specs})


def _key_of(trial: Any) -> str:
    return str(trial.config["spec"]["trial_key"])


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


# --- Monitor ---------------------------------------------------------------------------


class Monitor(Stopper):
    """Apply the stop rules to every result; True stops that trial.

    History per trial is kept here (the driver sees every result). A treatment's control
    history comes from this driver's results when the control ran here, else from the
    store (the control finished in an earlier run of the sweep, or runs elsewhere).
    """

    def __init__(
        self,
        rule_settings: dict[str, Any],
        state: SweepState,
        recorder: Recorder | None = None,
        *,
        stopping: bool = True,
        control_refresh_s: float = 2.0,
    ) -> None:
        self.rule_settings = dict(rule_settings)
        self.state = state
        self.recorder = recorder
        self.stopping = stopping
        self.control_refresh_s = control_refresh_s
        self.history: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
        self._sent: set[tuple[str, int, str]] = set()
        self._stored_control: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._ruleset: Any = None

    def __getstate__(self) -> dict[str, Any]:
        d = self.__dict__.copy()
        d["_ruleset"] = None  # rebuilt from rule_settings on first use
        return d

    @property
    def ruleset(self) -> Any:
        if self._ruleset is None:
            from orchestrator import rules

            self._ruleset = rules.build(self.rule_settings)
        return self._ruleset

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        key = result.get(TRIAL_KEY)
        # A result without our keys (Tune's own bookkeeping) decides nothing
        if key is None or STEP_KEY not in result:
            return False
        step = int(result[STEP_KEY])
        hist = self.history[key]
        # A trial restarted from scratch re-sends early steps: its history starts over
        # Tune hands a finished trial's last result over once more: nothing new
        if hist and hist[-1]["step"] == step:
            return False
        if hist and hist[-1]["step"] > step:
            del hist[:]
            self._sent = {m for m in self._sent if m[0] != key}
        hist.append({"step": step, **result.get(METRICS_KEY, {})})
        if not self.stopping:
            return False
        row = self.state.rows.get(key)
        control_key = row.spec.get("control_key") if row is not None else None
        control = self._control_history(control_key, step) if control_key else None
        return self._decide(key, hist, control)

    def _decide(
        self, key: str, hist: list[dict[str, Any]], control: list[dict[str, Any]] | None
    ) -> bool:
        stop = None
        for d in self.ruleset.evaluate(hist, control):
            if d.action not in ("warn", "stop"):
                continue
            mark = (key, int(d.step), str(d.rule))
            if mark not in self._sent:
                self._sent.add(mark)
                if self.recorder is not None:
                    self.recorder.add_decision(key, d)
            if d.action == "stop" and stop is None:
                stop = d
        # No stop decision: the trial goes on
        if stop is None:
            return False
        row = self.state.rows.get(key)
        if row is not None and row.stop_rule is None:
            row.stop_rule, row.stop_step = str(stop.rule), int(stop.step)
        return True

    def _control_history(self, control_key: str, step: int) -> list[dict[str, Any]] | None:
        # The control ran in this driver: its results are here, newest included
        own = self.history.get(control_key)
        if own:
            return own
        if self.recorder is None:
            return None
        now = time.monotonic()
        cached = self._stored_control.get(control_key)
        if cached is not None:
            at, hist = cached
            fresh = now - at < self.control_refresh_s
            if fresh or (hist and hist[-1]["step"] >= step):
                return hist or None
        hist = self.recorder.stored_history(control_key)
        self._stored_control[control_key] = (now, hist)
        return hist or None

    def stop_all(self) -> bool:
        return False


# --- Recorder --------------------------------------------------------------------------


_ANSI = re.compile(r"\x1b\[[0-9;]*m|\[[0-9;]*m")


def _error_line(trial: Any) -> str:
    """The last meaningful line of a trial's error (e.g. ``RuntimeError: boom``)."""
    text = ""
    path = getattr(trial, "error_file", None)
    if path and os.path.exists(path):
        with open(path, errors="replace") as f:
            text = f.read()
    if not text:
        try:
            text = trial.get_error() or ""
        except Exception:  # noqa: BLE001 - reading Tune's error file is best effort
            text = ""
    lines = [_ANSI.sub("", ln).strip() for ln in str(text).splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(("Failure #", "File ", "^", "~"))]
    for ln in reversed(lines):
        if re.match(r"^[\w.]+(Error|Exception|Interrupt|Exit)\b.*:", ln):
            return ln[:500]
    return (lines[-1] if lines else "trial failed (Ray gave no error text)")[:500]


class Recorder(Callback):
    """The store's one writer during a sweep: runs, steps (in batches), decisions, status."""

    def __init__(
        self,
        db_url: str | None,
        sweep_id: int,
        state: SweepState,
        *,
        flush_every: int = 5,
        flush_seconds: float = 1.0,
    ) -> None:
        self.db_url = db_url
        self.sweep_id = sweep_id
        self.state = state
        self.flush_every = flush_every
        self.flush_seconds = flush_seconds
        self.run_ids: dict[str, int] = {}
        self._steps: defaultdict[str, list[tuple[int, dict[str, float], dict[str, Any]]]] = (
            defaultdict(list)
        )
        self._decisions: defaultdict[str, list[Any]] = defaultdict(list)
        self._last_flush = time.monotonic()
        self._store: Store | None = None

    def __getstate__(self) -> dict[str, Any]:
        d = self.__dict__.copy()
        d["_store"] = None  # an engine does not pickle; reopened on first use
        return d

    @property
    def store(self) -> Store:
        if self._store is None:
            from store import open_store

            self._store = open_store(self.db_url)
        return self._store

    # --- what the Monitor calls
    def add_decision(self, key: str, decision: Any) -> None:
        self._decisions[key].append(decision)

    def stored_history(self, key: str) -> list[dict[str, Any]]:
        """A trial's history as the store has it (empty if it has no run row yet)."""
        run_id = self._run_id(key, create=False)
        if run_id is None:
            return []
        return list(self.store.history(run_id))

    # --- run rows
    def _run_id(self, key: str, *, create: bool = True) -> int | None:
        if key in self.run_ids:
            return self.run_ids[key]
        if not create:
            for r in self.store.runs(sweep_id=self.sweep_id):
                if r.trial_id == key:
                    return int(r.id)
            return None
        spec = self.state.rows[key].spec
        run_id = self.store.ensure_run(
            self.sweep_id,
            key,
            role=spec["role"],
            pair_key=spec["pair_key"],
            seed=spec["seed"],
            compression=spec["compression_label"],
            correction=spec["correction_label"],
            config=spec["run"],
            status="running",
        )
        self.run_ids[key] = run_id
        return run_id

    # --- buffering
    def flush(self, key: str | None = None) -> None:
        keys = [key] if key is not None else sorted(set(self._steps) | set(self._decisions))
        for k in keys:
            steps = self._steps.pop(k, [])
            decisions = self._decisions.pop(k, [])
            if not steps and not decisions:
                continue
            run_id = self._run_id(k)
            assert run_id is not None
            if steps:
                self.store.write_steps(run_id, steps)
            for d in decisions:
                self.store.write_decision(
                    run_id, int(d.step), str(d.rule), str(d.action), dict(d.evidence)
                )
        if key is None:
            self._last_flush = time.monotonic()

    def _maybe_flush(self) -> None:
        buffered = sum(len(v) for v in self._steps.values())
        if buffered >= self.flush_every or (
            buffered and time.monotonic() - self._last_flush >= self.flush_seconds
        ):
            self.flush()

    # --- Tune's hooks
    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        key = _key_of(trial)
        row = self.state.rows[key]
        row.status, row.step, row.steps_used = "running", 0, 0
        row.stop_rule = row.stop_step = row.error = None
        run_id = self._run_id(key)
        assert run_id is not None
        # A trial (re)starts from step 1: what an earlier attempt stored goes, so a shorter
        # rerun leaves no stale tail and nothing is counted twice
        self._steps.pop(key, None)
        self._decisions.pop(key, None)
        if self.store.run(run_id).last_step is not None:
            self.store.delete_run_data(run_id)
        self.store.set_run_status(run_id, "running")

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        key = result.get(TRIAL_KEY)
        if key is None:
            return
        step = int(result[STEP_KEY])
        metrics: dict[str, float] = dict(result.get(METRICS_KEY, {}))
        dists = json.loads(result.get(DISTS_KEY) or "{}")
        self._steps[key].append((step, metrics, dists))
        row = self.state.rows[key]
        row.step = step
        row.steps_used += 1
        row.score = _finite(metrics.get(names.SCORE_MEAN))
        row.gap = _finite(metrics.get(names.PROBS_DIFF_MEAN))
        self._maybe_flush()

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        self._maybe_flush()

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        key = _key_of(trial)
        self.flush(key)
        row = self.state.rows[key]
        run_id = self._run_id(key)
        assert run_id is not None
        if row.stop_rule is not None:
            row.status = "stopped"
            self.store.set_run_status(
                run_id, "stopped", stop_rule=row.stop_rule, stop_step=row.stop_step
            )
        else:
            row.status = "completed"
            self.store.set_run_status(run_id, "completed")

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        key = _key_of(trial)
        self.flush(key)
        row = self.state.rows[key]
        row.status, row.error = "failed", _error_line(trial)
        run_id = self._run_id(key)
        assert run_id is not None
        self.store.set_run_status(run_id, "failed", error=row.error)

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.flush()


# --- live progress ---------------------------------------------------------------------

_STATUS_STYLE = {
    "pending": "dim",
    "running": "cyan",
    "completed": "green",
    "stopped": "yellow",
    "failed": "red",
}


def status_text(row: TrialRow) -> str:
    """``completed``, ``stopped: <rule> @ <step>``, ``failed: <error>``, ..."""
    status = row.status
    if row.stop_rule is not None and status in ("running", "stopped"):
        status = f"stopped: {row.stop_rule} @ {row.stop_step}"
    elif row.error is not None:
        status = f"failed: {row.error[:60]}"
    if row.earlier:
        status += " (earlier run)"
    return status


def render_table(state: SweepState, title: str, total_steps: int) -> Table:
    """The status board as a rich table (also the final summary)."""
    from rich.table import Table

    t = Table(title=title, title_justify="left", expand=False)
    for col in ("trial", "role", "codec", "correction", "step", "score", "gap", "status"):
        t.add_column(col, justify="right" if col in ("step", "score", "gap") else "left")
    for key, row in state.rows.items():
        spec = row.spec
        t.add_row(
            key,
            spec["role"],
            spec["compression_label"],
            spec["correction_label"],
            f"{row.step}/{total_steps}",
            "" if row.score is None else f"{row.score:+.3f}",
            "" if row.gap is None else f"{row.gap:.4f}",
            status_text(row),
            style=_STATUS_STYLE.get(row.status, ""),
        )
    return t


class ProgressTable(Callback):
    """The sweep's progress: a rich Live table of every trial on a terminal (redrawn at
    most ``fps`` times a second); elsewhere plain lines, flushed as they happen::

        [   3 s] start s0-control (control, none, none)
        [  60 s] 41/300 trial-steps; running: s0-control @ 21, s1-control @ 20
        [ 152 s] end   s0-topk_keep0.05-none: stopped: score_collapse @ 6, score -0.098

    (a count line at most every ``every_s`` seconds).
    """

    def __init__(
        self, state: SweepState, title: str, total_steps: int, *, fps: float = 4.0,
        every_s: float = 30.0,
    ):  # fmt: skip
        self.state = state
        self.title = title
        self.total_steps = total_steps
        self.min_interval = 1.0 / fps
        self.every_s = every_s
        self._live: Live | None = None
        self._last = 0.0
        self._con: Console | None = None
        self._t0 = time.monotonic()
        self._last_count = self._t0

    def __getstate__(self) -> dict[str, Any]:
        d = self.__dict__.copy()
        d["_live"] = None
        d["_con"] = None
        return d

    def _console(self) -> Console:
        if self._con is None:
            self._con = console()
        return self._con

    @property
    def _lines(self) -> bool:
        """Plain lines (stdout is not a terminal) rather than the live table."""
        return not self._console().is_terminal

    def _say(self, text: str) -> None:
        c = self._console()
        c.print(f"[{time.monotonic() - self._t0:4.0f} s] {text}", markup=False, highlight=False)
        c.file.flush()

    def _redraw(self, force: bool = False) -> None:
        if self._lines:
            return
        now = time.monotonic()
        if not force and now - self._last < self.min_interval:
            return
        self._last = now
        table = render_table(self.state, self.title, self.total_steps)
        if self._live is None:
            from rich.live import Live

            self._live = Live(table, console=self._console(), auto_refresh=False, transient=True)
            self._live.start()
        self._live.update(table, refresh=True)

    def _row(self, trial: Any) -> tuple[str, TrialRow | None]:
        key = _key_of(trial)
        return key, self.state.rows.get(key)

    def _count(self) -> None:
        now = time.monotonic()
        if not self._lines or now - self._last_count < self.every_s:
            return
        self._last_count = now
        rows = self.state.rows.values()
        done = sum(r.steps_used or r.step for r in rows)
        running = [f"{k} @ {r.step}" for k, r in self.state.rows.items() if r.status == "running"]
        total = self.total_steps * len(self.state.rows)
        self._say(f"{done}/{total} trial-steps; running: {', '.join(running) or 'none'}")

    def _ended(self, trial: Any) -> None:
        if not self._lines:
            return
        key, row = self._row(trial)
        if row is None:
            return
        score = "" if row.score is None else f", score {row.score:+.3f}"
        self._say(f"end   {key}: {status_text(row)} at step {row.step}/{self.total_steps}{score}")

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        if self._lines:
            key, row = self._row(trial)
            if row is not None:
                spec = row.spec
                roles = f"{spec['role']}, {spec['compression_label']}, {spec['correction_label']}"
                self._say(f"start {key} ({roles})")
        self._redraw()

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        self._count()
        self._redraw()

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._ended(trial)
        self._redraw(force=True)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._ended(trial)
        self._redraw(force=True)

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
