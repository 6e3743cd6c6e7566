"""The Recorder: during a sweep, the store's one writer (a Ray Tune ``Callback``).

It creates each trial's run row (keys and labels from the trial's identity), buffers the
steps Tune hands over and writes every trial's buffer in one transaction (callbacks block
every trial: it flushes once a second, or at ``flush_every`` buffered results, and at a
trial's end), writes the decisions the Monitor sends it, and sets each run's status when its trial ends. How a run ended is read
from what was stored: a run with a stored ``stop`` decision is ``stopped`` by its first
one, a trial that raised is ``failed`` with its error's last line, any other ``completed``.

Not here: deciding anything (``orchestrator.monitor``), showing progress
(``orchestrator.progress``, which asks :meth:`Recorder.outcome`).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from ray.tune import Callback

from orchestrator.attempts import resumes_after
from orchestrator.placement import placement_of
from orchestrator.trainable import unpack
from store.engine import mask

if TYPE_CHECKING:
    from orchestrator.rules import Decision
    from store import Store

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


Buffered = tuple[int, dict[str, float], dict[str, Any]]


class Recorder(Callback):
    """The store's one writer during a sweep: runs, steps (in batches), decisions, status.

    ``specs`` are the trials' ``TrialSpec.to_dict()`` (plain data; what the run rows say).
    """

    def __init__(
        self,
        db_url: str | None,
        sweep_id: int,
        specs: Sequence[Mapping[str, Any]],
        *,
        flush_every: int = 200,
        flush_seconds: float = 1.0,
    ) -> None:
        self._url = db_url
        """The URL to connect with (it may hold a password): never pickled."""
        self.db_url = None if db_url is None else mask(db_url)
        """The URL with any password masked: what Tune's saved state may hold."""
        self.sweep_id = sweep_id
        self.specs = {str(s["trial_key"]): dict(s) for s in specs}
        self.flush_every = flush_every
        self.flush_seconds = flush_seconds
        self.run_ids: dict[str, int] = {}
        self.outcomes: dict[str, Outcome] = {}
        """How each trial that ended in this driver ended (read back from the store)."""
        self._steps: defaultdict[str, list[Buffered]] = defaultdict(list)
        self._decisions: defaultdict[str, list[Decision]] = defaultdict(list)
        self._buffered = 0
        self._last_flush = time.monotonic()
        self._store: Store | None = None

    def __getstate__(self) -> dict[str, Any]:
        d = self.__dict__.copy()
        d["_store"] = None  # an engine does not pickle; reopened on first use
        d["_url"] = None  # nor does a password: a copy reconnects with the masked URL
        return d

    @property
    def store(self) -> Store:
        if self._store is None:
            from store import open_store

            self._store = open_store(self._url or self.db_url)
        return self._store

    # --- what the Monitor calls
    def add_decision(self, key: str, decision: Decision) -> None:
        """Record a warn/stop decision about trial ``key`` (written with its steps)."""
        self._decisions[key].append(decision)

    def stored_history(
        self, key: str, *, after: int, until: int, names: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """A trial's stored steps in (``after``, ``until``] (only ``names``), what is
        buffered written first; empty if the trial has no run row yet."""
        if self._steps.get(key) or self._decisions.get(key):
            self.flush(key)
        run_id = self.run_id(key, create=False)
        if run_id is None:
            return []
        return self.store.history(run_id, after=after, until=until, names=names)

    def stored_stop(self, key: str) -> Decision | None:
        """Trial ``key``'s first stored stop decision (from an earlier driver), if any."""
        from orchestrator.rules import Decision

        run_id = self.run_id(key, create=False)
        if run_id is None:
            return None
        for d in self.store.decisions(run_id=run_id):
            if d.action == "stop":
                return Decision("stop", d.rule, int(d.step), dict(d.evidence or {}))
        return None

    # --- run rows
    def run_id(self, key: str, *, create: bool = True) -> int | None:
        """The run row of trial ``key`` (created with its identity's labels if new)."""
        if key in self.run_ids:
            return self.run_ids[key]
        if not create:
            for r in self.store.runs(sweep_id=self.sweep_id):
                if r.trial_id == key:
                    self.run_ids[key] = int(r.id)
                    return int(r.id)
            return None
        spec = self.specs[key]
        run_id = self.store.ensure_run(
            self.sweep_id,
            key,
            role=spec["role"],
            pair_key=spec["pair_key"],
            seed=spec["seed"],
            compression=spec["compression"],
            correction=spec["correction"],
            config=spec["run"],
            status="running",
        )
        self.run_ids[key] = run_id
        return run_id

    def outcome(self, key: str) -> Outcome:
        """How trial ``key`` ended in this driver (``running`` while it runs)."""
        return self.outcomes.get(key, Outcome("running"))

    # --- buffering
    def flush(self, key: str | None = None) -> None:
        """Write what is buffered (for one trial, or all) in one transaction."""
        keys = [key] if key is not None else sorted(set(self._steps) | set(self._decisions))
        steps: dict[int, list[Buffered]] = {}
        decisions: list[tuple[int, int, str, str, dict[str, Any]]] = []
        for k in keys:
            buffered = self._steps.pop(k, [])
            decided = self._decisions.pop(k, [])
            self._buffered -= len(buffered)
            if not buffered and not decided:
                continue
            run_id = self.run_id(k)
            assert run_id is not None
            if buffered:
                steps[run_id] = buffered
            decisions += [(run_id, d.step, d.rule, d.action, dict(d.evidence)) for d in decided]
        if steps or decisions:
            self.store.write_batch(steps, decisions)
        if key is None:
            self._last_flush = time.monotonic()

    def _maybe_flush(self) -> None:
        if self._buffered >= self.flush_every or (
            self._buffered and time.monotonic() - self._last_flush >= self.flush_seconds
        ):
            self.flush()

    def _end(self, key: str, outcome: Outcome) -> None:
        run_id = self.run_id(key)
        assert run_id is not None
        self.store.set_run_status(
            run_id,
            outcome.status,
            stop_rule=outcome.stop_rule,
            stop_step=outcome.stop_step,
            error=outcome.error,
        )
        self.outcomes[key] = outcome

    # --- Tune's hooks
    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        key = key_of(trial)
        run_id = self.run_id(key)
        assert run_id is not None
        self.outcomes.pop(key, None)
        # A trial (re)starts from step 1, or from a checkpoint: what an earlier attempt
        # stored after that goes, so a rerun leaves no stale tail and nothing counts twice
        self._buffered -= len(self._steps.pop(key, []))
        self._decisions.pop(key, None)
        after = resumes_after(trial)  # a retry's Tune checkpoint, or --resume's
        if after is not None:
            self.store.delete_run_data(run_id, after=after)
        elif self.store.run(run_id).last_step is not None:
            self.store.delete_run_data(run_id)
        self.store.begin_attempt(run_id)
        self.store.set_run_status(run_id, "running")

    def on_checkpoint(
        self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any
    ) -> None:
        """Record where the trial's newest checkpoint is, and after which step."""
        path = Path(checkpoint.path)
        try:
            step = int(json.loads((path / "meta.json").read_text())["step"])
        except (OSError, ValueError, KeyError):
            return  # not one of ours (or unreadable): a resume starts from step 1
        key = key_of(trial)
        self.flush(key)  # the steps up to the checkpoint are stored before it is recorded
        run_id = self.run_id(key)
        assert run_id is not None
        self.store.set_checkpoint(run_id, step, str(path))

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        rep = unpack(result)
        if rep is None:
            self._record_placement(key_of(trial), result)
            return
        self._steps[rep.key].append((rep.step, rep.metrics, orjson.loads(rep.dists_json)))
        self._buffered += 1
        self._maybe_flush()

    def _record_placement(self, key: str, result: dict[str, Any]) -> None:
        """Where the trial runs (``orchestrator.placement``) into its run's config."""
        where = placement_of(result)
        if where is not None:
            run_id = self.run_id(key)
            assert run_id is not None
            self.store.update_run_config(run_id, {"placement": where})

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        self._maybe_flush()

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        key = key_of(trial)
        self.flush(key)
        run_id = self.run_id(key)
        assert run_id is not None
        stops = [d for d in self.store.decisions(run_id=run_id) if d.action == "stop"]
        if stops:
            self._end(key, Outcome("stopped", stop_rule=stops[0].rule, stop_step=stops[0].step))
        else:
            self._end(key, Outcome("completed"))

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        key = key_of(trial)
        self.flush(key)
        self._end(key, Outcome("failed", error=error_line(trial)))

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.flush()
