"""Gap diagnostics: how far the trainer's and the sampler's token probabilities drift apart.

What it is: two pure functions over (B, T) log-probabilities, a (B, T) validity mask and a
slice label (``post_tool``: (B, T) or (B,) bool; None = every token is ``text``):

- :func:`summarize` -> ``dict[str, float]``: probability gap mean/max, mean |log-ratio|,
  KL k1 and k3, log-ppl difference, chi2_token, all globally and per slice (``text``,
  ``post_tool``; names ``correction.names.sliced``), plus per slice the ESS of the raw
  token ratios and the p50/p95/p99/max of |log-ratio| read from the mergeable sketch.
- :func:`distributions` -> ``{names.dist(slice): payload}``: the |log-ratio| sketch per
  slice as the JSON payload of docs/interfaces.md (workers report it, the store keeps it,
  the UI draws ECDFs from it).
- :func:`sketches` -> the same as LogSketch objects (to merge across workers or steps).

Definitions (``lr = logp_trainer - logp_sampler``, ``rho = exp(clamp(lr, +-20))``, means
over the slice's valid tokens): gap ``|exp(logp_trainer) - exp(logp_sampler)|``; k1
``mean(-lr)``; k3 ``mean(rho - 1 - lr)`` (clamped lr); log_ppl_diff = mean over rows
with a token in the slice of ``mean(logp_sampler) - mean(logp_trainer)`` (verl's sign:
> 0 when the trainer is less confident); chi2_token ``mean(rho^2) - 1``; ESS ``1 /
mean(n^2)``, ``n = rho / mean(rho)``, i.e. ``(sum rho)^2 / (N sum rho^2)``, in (0, 1].

Empty slices: every figure of a slice with no valid token is **omitted** (absent from the
dict), never NaN, never an error; with no valid token at all the dict is empty.

Speed: one pass builds the per-token quantities, one matmul against the two slice masks
sums them per slice, bucket indices are computed once for both slices. Omits:
cross-worker aggregation (merge the sketches outside), I/O.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from correction import names as N
from correction.sketch import LogSketch
from correction.strategies import LOG_CLAMP, Tensorish, prepare

__all__ = ["distributions", "sketches", "summarize", "TAIL_Q"]

TAIL_Q: dict[str, float] = {"p50": 0.50, "p95": 0.95, "p99": 0.99, "max": 1.0}
"""Quantile level of each tail name in ``correction.names.QUANTILES``."""


def _slice_masks(m: torch.Tensor, post_tool: Tensorish | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) bool masks of valid text and valid post-tool tokens."""
    if post_tool is None:
        return m, torch.zeros_like(m)
    p = (
        post_tool.detach()
        if isinstance(post_tool, torch.Tensor)
        else torch.from_numpy(np.asarray(post_tool))
    )
    p = p.to(device=m.device, dtype=torch.bool)
    if p.dim() == 1 and p.shape[0] == m.shape[0]:
        p = p.unsqueeze(-1).expand_as(m)  # (B,) -> (B, T)
    elif tuple(p.shape) != tuple(m.shape):
        raise ValueError(
            f"post_tool must be (B, T) = {tuple(m.shape)} or (B,) = ({m.shape[0]},), "
            f"got {tuple(p.shape)}"
        )
    return m & ~p, m & p


def summarize(
    logp_trainer: Tensorish,
    logp_sampler: Tensorish,
    mask: Tensorish | None = None,
    *,
    post_tool: Tensorish | None = None,
    alpha: float = 0.01,
) -> dict[str, float]:
    """Every gap figure, globally and per slice; see the module docstring.

    Args:
        logp_trainer: (B, T) log pi_trainer of the sampled tokens.
        logp_sampler: (B, T) log pi_sampler of the same tokens.
        mask: (B, T) bool/0-1, True on emitted (valid) tokens; None = all valid.
        post_tool: (B, T) or (B,) bool, True on post-tool tokens/rows; None = all text.
        alpha: relative accuracy of the tail quantiles (sketch), default 1%.

    Returns:
        ``dict[str, float]`` keyed by ``correction.names``; empty slices omitted.
    """
    lt, ls, m = prepare(logp_trainer, logp_sampler, mask)
    m_text, m_post = _slice_masks(m, post_tool)
    stats, lr = _moments(lt, ls, m, m_text, m_post)
    sk = _sketches_from(lr, m_text, m_post, alpha)
    for s, sketch in sk.items():
        if sketch.count == 0:
            continue
        for q, v in zip(
            N.QUANTILES, sketch.quantiles([TAIL_Q[q] for q in N.QUANTILES]), strict=True
        ):
            stats[N.tail(s, q)] = v
    return stats


def sketches(
    logp_trainer: Tensorish,
    logp_sampler: Tensorish,
    mask: Tensorish | None = None,
    *,
    post_tool: Tensorish | None = None,
    alpha: float = 0.01,
) -> dict[N.Slice, LogSketch]:
    """``{slice: LogSketch of |log-ratio| on the slice's valid tokens}`` for both slices."""
    lt, ls, m = prepare(logp_trainer, logp_sampler, mask)
    m_text, m_post = _slice_masks(m, post_tool)
    lr = torch.where(m, lt - ls, 0.0)
    return _sketches_from(lr, m_text, m_post, alpha)


def distributions(
    logp_trainer: Tensorish,
    logp_sampler: Tensorish,
    mask: Tensorish | None = None,
    *,
    post_tool: Tensorish | None = None,
    alpha: float = 0.01,
) -> dict[str, dict[str, Any]]:
    """``{names.dist(slice): payload}`` of |log-ratio| per slice (empty slices omitted)."""
    sk = sketches(logp_trainer, logp_sampler, mask, post_tool=post_tool, alpha=alpha)
    return {N.dist(s): v.to_payload() for s, v in sk.items() if v.count > 0}


def _sketches_from(
    lr: torch.Tensor, m_text: torch.Tensor, m_post: torch.Tensor, alpha: float
) -> dict[N.Slice, LogSketch]:
    """Both slices' sketches from one bucket-index pass and one bincount."""
    text, post = LogSketch(alpha=alpha), LogSketch(alpha=alpha)
    idx = text.bucket_index(lr.abs())  # (B, T) storage index; -1 for NaN
    if idx.numel() and int(idx.min()) < 0:
        raise ValueError("log-probabilities contain NaN; pass finite log-probs")
    size = int(idx.max()) + 1 if idx.numel() else 1
    # segment 0 = text, 1 = post_tool, 2 = not valid: one bincount for both slices
    seg = torch.full_like(idx, 2)
    seg.masked_fill_(m_text, 0).masked_fill_(m_post, 1)
    counts = torch.bincount((idx + seg * size).reshape(-1), minlength=3 * size)
    counts_np = counts[: 2 * size].cpu().numpy().reshape(2, size)
    text.add_counts(counts_np[0])
    post.add_counts(counts_np[1])
    return {"text": text, "post_tool": post}


def _moments(
    lt: torch.Tensor,
    ls: torch.Tensor,
    m: torch.Tensor,
    m_text: torch.Tensor,
    m_post: torch.Tensor,
) -> tuple[dict[str, float], torch.Tensor]:
    """Per-slice sums in one matmul; returns the stats and lr (0 off-mask)."""
    dt = lt.dtype
    B, T = lt.shape
    lr = torch.where(m, lt - ls, 0.0)  # (B, T) log-ratio, 0 off-mask
    c = lr.clamp(-LOG_CLAMP, LOG_CLAMP)
    rho = torch.exp(c)  # (B, T)
    gap = torch.where(m, (torch.exp(lt) - torch.exp(ls)).abs_(), 0.0)  # (B, T)
    S = torch.stack([m_text, m_post], dim=-1).to(dt)  # (B, T, 2)
    Q = torch.stack(
        [gap, lr.abs(), lr, rho - 1.0 - c, rho, rho * rho], dim=0
    )  # (6, B, T): gap, |lr|, lr, k3, rho, rho^2
    row = torch.einsum("qbt,bts->qbs", Q[2:3], S)[0]  # (B, 2) row sums of lr per slice
    tot = Q.reshape(6, B * T) @ S.reshape(B * T, 2)  # (6, 2) per-slice sums
    cnt_row = S.sum(1)  # (B, 2) valid tokens per row per slice
    gmax = (gap.unsqueeze(-1) * S).amax(dim=(0, 1))  # (2,) gap >= 0, so 0 off-slice is safe

    # log_ppl_diff per slice: mean over rows with tokens of -(row mean of lr)
    has = cnt_row > 0  # (B, 2)
    row_mean = torch.where(has, -row / cnt_row.clamp(min=1.0), 0.0)
    ppl_sum = row_mean.sum(0)  # (2,)
    n_rows = has.sum(0).to(dt)  # (2,)

    # global log_ppl_diff uses each row's mean over all its valid tokens
    cnt_all, row_all = cnt_row.sum(-1), row.sum(-1)  # (B,)
    has_all = cnt_all > 0
    g_ppl = torch.where(has_all, -row_all / cnt_all.clamp(min=1.0), 0.0).sum()
    g = torch.stack([g_ppl, has_all.sum().to(dt)])  # (2,)

    # host transfer once: per slice (text, post), then global from the slice sums
    n = cnt_row.sum(0)  # (2,)
    pack = torch.cat([tot, gmax[None], ppl_sum[None], n_rows[None], n[None], g[None]])
    vals = pack.to(torch.float64).cpu().numpy()  # (11, 2)
    out: dict[str, float] = {}
    cols = {"text": vals[:10, 0], "post_tool": vals[:10, 1]}
    glob = np.concatenate([vals[:6].sum(1), [vals[6].max()], vals[10], [vals[9].sum()]])
    for label, v in [("all", glob), *cols.items()]:
        ntok = v[9]
        if ntok <= 0:
            continue
        figs = {
            N.PROBS_DIFF_MEAN: v[0] / ntok,
            N.PROBS_DIFF_MAX: v[6],
            N.ABS_LOG_RATIO_MEAN: v[1] / ntok,
            N.KL: -v[2] / ntok,
            N.K3_KL: v[3] / ntok,
            N.LOG_PPL_DIFF: v[7] / v[8],
            N.CHI2_TOKEN: v[5] / ntok - 1.0,
        }
        if label == "all":
            out.update({k: float(x) for k, x in figs.items()})
            continue
        s = "text" if label == "text" else "post_tool"
        out.update({N.sliced(k, s): float(x) for k, x in figs.items()})  # type: ignore[arg-type]
        out[N.ess(s)] = float(v[4] * v[4] / (ntok * v[5])) if v[5] > 0 else math.nan  # type: ignore[arg-type]
    return out, lr
