"""The machine line every benchmark fragment starts with (cores, CPU model, RAM, OS)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown CPU" where it cannot be read)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def ram_gib() -> str:
    """Total memory from /proc/meminfo, e.g. "23.5 GiB" ("unknown" where unreadable)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except (OSError, ValueError):
        pass
    return "unknown"


def machine() -> str:
    """``"2 cores (2 usable), <CPU>, 23.5 GiB RAM, <platform>"``."""
    usable = len(os.sched_getaffinity(0))
    return (
        f"{os.cpu_count()} cores ({usable} usable), {cpu_model()}, {ram_gib()} RAM, "
        f"{platform.platform()}"
    )
