"""How a run ended by a signal records it, instead of staying ``running`` for ever.

Python ends a process on SIGTERM without unwinding it: no ``finally`` runs and the store
keeps the run as ``running``. Two ways in, for the two kinds of caller:

- a loop gapwatch owns (``gapwatch run``): inside :func:`terminated_raises`, SIGTERM raises
  :class:`Terminated` in the main thread, SIGINT raises ``KeyboardInterrupt`` as always,
  and the caller's ``except`` records the end with :func:`mark_signalled`; the CLI exits
  143 or 130 with one line.
- a loop someone else owns (a TRL ``Trainer`` with ``GapwatchCallback``):
  :class:`EndRelay` records the end when the signal arrives, then hands the signal to the
  handler that was there before (Python's ``KeyboardInterrupt`` for SIGINT, the default
  end for SIGTERM, the trainer's own handler), so the process ends as it would have.

How each ends (:func:`mark_signalled`): SIGTERM (a scheduler's preemption, ``kill``) is
``failed`` "ended by SIGTERM"; SIGINT (Ctrl-C, a person) is ``stopped`` with the stop
rule :data:`INTERRUPTED` at its newest step; a run a rule had already stopped keeps that.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

from gapwatch.store.schema import INTERRUPTED

if TYPE_CHECKING:
    from gapwatch.orchestrator.tracked import TrackedRun

ENDING_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Terminated(BaseException):
    """The process got SIGTERM (a BaseException, like KeyboardInterrupt: it ends the work,
    whatever ``except Exception`` it passes through)."""

    def __init__(self) -> None:
        super().__init__("ended by SIGTERM")


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Terminated


@contextlib.contextmanager
def terminated_raises() -> Iterator[None]:
    """Within the block SIGTERM raises :class:`Terminated` (main thread only; elsewhere a
    no-op); the previous handler comes back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """A second Ctrl-C while the first one's end is being recorded is let go (main thread
    only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def mark_signalled(run: TrackedRun, signum: int) -> str:
    """Record in the store that ``signum`` ended ``run`` (see the module docstring); the
    status it now has."""
    if run.stop is not None:  # a rule stopped it first: that is how it ended
        return run.finish()
    if signum != signal.SIGINT:
        return run.finish(error=f"ended by {signal.Signals(signum).name}")
    last = run.store.run(run.run_id).last_step
    after = "before its first step" if last is None else f"after step {last}"
    run.store.set_run_status(
        run.run_id, "stopped", stop_rule=INTERRUPTED, stop_step=last or 0,
        error=f"interrupted (Ctrl-C, SIGINT) {after}",
    )  # fmt: skip
    return "stopped"


class EndRelay:
    """On SIGTERM or SIGINT: ``mark(signum)`` first, then the handler that was there
    before (see the module docstring).

    ``mark`` writes to the store, so it must not run while the main thread is inside a
    store write of its own (a SQLite write lock or a PostgreSQL row lock it holds would
    wait on itself): wrap those writes in :meth:`held`, and a signal that comes meanwhile
    is relayed when the block ends. A signal that was ignored (``SIG_IGN``) or handled
    outside Python is left alone: it would not end the process.
    """

    def __init__(self, mark: Callable[[int], None]) -> None:
        self.mark = mark
        self.previous: dict[int, Any] = {}
        self._depth = 0
        self._pending: int | None = None

    def install(self) -> None:
        """Take SIGTERM and SIGINT (main thread only; elsewhere nothing is taken)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in ENDING_SIGNALS:
            before = signal.getsignal(sig)
            if before is None or before == signal.SIG_IGN or before == self._handle:
                continue
            self.previous[sig] = before
            signal.signal(sig, self._handle)

    def restore(self) -> None:
        """Give each signal back to its previous handler (where it is still ours)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, before in self.previous.items():
            if signal.getsignal(sig) == self._handle:
                signal.signal(sig, before)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A signal that arrives within the block is relayed when it ends."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0 and (sig := self._pending) is not None:
                self._pending = None
                self._relay(sig, None)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._depth:
            self._pending = self._pending or signum
            return
        self._relay(signum, frame)

    def _relay(self, signum: int, frame: FrameType | None) -> None:
        self.restore()
        try:
            self.mark(signum)
        except Exception as exc:  # noqa: BLE001 - the signal must still end the process
            text = " ".join(str(exc).split()) or type(exc).__name__
            print(f"gapwatch: could not record how the run ended: {text}", file=sys.stderr)
        before = self.previous.get(signum, signal.SIG_DFL)
        if callable(before):
            before(signum, frame)
            return
        # SIG_DFL: end the process as the signal would have ended it
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
