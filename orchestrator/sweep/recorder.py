"""The Recorder: during a sweep, the store's one writer (a Ray Tune ``Callback``).

It creates each trial's run row (keys and labels from the trial's identity), and turns
what Tune and the Monitor hand it (each result's steps, warn/stop decisions, a trial's
restart, checkpoint, placement and end) into writes for its writer
(``orchestrator.sweep.writer``): by default a thread that batches them into few transactions
off the driver's result path (callbacks block every trial), in the order they came, and
rides out store outages (buffered, retried, spilled to a file past a bound, each outage
said in a line). How a run ended is known on the driver, not read back: a trial with a
``stop`` decision is ``stopped`` by its first one, a trial that raised is ``failed`` with
its error's last line, any other ``completed``.

What the Monitor reads back (a control's stored steps, a stop from an earlier driver)
comes from the store with what is queued but not yet written laid over it, so a read
never waits on the writer; while the store cannot be reached such reads come back empty
(the rules go on from what they hold, and catch up on the control once it is back),
except a restored trial's own steps (:meth:`Recorder.stored_steps`), which say that
they cannot be known yet, so its rules' state waits for the store
(``orchestrator.sweep.monitor``).

Not here: deciding anything (``orchestrator.sweep.monitor``), showing progress
(``orchestrator.sweep.progress``, which asks :meth:`Recorder.outcome`).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from ray.tune import Callback

from gapwatch.orchestrator.console import console
from gapwatch.orchestrator.sweep.attempts import resumes_after
from gapwatch.orchestrator.sweep.placement import placement_of
from gapwatch.orchestrator.sweep.trainable import unpack
from gapwatch.orchestrator.sweep.writer import SPILL_DIR, InlineWriter, Op, ThreadWriter, Writer
from gapwatch.store import StoreError
from gapwatch.store.engine import mask, unreachable

if TYPE_CHECKING:
    from gapwatch.orchestrator.rules import Decision
    from gapwatch.store import Store

FINISHED = ("completed", "stopped")
"""Run statuses a resume does not re-run."""


@dataclass(frozen=True)
class Outcome:
    """How a run ended, as the store says."""

    status: str
    """running | completed | stopped | failed."""
    stop_rule: str | None = None
    stop_step: int | None = None
    error: str | None = None


_ANSI = re.compile(r"\x1b\[[0-9;]*m|\[[0-9;]*m")


def error_line(trial: Any) -> str:
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


def key_of(trial: Any) -> str:
    """The trial key of a Tune trial (from its config's spec)."""
    return str(trial.config["spec"]["trial_key"])


WRITERS = ("thread", "inline")
"""How the Recorder writes (``orchestrator.sweep.writer``): a writer thread, or inline on the
driver's thread (the path before issue 21; for comparison)."""
BOUND = 20_000
"""Writes held in memory while the store is unreachable before the rest are spilled to a
file. A result of the worker's full figure set with both distributions is about 8 KiB in
memory (``bench/pipeline_bench.py``'s step pool), so the bound holds ~160 MiB at most:
40 s of 1,000 trials reporting every 2 s, or 33 min of the 10-trial quickstart."""
LOCK_WAIT_S = 2.0
"""SQLite: how long the writer's statements wait on another process's write lock (the
store tries five times, so ~10 s in all) before the store counts as unreachable. Longer
than any one of gapwatch's own write transactions (a second's results of 1,000 trials,
~30,000 metric rows, commit in ~0.3 s at the ~95,000 rows/s that part 4 of
``bench/pipeline_bench.py`` measured while writing, 200 trials on a 2-core EPYC), so
another gapwatch writer is waited for, not reported; a lock held longer is said in ~10 s."""
END_WAIT_S = 120.0
"""At a sweep's end, how long the Recorder waits for an unreachable store before it
leaves what is unwritten in the spill file (a PostgreSQL restart takes seconds; the
issue's outage is 60 s)."""


def _say(text: str) -> None:
    # one line however long (a PostgreSQL error can run past the console's width): a
    # status line wrapped in two is two lines to whoever greps a log for it
    console().print(text, markup=False, highlight=False, soft_wrap=True)


class Recorder(Callback):
    """The store's one writer during a sweep: runs, steps (in batches), decisions, status.

    ``specs`` are the trials' ``TrialSpec.to_dict()`` (plain data; what the run rows say).
    ``flush_every`` / ``flush_seconds``: a batch is written once this many writes are
    queued or the oldest has waited this long. ``writer``: one of ``WRITERS``. ``say``:
    where the writer's lines go (the console).
    """

    def __init__(
        self,
        db_url: str | None,
        sweep_id: int,
        specs: Sequence[Mapping[str, Any]],
        *,
        flush_every: int = 200,
        flush_seconds: float = 1.0,
        writer: str = "thread",
        bound: int = BOUND,
        spill_dir: Path | str = SPILL_DIR,
        lock_wait_s: float = LOCK_WAIT_S,
        end_wait_s: float = END_WAIT_S,
        backoff_s: float = 0.5,
        say: Callable[[str], None] = _say,
    ) -> None:
        if writer not in WRITERS:
            raise StoreError(f"unknown writer {writer!r}; valid: {', '.join(WRITERS)}")
        self._url = db_url
        """The URL to connect with (it may hold a password): never pickled."""
        self.db_url = None if db_url is None else mask(db_url)
        """The URL with any password masked: what Tune's saved state may hold."""
        self.sweep_id = sweep_id
        self.specs = {str(s["trial_key"]): dict(s) for s in specs}
        self.flush_every = flush_every
        self.flush_seconds = flush_seconds
        self.writer_kind = writer
        self.bound = bound
        self.spill_dir = Path(spill_dir)
        self.lock_wait_s = lock_wait_s
        self.end_wait_s = end_wait_s
        self.backoff_s = backoff_s
        self.say = say
        self.run_ids: dict[str, int] = {}
        self.outcomes: dict[str, Outcome] = {}
        """How each trial that ended in this driver ended."""
        self._stops: dict[str, Decision] = {}
        """Each trial's first stop decision since it (re)started, as the Monitor sent it."""
        self._unwritten: dict[str, dict[int, tuple[int, dict[str, float]]]] = {}
        """Per trial, its queued steps not yet committed: step -> (op seq, figures)."""
        self._cut: dict[str, tuple[int, int]] = {}
        """Per trial, a queued restart not yet committed: (op seq, steps kept up to)."""
        self._committed = 0
        """The newest write committed (writes commit in order)."""
        self._counted: set[int] = set()
        """Restarts (op seqs) whose attempt is counted: a retried restart counts once."""
        self._blind: dict[str, int] = {}
        """Per trial, its newest step queued while the store could not be reached (not
        laid over reads): until that op is committed, what is stored of it is incomplete."""
        self._lock = threading.Lock()
        """Guards the four above: the writer thread updates them after each commit."""
        self._store: Store | None = None
        self._writer: Writer | None = None
        self._closed = False

    def __getstate__(self) -> dict[str, Any]:
        d = self.__dict__.copy()
        d["_store"] = None  # an engine does not pickle; reopened on first use
        d["_writer"] = None  # nor does a thread: a copy starts its own
        d["_lock"] = None
        d["_url"] = None  # nor does a password: a copy reconnects with the masked URL
        return d

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__dict__.update(d)
        self._lock = threading.Lock()

    @property
    def store(self) -> Store:
        """The driver's store: reads, and the run rows made before the sweep starts."""
        if self._store is None:
            from gapwatch.store import open_store

            self._store = open_store(self._url or self.db_url)
        return self._store

    @property
    def spill_path(self) -> Path:
        """Where this sweep's writes go while the store is unreachable, past the bound."""
        return self.spill_dir / f"sweep-{self.sweep_id}.jsonl"

    @property
    def writer(self) -> Writer:
        if self._writer is None:
            self._writer = self._make_writer()
        return self._writer

    def _make_writer(self) -> Writer:
        from gapwatch.store import open_store

        url = self._url or self.db_url

        def opened() -> Store:
            return open_store(url, busy_timeout_s=self.lock_wait_s)

        w: InlineWriter | ThreadWriter
        if self.writer_kind == "inline":
            w = InlineWriter(
                lambda: self.store, self.apply, flush_every=self.flush_every,
                flush_seconds=self.flush_seconds,
            )  # fmt: skip
        else:
            w = ThreadWriter(
                opened, self.apply, spill_path=self.spill_path, say=self.say,
                bound=self.bound, flush_every=self.flush_every,
                flush_seconds=self.flush_seconds, backoff_s=self.backoff_s,
            )  # fmt: skip
        with self._lock:
            self._committed = w.seq  # a leftover spill's writes come before any of ours
        w.on_commit(self._written)
        return w

    # --- what the Monitor calls
    def add_decision(self, key: str, decision: Decision) -> None:
        """Record a warn/stop decision about trial ``key`` (queued with its steps)."""
        if decision.action == "stop":
            self._stops.setdefault(key, decision)
        self._put("decision", key, decision.step, decision.rule, decision.action,
                  dict(decision.evidence))  # fmt: skip

    def stored_history(
        self, key: str, *, after: int, until: int, names: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """A trial's steps in (``after``, ``until``] (only ``names``): what is stored, with
        what is queued laid over it; empty while the store cannot be reached, or if the
        trial has no run row yet."""
        return self.stored_steps(key, after=after, until=until, names=names) or []

    def stored_steps(
        self, key: str, *, after: int, until: int, names: Sequence[str] | None = None
    ) -> list[dict[str, Any]] | None:
        """As :meth:`stored_history`, but None where the answer cannot be known yet: the
        store cannot be reached, or steps of this trial queued during an outage are not
        all written (the store's part would miss them)."""
        w = self._writer
        if w is not None and not w.reachable():
            return None
        with self._lock:
            queued = dict(self._unwritten.get(key, {}))
            cut = self._cut.get(key)
            if self._blind.get(key, 0) > self._committed:
                return None
        run_id = self.run_id(key, create=False)
        rows: dict[int, dict[str, Any]] = {}
        if run_id is not None:
            try:
                stored = self.store.history(run_id, after=after, until=until, names=names)
            except StoreError as exc:
                if unreachable(exc) is None:
                    raise
                return None
            for r in stored:
                if cut is None or int(r["step"]) <= cut[1]:
                    rows[int(r["step"])] = r
        for step, (_, figs) in queued.items():
            if after < step <= until:
                keep = figs if names is None else {n: figs[n] for n in names if n in figs}
                rows[step] = {"step": step, **keep}
        return [rows[s] for s in sorted(rows)]

    def stored_stop(self, key: str) -> Decision | None:
        """Trial ``key``'s first stop decision: sent in this driver, or stored by an
        earlier one (None also while the store cannot be reached)."""
        from gapwatch.orchestrator.rules import Decision

        if key in self._stops:
            return self._stops[key]
        run_id = self.run_id(key, create=False)
        if run_id is None:
            return None
        try:
            stored = self.store.decisions(run_id=run_id)
        except StoreError as exc:
            if unreachable(exc) is None:
                raise
            return None
        for d in stored:
            if d.action == "stop":
                return Decision("stop", d.rule, int(d.step), dict(d.evidence or {}))
        return None

    # --- run rows
    def run_id(self, key: str, *, create: bool = True) -> int | None:
        """The run row of trial ``key`` (created with its identity's labels if new)."""
        return self._run_id(self.store, key, create=create)

    def _run_id(self, st: Store, key: str, *, create: bool = True) -> int | None:
        if key in self.run_ids:
            return self.run_ids[key]
        if not create:
            try:
                runs = st.runs(sweep_id=self.sweep_id)
            except StoreError as exc:
                if unreachable(exc) is None:
                    raise
                return None
            for r in runs:
                if r.trial_id == key:
                    self.run_ids[key] = int(r.id)
                    return int(r.id)
            return None
        spec = self.specs[key]
        info = spec.get("model_info")  # a named model's figures beside the settings
        run_id = st.ensure_run(
            self.sweep_id,
            key,
            role=spec["role"],
            pair_key=spec["pair_key"],
            seed=spec["seed"],
            compression=spec["compression"],
            correction=spec["correction"],
            config={**spec["run"], **({"model_info": info} if info else {})},
            status="running",
        )
        self.run_ids[key] = run_id
        return run_id

    def outcome(self, key: str) -> Outcome:
        """How trial ``key`` ended in this driver (``running`` while it runs)."""
        return self.outcomes.get(key, Outcome("running"))

    # --- the writes
    def _put(self, kind: str, key: str, *args: Any) -> int:
        return self.writer.put(kind, key, *args)

    def flush(self, key: str | None = None) -> None:
        """Wait until everything queued is written (``key`` is accepted for the API's sake:
        writes are in order, so one trial's are never behind another's). Waits at most
        ``end_wait_s`` for an unreachable store, then leaves the rest in the spill file."""
        if self._writer is None and (self._closed or not self.spill_path.is_file()):
            return  # nothing queued; nor a spill an earlier driver left
        if not self.writer.sync(self.end_wait_s):
            self.close()

    def close(self) -> None:
        """Write what is queued (see :meth:`flush`) and stop the writer."""
        w, self._writer = self._writer, None
        if w is not None:
            self._closed = True  # what it left in the spill file waits for a --resume
            w.close(self.end_wait_s)

    def apply(self, st: Store, ops: list[Op]) -> None:
        """Write ``ops`` to ``st``: a run of steps and decisions in one transaction, or
        one other op (``orchestrator.sweep.writer.groups`` cuts them so)."""
        kind, key = ops[0][1], ops[0][2]
        if kind in ("step", "decision"):
            steps: dict[int, list[tuple[int, dict[str, float], dict[str, Any]]]] = {}
            decisions = []
            for _, k, tkey, *args in ops:
                rid = self._run_id(st, tkey)
                assert rid is not None
                if k == "step":
                    step, figs, dists = args
                    dd = orjson.loads(dists) if isinstance(dists, str) else dists
                    steps.setdefault(rid, []).append((int(step), figs, dd))
                else:
                    decisions.append((rid, *args))
            st.write_batch(steps, decisions)
            return
        rid = self._run_id(st, key)
        assert rid is not None
        args = ops[0][3:]
        if kind == "start":
            (restore,) = args
            if restore is not None:
                st.delete_run_data(rid, after=int(restore))
            elif st.run(rid).last_step is not None:
                st.delete_run_data(rid)
            seq = int(ops[0][0])
            if seq not in self._counted:  # not again when a later call of this op failed
                st.begin_attempt(rid)
                self._counted.add(seq)
            st.set_run_status(rid, "running")
        elif kind == "status":
            status, rule, step, error = args
            st.set_run_status(rid, status, stop_rule=rule, stop_step=step, error=error)
        elif kind == "checkpoint":
            step, path = args
            st.set_checkpoint(rid, int(step), str(path))
        elif kind == "config":
            (values,) = args
            st.update_run_config(rid, dict(values))
        else:
            raise StoreError(f"unknown write {kind!r} for trial {key!r}")

    def _written(self, ops: list[Op]) -> None:
        """After a commit (writer thread): those steps and restarts are in the store."""
        with self._lock:
            self._committed = int(ops[-1][0])
            for seq, kind, key, *args in ops:
                if kind == "step":
                    mine = self._unwritten.get(key)
                    if mine is not None and mine.get(int(args[0]), (0,))[0] == seq:
                        del mine[int(args[0])]
                elif kind == "start" and self._cut.get(key, (0,))[0] == seq:
                    del self._cut[key]

    def _end(self, key: str, outcome: Outcome) -> None:
        """A trial ended: its status queued behind its steps and decisions. Not waited
        for: at 1,000 trials a wait per trial end (a PostgreSQL round trip or a SQLite
        commit) held every other trial's result up by ~0.1 s (``bench/driver_sim.py``);
        ``flush()`` is the barrier for whoever reads the store next."""
        self._put("status", key, outcome.status, outcome.stop_rule, outcome.stop_step,
                  outcome.error)  # fmt: skip
        self.outcomes[key] = outcome

    # --- Tune's hooks
    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        key = key_of(trial)
        self.outcomes.pop(key, None)
        self._stops.pop(key, None)
        # A trial (re)starts from step 1, or from a checkpoint: what an earlier attempt
        # stored after that goes, so a rerun leaves no stale tail and nothing counts twice
        after = resumes_after(trial)  # a retry's Tune checkpoint, or --resume's
        seq = self._put("start", key, after)
        with self._lock:
            mine = self._unwritten.get(key, {})
            for step in [s for s in mine if after is None or s > after]:
                del mine[step]  # queued before the restart: written, then cut by it
            if seq > self._committed:
                self._cut[key] = (seq, -1 if after is None else after)

    def on_checkpoint(
        self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any
    ) -> None:
        """Record where the trial's newest checkpoint is, and after which step (written
        after the steps before it: writes keep their order)."""
        path = Path(checkpoint.path)
        try:
            step = int(json.loads((path / "meta.json").read_text())["step"])
        except (OSError, ValueError, KeyError):
            return  # not one of ours (or unreadable): a resume starts from step 1
        self._put("checkpoint", key_of(trial), step, str(path))

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        rep = unpack(result)
        if rep is None:
            self._record_placement(key_of(trial), result)
            return
        # the distributions stay JSON text here: the writer thread parses them
        seq = self._put("step", rep.key, rep.step, rep.metrics, rep.dists_json)
        if not self.writer.reachable():
            # reads come back empty until the store is back: nothing to lay over; a read
            # of this trial's steps is incomplete until this one is written
            with self._lock:
                self._blind[rep.key] = seq
            return
        with self._lock:
            if seq > self._committed:
                self._unwritten.setdefault(rep.key, {})[rep.step] = (seq, rep.metrics)

    def _record_placement(self, key: str, result: dict[str, Any]) -> None:
        """Where the trial runs (``orchestrator.sweep.placement``) into its run's config."""
        where = placement_of(result)
        if where is not None:
            self._put("config", key, {"placement": where})

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        self.writer.tick()

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        key = key_of(trial)
        stop = self._stops.get(key)
        if stop is not None:
            self._end(key, Outcome("stopped", stop_rule=stop.rule, stop_step=stop.step))
        else:
            self._end(key, Outcome("completed"))

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._end(key_of(trial), Outcome("failed", error=error_line(trial)))

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.close()
