"""One run in the store, followed by the stop rules step by step.

``gapwatch run``, ``gapwatch watch`` and the trainer callbacks all put a run in the store
the same way: a :class:`TrackedRun` creates the run row from the run's identity
(``store.identity``), and for each step writes the metrics, feeds the one
``rules.Watcher``, stores each new warn/stop decision, and says when the first stop
comes; :meth:`TrackedRun.finish` sets how the run ended. The Tune sweep splits the same
work between its Monitor and Recorder (Tune calls them separately) and shares
:class:`ControlFeed` with it: the paired control's steps, caught up from the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from gapwatch.orchestrator.rules import Decision, RuleSet, Watcher
from gapwatch.store import Store
from gapwatch.store.identity import RunIdentity

Rows = list[dict[str, Any]]
ReadRows = Callable[[int, int, Sequence[str]], Rows]
"""``(after, until, names) -> rows``: a control's stored steps in (after, until]."""


class ControlFeed:
    """Keeps a watcher's view of the paired control caught up from the store.

    Reads the control's stored steps ``ahead`` at a time, never far beyond the step being
    judged, so a finished control is never held whole. Once a read reaches the end of
    what is stored, the rest comes either live (:meth:`give`, where the control runs in
    the same process: ``live``) or from the store again, at most every ``refresh_s``
    (it runs elsewhere).
    """

    def __init__(self, read: ReadRows, refresh_s: float = 2.0, ahead: int = 64) -> None:
        self.read = read
        self.refresh_s = refresh_s
        self.ahead = ahead
        self.live = False
        """The control reports in this process: past the stored end, :meth:`give` feeds."""
        self.seen = 0
        """The control's newest step the watcher has been given."""
        self.at_end = False
        """The last read reached the end of what the store holds of the control."""
        self.read_at: float | None = None

    def give(self, watcher: Watcher, row: dict[str, Any]) -> None:
        """A control step as it happens; taken once the store's part has been read."""
        if self.at_end and int(row["step"]) > self.seen:
            watcher.control(row)
            self.seen = int(row["step"])

    def catch_up(self, watcher: Watcher, step: int) -> None:
        """Give the watcher the control's steps up to ``step`` (and a few beyond)."""
        names = sorted(watcher.control_names)
        if not names or self.seen >= step:
            return
        now = time.monotonic()
        if self.at_end and (
            self.live or (self.read_at is not None and now - self.read_at < self.refresh_s)
        ):
            return
        self.read_at = now
        until = step + self.ahead
        rows = self.read(self.seen, until, names)
        for row in rows:
            watcher.control(row)
            self.seen = int(row["step"])
        self.at_end = not rows or self.seen < until


class TrackedRun:
    """A run written to the store step by step, with the rules watching it."""

    def __init__(
        self,
        st: Store,
        sweep_id: int,
        trial_id: str,
        ident: RunIdentity,
        config: dict[str, Any],
        ruleset: RuleSet | None,
        *,
        control_run: int | None = None,
    ) -> None:
        self.store = st
        self.run_id = st.ensure_run(
            sweep_id, trial_id, **ident.store_fields(), config=config, status="running"
        )
        # The same run started again from step 1 replaces what an earlier attempt stored
        if st.run(self.run_id).last_step is not None:
            st.delete_run_data(self.run_id)
        st.begin_attempt(self.run_id)
        st.set_run_status(self.run_id, "running")
        self.ident = ident
        self.watcher = ruleset.watch() if ruleset is not None else None
        self.control: ControlFeed | None = None
        if control_run is not None:
            self.control = ControlFeed(
                lambda after, until, names: st.history(
                    control_run, after=after, until=until, names=names
                )
            )
        self.steps = 0
        self.stop: Decision | None = None

    def step(
        self, step: int, metrics: dict[str, float], dists: dict[str, Any] | None = None
    ) -> Decision | None:
        """Judge one step, then write it with its new decisions (one transaction); the
        stop decision, once, if any."""
        new: list[Decision] = []
        if self.watcher is not None:
            if self.control is not None:
                self.control.catch_up(self.watcher, step)
            new = self.watcher.step({"step": step, **metrics})
        self.store.write_batch(
            {self.run_id: [(step, metrics, dists or {})]},
            [(self.run_id, d.step, d.rule, d.action, dict(d.evidence)) for d in new],
        )
        self.steps += 1
        if self.stop is None and new and new[0].action == "stop":
            self.stop = new[0]
            return self.stop
        return None

    def add(self, step: int, metrics: dict[str, float]) -> None:
        """More figures for a step already judged (a trainer that logs a step on several
        lines): stored, not judged again."""
        self.store.write_steps(self.run_id, [(step, metrics, {})])

    def finish(self, error: str | None = None) -> str:
        """Set how the run ended (failed with ``error``; stopped by its first stored stop;
        else completed); returns the status."""
        if error is not None:
            self.store.set_run_status(self.run_id, "failed", error=error)
            return "failed"
        stops = [d for d in self.store.decisions(run_id=self.run_id) if d.action == "stop"]
        if stops:
            self.store.set_run_status(
                self.run_id, "stopped", stop_rule=stops[0].rule, stop_step=stops[0].step
            )
            return "stopped"
        self.store.set_run_status(self.run_id, "completed")
        return "completed"
