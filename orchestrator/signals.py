"""SIGTERM as an exception, so a run ended by ``kill`` (a scheduler's preemption, a job
cancelled, a container stopped) records how it ended instead of staying ``running``.

Python ends a process on SIGTERM without unwinding it: no ``finally`` runs and the store
keeps the run as ``running`` for ever. Inside :func:`terminated_raises`, SIGTERM raises
:class:`Terminated` in the main thread instead, so the caller's ``except`` marks the run
and the CLI exits 143 (128 + SIGTERM) with one line. SIGINT already arrives as
``KeyboardInterrupt``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


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
