"""The sweep's progress on the terminal (a Ray Tune ``Callback``) and its final table.

On a terminal, a rich Live table of every trial (redrawn at most ``fps`` times a
second); on a pipe or file (CI, ``nohup``, ``| tee``), where a Live table would show
nothing until the end, one plain line per trial start and end plus a periodic count::

    [   3 s] start s0-control (control, none, none)
    [  60 s] 41/300 trial-steps; running: s0-control @ 21, s1-control @ 20
    [ 152 s] end   s0-topk_keep0.05-none: stopped: score_collapse @ 6, score -0.098

The table keeps its own view of each trial (step, score, gap from the results it is
shown); how a trial ended it asks the Recorder, which read it back from the store.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray.tune import Callback

from gapwatch.correction import names
from gapwatch.orchestrator.console import console, plain, shown
from gapwatch.orchestrator.sweep.monitor import VOID_RULE, void_reason
from gapwatch.orchestrator.sweep.recorder import key_of
from gapwatch.orchestrator.sweep.trainable import unpack

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    from gapwatch.orchestrator.sweep.recorder import Recorder


@dataclass
class TrialLine:
    """One trial's line in the table."""

    trial_key: str
    role: str
    codec: str
    correction: str
    status: str = "pending"
    """pending | running | completed | stopped | failed."""
    step: int = 0
    steps_used: int = 0
    """Steps this trial used (reported to this driver, or stored by an earlier run)."""
    score: float | None = None
    gap: float | None = None
    stop_rule: str | None = None
    stop_step: int | None = None
    error: str | None = None
    earlier: bool = False
    """Finished in an earlier run of the sweep (not re-run on resume)."""
    seed: int | None = None

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> TrialLine:
        return cls(spec["trial_key"], spec["role"], spec["compression"], spec["correction"],
                   seed=spec.get("seed"))  # fmt: skip

    @property
    def voids_pair(self) -> bool:
        """A control stopped by a rule: its pair is void (``orchestrator.sweep.monitor``)."""
        return self.role == "control" and self.stop_rule is not None

    def status_text(self) -> str:
        """``completed``, ``stopped: <rule> @ <step>``, ``failed: <error>``, ..."""
        status = self.status
        if self.stop_rule == VOID_RULE and status in ("running", "stopped"):
            status = f"void (control stopped) @ {self.stop_step}"
        elif self.voids_pair and status in ("running", "stopped"):
            status = f"stopped: {self.stop_rule} @ {self.stop_step}, pair void"
        elif self.stop_rule is not None and status in ("running", "stopped"):
            status = f"stopped: {self.stop_rule} @ {self.stop_step}"
        elif self.error is not None:
            status = f"failed: {self.error[:60]}"
        if self.earlier:
            status += " (earlier run)"
        return status


_STATUS_STYLE = {
    "pending": "dim",
    "running": "cyan",
    "completed": "green",
    "stopped": "yellow",
    "failed": "red",
}


def render_table(lines: Sequence[TrialLine], title: str, total_steps: int) -> Table:
    """The trials as a rich table (also the final summary)."""
    from rich.table import Table

    t = Table(title=title, title_justify="left", expand=False)
    for col in ("trial", "role", "codec", "correction", "step", "score", "gap", "status"):
        t.add_column(col, justify="right" if col in ("step", "score", "gap") else "left")
    for ln in lines:
        t.add_row(
            shown(ln.trial_key),
            ln.role,
            shown(ln.codec),
            shown(ln.correction),
            f"{ln.step}/{total_steps}",
            "" if ln.score is None else f"{ln.score:+.3f}",
            "" if ln.gap is None else f"{ln.gap:.4f}",
            shown(ln.status_text()),
            style=_STATUS_STYLE.get(ln.status, ""),
        )
    return t


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


class ProgressTable(Callback):
    """The sweep's progress: a live table on a terminal, plain lines elsewhere."""

    def __init__(
        self, lines: Sequence[TrialLine], recorder: Recorder, title: str, total_steps: int, *,
        fps: float = 4.0, every_s: float = 30.0,
    ):  # fmt: skip
        self.lines = {ln.trial_key: ln for ln in lines}
        self.recorder = recorder
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
    def _plain(self) -> bool:
        """Plain lines (stdout is not a terminal) rather than the live table."""
        return not self._console().is_terminal

    def _say(self, text: str) -> None:
        c = self._console()
        line = f"[{time.monotonic() - self._t0:4.0f} s] {plain(text)}"
        c.print(line, markup=False, highlight=False)
        c.file.flush()

    def _redraw(self, force: bool = False) -> None:
        if self._plain:
            return
        now = time.monotonic()
        if not force and now - self._last < self.min_interval:
            return
        self._last = now
        table = render_table(list(self.lines.values()), self.title, self.total_steps)
        if self._live is None:
            from rich.live import Live

            self._live = Live(table, console=self._console(), auto_refresh=False, transient=True)
            self._live.start()
        self._live.update(table, refresh=True)

    def _count(self) -> None:
        now = time.monotonic()
        if not self._plain or now - self._last_count < self.every_s:
            return
        self._last_count = now
        done = sum(ln.steps_used or ln.step for ln in self.lines.values())
        running = [f"{k} @ {ln.step}" for k, ln in self.lines.items() if ln.status == "running"]
        total = self.total_steps * len(self.lines)
        self._say(f"{done}/{total} trial-steps; running: {', '.join(running) or 'none'}")

    def _ended(self, trial: Any) -> None:
        ln = self.lines.get(key_of(trial))
        if ln is None:
            return
        out = self.recorder.outcome(ln.trial_key)
        ln.status, ln.error = out.status, out.error
        ln.stop_rule, ln.stop_step = out.stop_rule, out.stop_step
        if self._plain:
            score = "" if ln.score is None else f", score {ln.score:+.3f}"
            where = f"at step {ln.step}/{self.total_steps}"
            self._say(f"end   {ln.trial_key}: {ln.status_text()} {where}{score}")
        if ln.voids_pair and ln.stop_rule is not None and ln.stop_step is not None:
            self._say(f"void  {void_reason(ln.seed, ln.stop_rule, ln.stop_step)}")
        self._redraw(force=True)

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        ln = self.lines.get(key_of(trial))
        if ln is not None:
            ln.status, ln.step, ln.steps_used = "running", 0, 0
            ln.stop_rule = ln.stop_step = ln.error = None
            if self._plain:
                self._say(f"start {ln.trial_key} ({ln.role}, {ln.codec}, {ln.correction})")
        self._redraw()

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        rep = unpack(result)
        ln = None if rep is None else self.lines.get(rep.key)
        if rep is not None and ln is not None:
            ln.step, ln.steps_used = rep.step, ln.steps_used + 1
            ln.score = _finite(rep.metrics.get(names.SCORE_MEAN))
            ln.gap = _finite(rep.metrics.get(names.PROBS_DIFF_MEAN))
        self._count()
        self._redraw()

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._ended(trial)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._ended(trial)

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
