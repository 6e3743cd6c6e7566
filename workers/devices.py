"""Where a run's tensors live: a device name checked before anything is built on it.

``require(name)`` returns the ``torch.device`` or raises one ``ValueError`` line that says
why the device cannot be used in this process and what to do. A sweep with
``resources.gpus > 0`` puts ``device: cuda`` into every trial (Ray sets each trial's
``CUDA_VISIBLE_DEVICES``), so on a machine without a usable GPU each such trial fails
with this line, which the store keeps as the run's error.

Deliberately a runtime check, not a config check: the driver that validates a sweep
often has no GPU while its trials' nodes do.
"""

from __future__ import annotations

import os

import torch


def _where() -> str:
    """What this process sees: the torch build and ``CUDA_VISIBLE_DEVICES``."""
    build = f"torch {torch.__version__}"
    if torch.version.cuda is None:
        build += ", a CPU-only build"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return build if visible is None else f"{build}; CUDA_VISIBLE_DEVICES={visible!r}"


def require(name: str) -> torch.device:
    """``name`` (``cpu``, ``cuda``, ``cuda:1``, ...) as a usable ``torch.device``."""
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        raise ValueError(
            f"device {name!r} is not a torch device; use cpu, cuda or cuda:N"
        ) from None
    if dev.type != "cuda":
        return dev
    advice = "use device: cpu (in a sweep: resources.gpus: 0), or run where a GPU is visible"
    if not torch.cuda.is_available():
        raise ValueError(
            f"device {name!r} asked for but CUDA is not available ({_where()}); {advice}"
        )
    count = torch.cuda.device_count()
    if dev.index is not None and dev.index >= count:
        raise ValueError(
            f"device {name!r} asked for but only {count} CUDA device(s) are visible "
            f"({_where()}); use cuda:0..cuda:{count - 1}"
        )
    return dev
