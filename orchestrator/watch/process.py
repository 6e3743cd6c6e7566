"""A trainer's process, as the ones who follow its log see it: alive, hung, ended.

``gapwatch watch --pid``, a fleet's ``--pid-file`` and a sweep's command trial each end a
trainer the same way (:func:`end_process_group`: SIGTERM to its process group, SIGKILL
after a grace, and why it outlived the SIGTERM where ``/proc`` says) and say a hung one the
same way (:func:`hung_line`, :func:`hung_end`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited and not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped by its parent) is gone for our purposes
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return True


def why_not_ended(pid: int) -> str:
    """Why ``pid`` may have outlived a SIGTERM, read from ``/proc/PID/status`` ('' where
    nothing there says): it ignores, blocks or handles SIGTERM (a trainer saving a
    checkpoint first), or is stopped or in uninterruptible I/O."""
    try:
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
    except (OSError, ValueError):
        return ""
    bit = 1 << (signal.SIGTERM - 1)
    said = [f"state {status.get('State', '?').strip()}"]
    for key, what in (("SigIgn", "ignores"), ("SigBlk", "blocks"), ("SigCgt", "handles")):
        with contextlib.suppress(ValueError):
            if int(status.get(key, "0").strip(), 16) & bit:
                said.append(f"it {what} SIGTERM")
    return " (" + ", ".join(said) + ")"


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is in group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":  # state, ppid, pgrp
                return True
    return False


def end_process_group(
    pid: int, grace: float, *, pgid: int | None = None, alone: bool = False
) -> str:
    """SIGTERM the process group of ``pid`` (or ``pgid``, known where ``pid`` may be gone
    and its group not), SIGKILL it after ``grace`` s; what happened.

    Where ``pid`` shares this process's own group (a script that ran ``trainer &``), or
    ``alone`` is set, only ``pid`` is signalled, so the watcher does not end itself."""
    if pgid is None:
        try:
            pgid = os.getpgid(pid)
        except ProcessLookupError:
            return f"process {pid} had already exited"
    own = alone or pgid == os.getpgid(0)
    send = (lambda sig: os.kill(pid, sig)) if own else (lambda sig: os.killpg(pgid, sig))
    running = (lambda: alive(pid)) if own else (lambda: _group_alive(pgid))
    what = f"process {pid}" if own else f"process group {pgid}"
    with contextlib.suppress(ProcessLookupError):
        send(signal.SIGTERM)
    t0 = time.monotonic()
    while running() and time.monotonic() - t0 < grace:
        time.sleep(0.05)
    if not running():
        return f"{what} ended by SIGTERM in {time.monotonic() - t0:.1f} s"
    why = why_not_ended(pid)
    with contextlib.suppress(ProcessLookupError):
        send(signal.SIGKILL)
    return f"{what} did not end within {grace:g} s of SIGTERM{why}; sent SIGKILL"


def hung_line(idle: float, last_step: int | None) -> str:
    """How a hung trainer is said (a sweep's command trial, ``watch --pid``, a fleet's
    ``--pid-file``): how long its log has been silent, after which step."""
    after = "before its first step" if last_step is None else f"after step {last_step}"
    return f"trainer hung: no log line for {idle:g} s {after}"


def hung_end(pid: int, outcome: str | None) -> str:
    """The rest of a hung trainer's line: how ``pid`` was ended (``outcome``, with
    ``--end-hung``), or that it was left running (None)."""
    if outcome is None:
        return f"; pid {pid} left running (--end-hung ends it)"
    return f"; ended it ({outcome})"
