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


BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU flags that give bfloat16 matmuls hardware support (oneDNN uses them when present)."""


def bf16_flags() -> str:
    """The bfloat16 flags the CPU reports, e.g. ``"avx512_bf16 amx_bf16"``, or ``"none"``.

    Without them a bfloat16 matmul (the torch sampler's default dtype) is emulated and
    runs an order of magnitude or more slower than float32; ``bench/cpu_bench.py``
    measures by how much.
    """
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return " ".join(f for f in BF16_FLAGS if f in have) or "none"
    except OSError:
        pass
    return "unknown"


def machine() -> str:
    """``"2 cores (2 usable), <CPU> (bf16 flags: ...), 23.5 GiB RAM, <platform>"``."""
    usable = len(os.sched_getaffinity(0))
    return (
        f"{os.cpu_count()} cores ({usable} usable), {cpu_model()} (bf16 flags: "
        f"{bf16_flags()}), {ram_gib()} RAM, {platform.platform()}"
    )
