"""Process helpers shared by the tests that start Ray nodes themselves."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time


def free_port() -> int:
    """A TCP port free on 127.0.0.1 this moment."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def end_group(p: subprocess.Popen[bytes], grace_s: float = 5.0, wait_s: float = 30.0) -> None:
    """SIGTERM ``p``'s process group, SIGKILL what is left after ``grace_s``, reap ``p``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(p.pid, 0)  # raises once no process of the group is left
        except ProcessLookupError:
            break
        p.poll()
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=wait_s)
