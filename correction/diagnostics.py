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
- :func:`drift` -> the same tails, ESS, mean log-ratio and sketches for another ratio
  family (``names.RATIOS``): pi_theta / pi_ref against the frozen reference
  (``ref_drift``), or the PPO ratio pi_new / pi_behaviour over the update (``ppo``).

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

from typing import Any

import numpy as np
import torch

from gapwatch.correction import names as N
from gapwatch.correction.inputs import Tensorish, as_bool, prepare
from gapwatch.correction.sketch import LogSketch, bincount
from gapwatch.correction.strategies import LOG_CLAMP

__all__ = [
    "analyze",
    "by_turn",
    "distributions",
    "drift",
    "payloads",
    "sketches",
    "summarize",
    "TAIL_Q",
]

TAIL_Q: dict[str, float] = {"p50": 0.50, "p95": 0.95, "p99": 0.99, "max": 1.0}
"""Quantile level of each tail name in ``correction.names.QUANTILES``."""


class _Slices:
    """Slice labels for per-slice sums of (B, T) quantities that are 0 off-mask.

    Per-row labels ((B,) or None) need one row-sum pass per quantity; per-token labels
    need a sum and a dot product. ``post`` is the (B,) or (B, T) float 0/1 label of
    valid post-tool tokens/rows.
    """

    def __init__(self, m: torch.Tensor, post_tool: Tensorish | None, dt: torch.dtype) -> None:
        B, T = m.shape
        self.m = m
        self.row: torch.Tensor | None = None  # (B,) float 0/1, per-row labels
        self.tok: torch.Tensor | None = None  # (B, T) float 0/1 on valid post tokens
        if post_tool is None:
            self.row = torch.zeros(B, dtype=dt, device=m.device)
            return
        p = as_bool(post_tool, m.device)
        if p.dim() == 1 and p.shape[0] == B:
            self.row = p.to(dt)
        elif tuple(p.shape) == (B, T):
            self.tok = (p & m).to(dt)
        else:
            raise ValueError(
                f"post_tool must be (B, T) = {(B, T)} or (B,) = ({B},), got {tuple(p.shape)}"
            )

    def sums(self, x: torch.Tensor) -> torch.Tensor:
        """(2,) [text, post_tool] sums of x (B, T), x being 0 off-mask."""
        if self.row is not None:
            r = x.sum(-1)  # (B,)
            post = torch.dot(r, self.row)
            return torch.stack([r.sum() - post, post])
        assert self.tok is not None
        tot = x.sum()
        post = torch.dot(x.reshape(-1), self.tok.reshape(-1))
        return torch.stack([tot - post, post])

    def sq_sums(self, x: torch.Tensor) -> torch.Tensor:
        """(2,) [text, post_tool] sums of x**2 (B, T), x being 0 off-mask."""
        if self.row is not None:
            r = torch.linalg.vecdot(x, x)  # (B,)
            post = torch.dot(r, self.row)
            return torch.stack([r.sum() - post, post])
        assert self.tok is not None
        flat = x.reshape(-1)
        tot = torch.dot(flat, flat)
        post = torch.dot(flat * self.tok.reshape(-1), flat)
        return torch.stack([tot - post, post])

    def row_sums(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 2) per-row [text, post_tool] sums of x (B, T), 0 off-mask."""
        r = x.sum(-1)  # (B,)
        if self.row is not None:
            post = r * self.row
        else:
            assert self.tok is not None
            post = (x * self.tok).sum(-1)
        return torch.stack([r - post, post], dim=-1)

    def maxes(self, x: torch.Tensor) -> torch.Tensor:
        """(2,) [text, post_tool] max of x (B, T) >= 0, 0 off-mask (0 for an empty slice)."""
        if self.row is not None:
            r = x.amax(-1)  # (B,)
            post = (r * self.row).amax()
            return torch.stack([torch.where(self.row > 0, 0.0, r).amax(), post])
        assert self.tok is not None
        post_mask = self.tok > 0
        return torch.stack(
            [torch.where(post_mask, 0.0, x).amax(), torch.where(post_mask, x, 0.0).amax()]
        )

    def segment(self) -> torch.Tensor:
        """(B, 1) or (B, T) float: 0 for text, 1 for post-tool (invalid tokens: text)."""
        if self.row is not None:
            return self.row.unsqueeze(-1)
        assert self.tok is not None
        return self.tok


def analyze(
    logp_trainer: Tensorish,
    logp_sampler: Tensorish,
    mask: Tensorish | None = None,
    *,
    post_tool: Tensorish | None = None,
    alpha: float = 0.01,
) -> tuple[dict[str, float], dict[N.Slice, LogSketch]]:
    """:func:`summarize`'s figures and both slices' sketches from one shared pass.

    Args as in :func:`summarize`. Returns ``(stats, {slice: LogSketch})``; a worker that
    reports both the figures and the distributions calls this once.
    """
    lt, ls, m = prepare(logp_trainer, logp_sampler, mask)
    dt = lt.dtype
    sl = _Slices(m, post_tool, dt)
    B, T = m.shape

    lr = torch.where(m, lt - ls, 0.0)  # (B, T) log-ratio, 0 off-mask
    absl = lr.abs()  # (B, T)
    c = lr.clamp(-LOG_CLAMP, LOG_CLAMP)
    e = torch.expm1(c)  # (B, T) rho - 1, exactly 0 off-mask
    k3 = e - c  # (B, T) rho - 1 - log rho, 0 off-mask
    gap = torch.where(m, (torch.exp(lt) - torch.exp(ls)).abs_(), 0.0)  # (B, T)
    mf = m.to(dt)

    row_lr = sl.row_sums(lr)  # (B, 2)
    row_n = sl.row_sums(mf)  # (B, 2) valid tokens per row per slice
    has = row_n > 0
    row_mean = torch.where(has, -row_lr / row_n.clamp(min=1.0), 0.0)  # (B, 2)
    n_all = row_n.sum(-1)  # (B,)
    g_has = n_all > 0
    g_ppl = torch.where(g_has, -row_lr.sum(-1) / n_all.clamp(min=1.0), 0.0).sum()
    rho = torch.exp(c).mul_(mf)  # (B, T) rho, 0 off-mask (for the ESS: exact for tiny rho)
    pack = torch.stack(
        [
            sl.sums(gap),
            sl.sums(absl),
            row_lr.sum(0),
            sl.sums(k3),
            sl.sums(e),
            sl.sq_sums(e),
            sl.maxes(gap),
            row_mean.sum(0),
            has.sum(0).to(dt),
            row_n.sum(0),
            torch.stack([g_ppl, g_has.sum().to(dt)]),
            sl.sums(rho),
            sl.sq_sums(rho),
        ]
    )  # (13, 2)
    vals = pack.to(torch.float64).cpu().numpy()
    if np.isnan(vals[1]).any():
        raise ValueError("log-probabilities contain NaN on valid tokens; pass finite log-probs")

    out: dict[str, float] = {}
    cols = {"text": vals[:10, 0], "post_tool": vals[:10, 1]}
    glob = np.concatenate([vals[:6].sum(1), [vals[6].max()], vals[10], [vals[9].sum()]])
    rho_sums = {"text": vals[11:, 0], "post_tool": vals[11:, 1]}  # (sum rho, sum rho^2)
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
            N.CHI2_TOKEN: (2.0 * v[4] + v[5]) / ntok,  # mean((1 + e)^2) - 1
        }
        if label == "all":
            out.update({k: float(x) for k, x in figs.items()})
            continue
        s: N.Slice = "text" if label == "text" else "post_tool"
        out.update({N.sliced(k, s): float(x) for k, x in figs.items()})
        rho_sum, rho2_sum = rho_sums[s]
        out[N.ess(s)] = float(rho_sum * rho_sum / (ntok * rho2_sum)) if rho2_sum > 0 else 0.0
    sk = _sketches_from(absl, m, sl, alpha)
    for s2, sketch in sk.items():
        if sketch.count == 0:
            continue
        qs = sketch.quantiles([TAIL_Q[q] for q in N.QUANTILES])
        for q, val in zip(N.QUANTILES, qs, strict=True):
            out[N.tail(s2, q)] = val
    return out, sk


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
    return analyze(logp_trainer, logp_sampler, mask, post_tool=post_tool, alpha=alpha)[0]


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
    sl = _Slices(m, post_tool, lt.dtype)
    absl = torch.where(m, lt - ls, 0.0).abs_()
    if bool(torch.isnan(absl).any()):
        raise ValueError("log-probabilities contain NaN on valid tokens; pass finite log-probs")
    return _sketches_from(absl, m, sl, alpha)


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
    return payloads(sk)


def payloads(
    sk: dict[N.Slice, LogSketch], ratio: N.Ratio = "mismatch"
) -> dict[str, dict[str, Any]]:
    """``{names.dist(slice, ratio): payload}`` from :func:`analyze`'s or :func:`drift`'s
    sketches (empty omitted)."""
    return {N.dist(s, ratio): v.to_payload() for s, v in sk.items() if v.count > 0}


def drift(
    logp_num: Tensorish,
    logp_den: Tensorish,
    mask: Tensorish | None = None,
    *,
    ratio: N.Ratio,
    post_tool: Tensorish | None = None,
    alpha: float = 0.01,
) -> tuple[dict[str, float], dict[N.Slice, LogSketch]]:
    """Tails, ESS and mean of ``lr = logp_num - logp_den`` per slice, for a ratio family.

    Args:
        logp_num: (B, T) log-probs of the ratio's numerator (pi_theta; pi_new).
        logp_den: (B, T) of its denominator (pi_ref; pi_behaviour).
        mask, post_tool, alpha: as in :func:`summarize`.
        ratio: the family (``ref_drift`` or ``ppo``), which names the figures.

    Returns ``(figures, {slice: LogSketch of |lr|})``. Figures: per slice
    ``names.tail(slice, q, ratio)`` (p50/p95/p99/max of |lr| from the sketch),
    ``names.ess(slice, ratio)`` (``(sum rho)^2 / (N sum rho^2)``, rho = exp(clamped lr)),
    and the family's mean (``names.MEAN_OF[ratio]``: its name and the sign it takes of
    mean(lr)) globally and per slice. Empty slices are omitted, as in :func:`summarize`.
    """
    if ratio not in N.MEAN_OF:
        raise ValueError(f"drift ratio must be one of {', '.join(N.MEAN_OF)}, got {ratio!r}")
    lt, ls, m = prepare(logp_num, logp_den, mask)
    dt = lt.dtype
    sl = _Slices(m, post_tool, dt)
    lr = torch.where(m, lt - ls, 0.0)  # (B, T) log-ratio, 0 off-mask
    absl = lr.abs()  # (B, T)
    rho = torch.exp(lr.clamp(-LOG_CLAMP, LOG_CLAMP)).mul_(m.to(dt))  # (B, T) 0 off-mask
    pack = torch.stack([sl.sums(lr), sl.sums(m.to(dt)), sl.sums(rho), sl.sq_sums(rho)])  # (4, 2)
    vals = pack.to(torch.float64).cpu().numpy()
    if np.isnan(vals).any():
        raise ValueError("log-probabilities contain NaN on valid tokens; pass finite log-probs")
    mean_name, sign = N.MEAN_OF[ratio]
    out: dict[str, float] = {}
    n_all = vals[1].sum()
    if n_all > 0:
        out[mean_name] = float(sign * vals[0].sum() / n_all)
    for i, s in enumerate(N.SLICES):
        lr_sum, ntok, rho_sum, rho2_sum = vals[:, i]
        if ntok <= 0:
            continue
        out[N.sliced(mean_name, s)] = float(sign * lr_sum / ntok)
        out[N.ess(s, ratio)] = float(rho_sum * rho_sum / (ntok * rho2_sum)) if rho2_sum > 0 else 0.0
    sk = _sketches_from(absl, m, sl, alpha)
    for s2, sketch in sk.items():
        if sketch.count == 0:
            continue
        qs = sketch.quantiles([TAIL_Q[q] for q in N.QUANTILES])
        for q, val in zip(N.QUANTILES, qs, strict=True):
            out[N.tail(s2, q, ratio)] = val
    return out, sk


def _sketches_from(
    absl: torch.Tensor, m: torch.Tensor, sl: _Slices, alpha: float
) -> dict[N.Slice, LogSketch]:
    """Both slices' sketches of the valid tokens' |log-ratio|, from one bucket-index pass
    and one bincount (the slice label offsets the post-tool buckets by one sketch size)."""
    text, post = LogSketch(alpha=alpha), LogSketch(alpha=alpha)
    size = text.max_index + 1
    seg = sl.segment().expand(m.shape)[m]  # (N,) 0 text, 1 post-tool
    k = text.bucket_index(absl[m]) + (seg * size).to(torch.int64)  # (N,) storage index
    counts = bincount(k, 2 * size).reshape(2, size)
    text.add_counts(np.trim_zeros(counts[0], "b"))
    post.add_counts(np.trim_zeros(counts[1], "b"))
    return {"text": text, "post_tool": post}


def by_turn(
    logp_trainer: Tensorish,
    logp_sampler: Tensorish,
    mask: Tensorish | None,
    turn: Tensorish,
) -> dict[str, float]:
    """The gap per interaction index: mean |p_trainer - p_sampler| and mean |log-ratio| over
    the valid tokens of rows in each bucket of ``names.TURN_BUCKETS``.

    Args:
        logp_trainer, logp_sampler, mask: (B, T) as in :func:`summarize`.
        turn: (B,) int, each row's 1-based interaction index in its trajectory.

    Returns ``{names.by_turn(figure, bucket): value}``; a bucket with no valid token is
    omitted.
    """
    lt, ls, m = prepare(logp_trainer, logp_sampler, mask)
    t = torch.as_tensor(turn, device=lt.device).to(torch.int64)  # (B,)
    if tuple(t.shape) != (m.shape[0],):
        raise ValueError(f"turn must be (B,) = ({m.shape[0]},), got {tuple(t.shape)}")
    n_b = len(N.TURN_BUCKETS)
    bucket = (t.clamp(1, n_b) - 1).to(lt.device)  # (B,) 0 .. n_b - 1
    mf = m.to(lt.dtype)
    gap = (torch.exp(lt) - torch.exp(ls)).abs() * mf  # (B, T)
    absl = (lt - ls).abs() * mf
    sums = torch.zeros((3, n_b), dtype=torch.float64, device=lt.device)
    per_row = torch.stack([gap.sum(-1), absl.sum(-1), mf.sum(-1)]).to(torch.float64)  # (3, B)
    sums.index_add_(1, bucket, per_row)
    vals = sums.cpu().numpy()
    out: dict[str, float] = {}
    for i, b in enumerate(N.TURN_BUCKETS):
        n = vals[2, i]
        if n > 0:
            out[N.by_turn(N.PROBS_DIFF_MEAN, b)] = float(vals[0, i] / n)
            out[N.by_turn(N.ABS_LOG_RATIO_MEAN, b)] = float(vals[1, i] / n)
    return out
