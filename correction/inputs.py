"""Input checking shared by the correction strategies and the gap diagnostics.

Both take per-token log-probabilities of the trainer and the sampler, ``(B, T)`` each, and
a ``(B, T)`` validity mask, as torch tensors or numpy arrays. :func:`prepare` checks the
shapes and devices once and returns two float tensors (half and bfloat16 upcast to
float32; numpy wrapped without a copy; tensors detached) and a bool mask.
"""

from __future__ import annotations

import numpy as np
import torch

Tensorish = torch.Tensor | np.ndarray

__all__ = ["Tensorish", "as_bool", "as_float", "prepare"]


def as_float(label: str, x: Tensorish) -> torch.Tensor:
    """``x`` as a detached floating tensor (float32 at least); ``label`` names it in errors."""
    if isinstance(x, torch.Tensor):
        t = x.detach()
    elif isinstance(x, np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(x))
    else:
        raise ValueError(f"{label} must be a torch tensor or numpy array, got {type(x).__name__}")
    if not t.is_floating_point():
        raise ValueError(f"{label} must be floating point log-probabilities, got {t.dtype}")
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    return t


def as_bool(x: Tensorish, device: torch.device) -> torch.Tensor:
    """``x`` (bool or 0/1) as a detached bool tensor on ``device``."""
    t = x.detach() if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))
    return t.to(device=device, dtype=torch.bool)


def prepare(
    logp_trainer: Tensorish, logp_sampler: Tensorish, mask: Tensorish | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two (B, T) float tensors of one dtype and device, and a (B, T) bool mask.

    ``mask=None`` means every token is valid.
    """
    lt = as_float("logp_trainer", logp_trainer)
    ls = as_float("logp_sampler", logp_sampler)
    if lt.dim() != 2 or lt.shape != ls.shape:
        raise ValueError(
            "logp_trainer and logp_sampler must both be (B, T); got "
            f"{tuple(lt.shape)} and {tuple(ls.shape)}"
        )
    if lt.device != ls.device:
        raise ValueError(f"logp tensors on different devices: {lt.device} vs {ls.device}")
    if lt.dtype != ls.dtype:
        dt = torch.promote_types(lt.dtype, ls.dtype)
        lt, ls = lt.to(dt), ls.to(dt)
    if mask is None:
        return lt, ls, torch.ones(lt.shape, dtype=torch.bool, device=lt.device)
    m = as_bool(mask, lt.device)
    if tuple(m.shape) != tuple(lt.shape):
        raise ValueError(f"mask must be (B, T) = {tuple(lt.shape)}, got {tuple(m.shape)}")
    return lt, ls, m
