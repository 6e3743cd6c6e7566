"""Correction strategies for the train-inference gap: one registry of named factories.

What it is: every strategy weights (or masks) each token by the importance ratio
``rho = pi_trainer / pi_sampler``, ``log_rho = logp_trainer - logp_sampler``. Two axes
compose instead of a list of presets:

- **level**: ``token`` (rho per token), ``sequence`` (exp of the sum of log_rho over the
  row's valid tokens, broadcast to them), ``geometric`` (exp of the mean), or ``none``
  (weight 1: only rejection/veto act);
- **mode**: ``truncate`` (``w <- min(w, C)``) or ``mask`` (``w <- w if lo <= w <= hi
  else 0``);

plus an optional **veto** (reject a whole sequence if any token ratio is below the
threshold; 1e-4 is the usual value, verl's ``rollout_token_veto_threshold``) and an
optional **rejection by a per-sequence statistic** (``k1 = -log rho``, ``k2 = 0.5 (log
rho)^2``, ``k3 = rho - 1 - log rho``; ``sum`` or ``mean`` over the row's valid tokens).
For k1 the bounds are *ratio* bounds (accept iff ``lo <= exp(-S) <= hi``, i.e. the
sequence or geometric ratio lies in [lo, hi], verl's ``seq_sum_k1`` / ``seq_mean_k1``
with a ``"lo_hi"`` threshold); for k2/k3 they bound the statistic itself (accept iff
``lo <= S <= hi``; usually only ``hi``). Exponents are clamped to +-20 before ``exp``.

Registered names (``names()``): the published aliases ``tis``, ``icepop``, ``seq_tis``,
``seq_mis``, ``geo_rs``, ``k3_rs``, ``none``; the generic composed forms
``token_truncate``, ``token_mask``, ``sequence_truncate``, ``sequence_mask``,
``geometric_truncate``, ``geometric_mask``, ``seq_reject``; and ``compose`` with every
knob. Each factory's keywords and meaning are in its docstring; ``params(name)`` gives
them with defaults (for YAML validation and Tune search spaces).

Call::

    fn = strategies.get("tis", C=2.0)        # a picklable Strategy
    weights, metrics = fn(logp_trainer, logp_sampler, mask)   # (B, T) x3 -> (B, T), dict

Weights are detached, 0 on invalid tokens. Metrics (names from ``correction.names``):
weight mean/std/min/max and ESS over valid tokens, fraction of raw ratios above/below
the thresholds, token and sequence masked fractions, veto fraction, raw ratio
min/mean/max. Omits: distributed aggregation, config objects, I/O.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from correction import names as N

__all__ = [
    "Strategy",
    "get",
    "names",
    "params",
    "register",
    "LOG_CLAMP",
    "VETO_DEFAULT",
]

LOG_CLAMP = 20.0
"""Exponents are clamped to [-LOG_CLAMP, LOG_CLAMP] before ``exp`` (verl's SAFETY_BOUND)."""
VETO_DEFAULT = 1e-4
"""The usual veto threshold (pass ``veto=VETO_DEFAULT`` to enable it)."""
_GUARD = 1e4  # per-token |log_rho| guard so row sums of finite inputs stay finite in float32

Level = Literal["token", "sequence", "geometric", "none"]
Mode = Literal["truncate", "mask"]
Stat = Literal["k1", "k2", "k3"]
Agg = Literal["sum", "mean"]
Tensorish = torch.Tensor | np.ndarray

_LEVELS = ("token", "sequence", "geometric", "none")
_MODES = ("truncate", "mask")
_STATS = ("k1", "k2", "k3")
_AGGS = ("sum", "mean")


# --- the one composed strategy ---------------------------------------------------------
@dataclass(frozen=True)
class Strategy:
    """A correction strategy: call it with ``(logp_trainer, logp_sampler, mask)``.

    Built by :func:`get`; every field is validated in ``__post_init__``.
    """

    name: str
    """Registry name it was built from (for display)."""
    level: Level = "token"
    """token | sequence | geometric | none (weight 1)."""
    mode: Mode = "truncate"
    """truncate (min(w, C)) | mask (0 outside [lo, hi]); ignored for level none."""
    C: float | None = None
    """Truncation cap (> 0, inf allowed); required for mode truncate."""
    lo: float | None = None
    """Mask lower bound on the ratio (>= 0); mode mask."""
    hi: float | None = None
    """Mask upper bound on the ratio (>= lo); mode mask."""
    rs_stat: Stat | None = None
    """Per-sequence rejection statistic k1 | k2 | k3, or None (no rejection)."""
    rs_agg: Agg = "sum"
    """How the statistic aggregates over a row's valid tokens: sum | mean."""
    rs_lo: float | None = None
    """Lower rejection bound (k1: on the ratio exp(-S); k2/k3: on S), None = unbounded."""
    rs_hi: float | None = None
    """Upper rejection bound (same meaning as rs_lo), None = unbounded."""
    veto: float | None = None
    """Reject a sequence with any token ratio below this (in (0, 1)), None = off."""

    def __post_init__(self) -> None:
        _check_choice("level", self.level, _LEVELS)
        _check_choice("mode", self.mode, _MODES)
        for f in ("C", "lo", "hi", "rs_lo", "rs_hi", "veto"):
            v = getattr(self, f)
            if v is not None:
                object.__setattr__(self, f, _number(self.name, f, v))
        truncating = self.level != "none" and self.mode == "truncate"
        if truncating and (self.C is None or not self.C > 0):
            raise ValueError(f"{self.name}: C must be > 0 (inf allowed), got {self.C!r}")
        masking = self.level != "none" and self.mode == "mask"
        if masking and (self.lo is None or self.hi is None or not 0 <= self.lo <= self.hi):
            raise ValueError(
                f"{self.name}: mask mode needs 0 <= lo <= hi, got lo={self.lo!r} hi={self.hi!r}"
            )
        if self.rs_stat is not None:
            _check_choice("rs_stat", self.rs_stat, _STATS)
            _check_choice("rs_agg", self.rs_agg, _AGGS)
            if self.rs_lo is None and self.rs_hi is None:
                raise ValueError(f"{self.name}: rejection by {self.rs_stat} needs rs_lo or rs_hi")
            if self.rs_lo is not None and self.rs_hi is not None and self.rs_lo > self.rs_hi:
                raise ValueError(f"{self.name}: rs_lo {self.rs_lo} > rs_hi {self.rs_hi}")
            if self.rs_stat == "k1" and self.rs_lo is not None and self.rs_lo < 0:
                raise ValueError(f"{self.name}: k1 bounds are ratio bounds, must be >= 0")
        if self.veto is not None and not 0 < self.veto < 1:
            raise ValueError(f"{self.name}: veto threshold must lie in (0, 1), got {self.veto}")

    def __call__(
        self,
        logp_trainer: Tensorish,
        logp_sampler: Tensorish,
        mask: Tensorish | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Weights (B, T) detached (0 off-mask) and metrics, from (B, T) log-probs and mask."""
        lt, ls, m = prepare(logp_trainer, logp_sampler, mask)
        return _apply(self, lt, ls, m)


def prepare(
    logp_trainer: Tensorish, logp_sampler: Tensorish, mask: Tensorish | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Check and convert inputs: two (B, T) float tensors (same device) and a (B, T) bool mask.

    numpy arrays are wrapped without a copy; half/bfloat16 are upcast to float32; tensors
    are detached. ``mask=None`` means every token is valid.
    """
    lt = _tensor("logp_trainer", logp_trainer)
    ls = _tensor("logp_sampler", logp_sampler)
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
        m = torch.ones(lt.shape, dtype=torch.bool, device=lt.device)
    else:
        m = mask.detach() if isinstance(mask, torch.Tensor) else torch.from_numpy(np.asarray(mask))
        if tuple(m.shape) != tuple(lt.shape):
            raise ValueError(f"mask must be (B, T) = {tuple(lt.shape)}, got {tuple(m.shape)}")
        m = m.to(device=lt.device, dtype=torch.bool) if m.dtype != torch.bool else m.to(lt.device)
    return lt, ls, m


def _apply(
    s: Strategy, lt: torch.Tensor, ls: torch.Tensor, m: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """The composed strategy. Off-mask lr is 0, so the raw token ratio there is exactly 1:
    counts over all tokens are corrected by the number of invalid tokens instead of
    masking every intermediate (fewer passes over the (B, T) data)."""
    dt, dev = lt.dtype, lt.device
    lr = torch.where(m, lt - ls, 0.0)  # (B, T) log_rho, 0 off-mask
    cnt = m.sum(-1).to(dt)  # (B,) valid tokens per row
    n_tok = int(cnt.sum().item())
    n_inv = m.numel() - n_tok  # invalid tokens (raw ratio 1 there)
    has = cnt > 0  # (B,) rows with a valid token
    n_rows = int(has.sum().item())
    zero = torch.zeros((), dtype=dt, device=dev)
    row_level = s.level in ("sequence", "geometric")
    if row_level or s.rs_stat is not None:
        lr = lr.clamp_(-_GUARD, _GUARD)  # finite row sums for any finite input

    # Raw ratio at the strategy's level: (B, T) for token/none, (B, 1) for row levels.
    if row_level:
        srow = lr.sum(-1, keepdim=True)  # (B, 1)
        if s.level == "geometric":
            srow = srow / cnt.clamp(min=1.0).unsqueeze(-1)
        raw = torch.exp(srow.clamp_(-LOG_CLAMP, LOG_CLAMP))  # (B, 1)
    else:
        raw = torch.exp(lr.clamp(-LOG_CLAMP, LOG_CLAMP))  # (B, T), 1 off-mask

    def count_valid(flag: torch.Tensor, off_mask_value: bool) -> torch.Tensor:
        """Valid tokens where ``flag`` holds; ``flag`` (B, T) or (B, 1) over raw."""
        if flag.shape[-1] == 1:
            return (flag.squeeze(-1).to(dt) * cnt).sum()
        return torch.count_nonzero(flag).to(dt) - (n_inv if off_mask_value else 0)

    keep: torch.Tensor | None = None  # (B, T) or (B, 1) bool, False = masked by the band
    high = low = zero
    if s.level == "none":
        w: torch.Tensor | float = 1.0
    elif s.mode == "truncate":
        assert s.C is not None
        w = raw.clamp(max=s.C)
        high = count_valid(raw > s.C, s.C < 1.0)
        low = count_valid(raw < 1.0 / s.C, 1.0 / s.C > 1.0)
    else:
        assert s.lo is not None and s.hi is not None
        hi_f, lo_f = raw > s.hi, raw < s.lo
        high, low = count_valid(hi_f, s.hi < 1.0), count_valid(lo_f, s.lo > 1.0)
        keep = ~(hi_f | lo_f)
        w = raw

    row_keep: torch.Tensor | None = None  # (B,) bool
    vetoed: torch.Tensor | None = None
    if s.rs_stat is not None:
        row_keep = _reject_rows(s, lr, cnt)
    if s.veto is not None:
        vetoed = ((lr < math.log(s.veto)) & m).any(-1)  # (B,)
        row_keep = ~vetoed if row_keep is None else row_keep & ~vetoed
    if row_keep is not None:
        rk = row_keep.unsqueeze(-1)  # (B, 1)
        keep = rk if keep is None else keep & rk

    keep_tok = m if keep is None else keep & m  # (B, T) valid and not masked
    # (B, T), 0 off-mask and where masked
    weights = keep_tok.to(dt) if isinstance(w, float) else torch.where(keep_tok, w, 0.0)
    weights = weights.detach()

    # --- metrics (one host transfer at the end) --------------------------------------
    n = max(n_tok, 1)
    if keep is None:
        n_masked, seq_masked = zero, zero
    else:
        masked_tok = m & ~keep_tok  # (B, T)
        n_masked = masked_tok.sum().to(dt)
        seq_masked = (masked_tok.any(-1) & has).sum().to(dt)
    flat = weights.reshape(-1)
    wsum = flat.sum()
    w2sum = torch.dot(flat, flat)
    mean = wsum / n
    var = (w2sum / n - mean * mean).clamp(min=0.0)
    if raw.shape[-1] == 1:
        rawb = raw.squeeze(-1)  # (B,)
        raw_min = torch.where(has, rawb, math.inf).amin()
        raw_max = torch.where(has, rawb, -math.inf).amax()
        raw_mean = (rawb * cnt).sum() / n
    else:
        raw_min, raw_max = raw.aminmax()  # off-mask raw is exactly 1 ...
        if n_inv and not (raw_min.item() < 1.0 < raw_max.item()):  # ... so only then recheck
            raw_min = torch.where(m, raw, math.inf).amin()
            raw_max = torch.where(m, raw, -math.inf).amax()
        raw_mean = (raw.sum() - n_inv) / n
    wmax = weights.amax()  # weights >= 0 and 0 off-mask: the max over valid tokens
    # min over valid weights: 0 if any valid token was masked, else the (capped) raw min
    if s.level == "none":
        wmin = torch.ones((), dtype=dt, device=dev)
    else:
        wmin = raw_min.clamp(max=s.C) if s.mode == "truncate" and s.C is not None else raw_min
    if keep is not None:
        wmin = torch.where(n_masked > 0, zero, wmin)
    # ESS = 1 / mean(n^2), n = w / mean(w)  ==  (sum w)^2 / (N sum w^2)
    ess = wsum * wsum / (n * w2sum).clamp(min=torch.finfo(dt).tiny)
    veto_frac = zero if vetoed is None else (vetoed & has).sum().to(dt) / max(n_rows, 1)
    masked_frac = n_masked / n
    vals = torch.stack(
        [
            mean,
            var.sqrt(),
            wmin,
            wmax,
            ess,
            high / n,
            low / n,
            masked_frac,
            masked_frac,
            seq_masked / max(n_rows, 1),
            veto_frac,
            raw_min,
            raw_mean,
            raw_max,
        ]
    ).tolist()
    keys = (
        N.IS_MEAN,
        N.IS_STD,
        N.IS_MIN,
        N.IS_MAX,
        N.IS_ESS,
        N.IS_RATIO_FRACTION_HIGH,
        N.IS_RATIO_FRACTION_LOW,
        N.MASKED_FRACTION,
        N.RS_MASKED_FRACTION,
        N.RS_SEQ_MASKED_FRACTION,
        N.IS_VETO_FRACTION,
        N.RAW_RATIO_MIN,
        N.RAW_RATIO_MEAN,
        N.RAW_RATIO_MAX,
    )
    metrics = dict(zip(keys, (float(v) for v in vals), strict=True))
    if n_tok == 0:  # nothing valid: only the (all-zero) fractions mean anything
        for k in (N.IS_MEAN, N.IS_STD, N.IS_MIN, N.IS_MAX, N.IS_ESS):
            metrics[k] = math.nan
        for k in (N.RAW_RATIO_MIN, N.RAW_RATIO_MEAN, N.RAW_RATIO_MAX):
            metrics[k] = math.nan
    return weights, metrics


def _reject_rows(s: Strategy, lr: torch.Tensor, cnt: torch.Tensor) -> torch.Tensor:
    """(B,) True where the row's statistic lies within the bounds (lr is 0 off-mask)."""
    if s.rs_stat == "k1":
        per = -lr  # (B, T); 0 off-mask
    elif s.rs_stat == "k2":
        per = 0.5 * lr * lr
    else:
        c = lr.clamp(-LOG_CLAMP, LOG_CLAMP)
        per = torch.exp(c) - 1.0 - c  # k3(0) = 0 off-mask
    stat = per.sum(-1)  # (B,)
    if s.rs_agg == "mean":
        stat = stat / cnt.clamp(min=1.0)
    ok = torch.ones_like(cnt, dtype=torch.bool)
    if s.rs_stat == "k1":  # ratio bounds: lo <= exp(-S) <= hi  <=>  log lo <= -S <= log hi
        if s.rs_lo is not None:
            ok &= -stat >= (math.log(s.rs_lo) if s.rs_lo > 0 else -math.inf)
        if s.rs_hi is not None:
            ok &= -stat <= (math.log(s.rs_hi) if s.rs_hi > 0 else -math.inf)
    else:
        if s.rs_lo is not None:
            ok &= stat >= s.rs_lo
        if s.rs_hi is not None:
            ok &= stat <= s.rs_hi
    return ok


# --- registry ----------------------------------------------------------------------------
Factory = Callable[..., Strategy]
_REGISTRY: dict[str, Factory] = {}


def register(name: str) -> Callable[[Factory], Factory]:
    """Register a strategy factory under ``name``; a name registered twice is rejected.

    The factory takes keyword-only thresholds with defaults and returns a Strategy.
    """

    def deco(fn: Factory) -> Factory:
        if name in _REGISTRY:
            raise ValueError(f"correction strategy {name!r} is already registered")
        sig = inspect.signature(fn)
        for p in sig.parameters.values():
            if p.kind is not inspect.Parameter.KEYWORD_ONLY or p.default is inspect.Parameter.empty:
                raise ValueError(
                    f"strategy factory {name!r}: parameter {p.name!r} must be keyword-only "
                    "with a default"
                )
        _REGISTRY[name] = fn
        return fn

    return deco


def names() -> list[str]:
    """Every registered strategy name, sorted."""
    return sorted(_REGISTRY)


def _factory(name: str) -> Factory:
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown correction strategy {name!r}; valid: {', '.join(names())}")
    return _REGISTRY[name]


def params(name: str) -> dict[str, Any]:
    """The keyword thresholds of strategy ``name`` with their defaults."""
    sig = inspect.signature(_factory(name))
    return {p.name: p.default for p in sig.parameters.values()}


def get(name: str, **kwargs: Any) -> Strategy:
    """Build strategy ``name`` with keyword thresholds; bad name/keyword/value -> ValueError."""
    fn = _factory(name)
    accepted = params(name)
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        valid = ", ".join(accepted) if accepted else "(none)"
        raise ValueError(
            f"strategy {name!r} got unknown keyword(s) {', '.join(unknown)}; accepted: {valid}"
        )
    return fn(**kwargs)


# --- the registered strategies -----------------------------------------------------------
@register("none")
def none_() -> Strategy:
    """No correction: weight 1 on every valid token (metrics still report the raw ratio)."""
    return Strategy("none", level="none")


@register("tis")
def tis(*, C: float = 2.0, veto: float | None = None) -> Strategy:
    """Truncated IS per token (Yao et al.): ``w = min(rho, C)``.

    Keywords: ``C`` cap (default 2.0); ``veto`` reject a sequence with any token ratio
    below it (default None = off; 1e-4 usual).
    """
    return Strategy("tis", level="token", mode="truncate", C=C, veto=veto)


@register("icepop")
def icepop(*, lo: float = 0.5, hi: float = 5.0, veto: float | None = None) -> Strategy:
    """IcePop (Ring-1T): token ratio kept if ``lo <= rho <= hi``, else 0.

    Keywords: ``lo`` (0.5), ``hi`` (5.0) ratio band; ``veto`` as in ``tis``.
    """
    return Strategy("icepop", level="token", mode="mask", lo=lo, hi=hi, veto=veto)


@register("seq_tis")
def seq_tis(*, C: float = 2.0, veto: float | None = None) -> Strategy:
    """Sequence truncated IS: ``w = min(prod rho, C)`` on every token of the row.

    Keywords: ``C`` cap (2.0); ``veto`` as in ``tis``.
    """
    return Strategy("seq_tis", level="sequence", mode="truncate", C=C, veto=veto)


@register("seq_mis")
def seq_mis(
    *, C: float = 2.0, lo: float = 0.5, hi: float = 2.0, veto: float | None = None
) -> Strategy:
    """Sequence IS ``min(prod rho, C)`` with rejection of rows whose sum-k1 ratio leaves [lo, hi].

    ("When speed kills stability".) A row is rejected (weight 0) unless
    ``lo <= exp(sum log rho) <= hi``. Keywords: ``C`` (2.0), ``lo`` (0.5), ``hi`` (2.0),
    ``veto`` as in ``tis``.
    """
    return Strategy(
        "seq_mis", level="sequence", mode="truncate", C=C, rs_stat="k1", rs_agg="sum",
        rs_lo=lo, rs_hi=hi, veto=veto,
    )  # fmt: skip


@register("geo_rs")
def geo_rs(*, lo: float = 0.999, hi: float = 1.001, veto: float | None = None) -> Strategy:
    """Geometric rejection: keep a row (weight 1) iff ``lo <= (prod rho)^(1/T) <= hi``.

    T is the row's valid-token count (mean-k1 rejection). Keywords: ``lo`` (0.999),
    ``hi`` (1.001), ``veto`` as in ``tis``.
    """
    return Strategy(
        "geo_rs", level="none", rs_stat="k1", rs_agg="mean", rs_lo=lo, rs_hi=hi, veto=veto
    )


@register("k3_rs")
def k3_rs(*, hi: float = 0.01, veto: float | None = None) -> Strategy:
    """k3 rejection: keep a row (weight 1) iff mean over its tokens of ``rho - 1 - log rho <= hi``.

    Keywords: ``hi`` (0.01), ``veto`` as in ``tis``.
    """
    return Strategy("k3_rs", level="none", rs_stat="k3", rs_agg="mean", rs_hi=hi, veto=veto)


@register("token_truncate")
def token_truncate(*, C: float = 2.0, veto: float | None = None) -> Strategy:
    """Generic token level x truncate: ``w = min(rho, C)``. Keywords: ``C``, ``veto``."""
    return Strategy("token_truncate", level="token", mode="truncate", C=C, veto=veto)


@register("token_mask")
def token_mask(*, lo: float = 0.5, hi: float = 2.0, veto: float | None = None) -> Strategy:
    """Generic token level x mask: ``w = rho if lo <= rho <= hi else 0``. Keywords: lo, hi, veto."""
    return Strategy("token_mask", level="token", mode="mask", lo=lo, hi=hi, veto=veto)


@register("sequence_truncate")
def sequence_truncate(*, C: float = 2.0, veto: float | None = None) -> Strategy:
    """Generic sequence level x truncate: ``w = min(prod rho, C)``. Keywords: ``C``, ``veto``."""
    return Strategy("sequence_truncate", level="sequence", mode="truncate", C=C, veto=veto)


@register("sequence_mask")
def sequence_mask(*, lo: float = 0.5, hi: float = 2.0, veto: float | None = None) -> Strategy:
    """Generic sequence level x mask: ``w = prod rho`` if in [lo, hi] else 0. Keywords: lo, hi, veto."""
    return Strategy("sequence_mask", level="sequence", mode="mask", lo=lo, hi=hi, veto=veto)


@register("geometric_truncate")
def geometric_truncate(*, C: float = 2.0, veto: float | None = None) -> Strategy:
    """Generic geometric level x truncate: ``w = min((prod rho)^(1/T), C)``. Keywords: C, veto."""
    return Strategy("geometric_truncate", level="geometric", mode="truncate", C=C, veto=veto)


@register("geometric_mask")
def geometric_mask(*, lo: float = 0.999, hi: float = 1.001, veto: float | None = None) -> Strategy:
    """Generic geometric level x mask: ``w = g`` if ``lo <= g <= hi`` else 0, ``g = (prod rho)^(1/T)``.

    Keywords: ``lo``, ``hi``, ``veto``.
    """
    return Strategy("geometric_mask", level="geometric", mode="mask", lo=lo, hi=hi, veto=veto)


@register("seq_reject")
def seq_reject(
    *,
    stat: str = "k1",
    agg: str = "sum",
    lo: float | None = 0.5,
    hi: float | None = 2.0,
    veto: float | None = None,
) -> Strategy:
    """Generic per-sequence rejection, weight 1 on kept rows.

    Keywords: ``stat`` k1 | k2 | k3; ``agg`` sum | mean over the row's valid tokens;
    ``lo``/``hi`` bounds (k1: ratio bounds on exp(-S); k2/k3: bounds on S; None =
    unbounded); ``veto`` as in ``tis``.
    """
    return Strategy(
        "seq_reject", level="none", rs_stat=stat, rs_agg=agg, rs_lo=lo, rs_hi=hi, veto=veto,  # type: ignore[arg-type]
    )  # fmt: skip


@register("compose")
def compose(
    *,
    level: str = "token",
    mode: str = "truncate",
    C: float | None = 2.0,
    lo: float | None = None,
    hi: float | None = None,
    rs_stat: str | None = None,
    rs_agg: str = "sum",
    rs_lo: float | None = None,
    rs_hi: float | None = None,
    veto: float | None = None,
) -> Strategy:
    """Every knob: ``level`` x ``mode`` IS, then rejection and veto (see the module docstring).

    Keywords: ``level`` token | sequence | geometric | none; ``mode`` truncate | mask;
    ``C`` cap (truncate); ``lo``/``hi`` ratio band (mask); ``rs_stat`` None | k1 | k2 |
    k3; ``rs_agg`` sum | mean; ``rs_lo``/``rs_hi`` rejection bounds; ``veto``.
    """
    return Strategy(
        "compose", level=level, mode=mode, C=C, lo=lo, hi=hi, rs_stat=rs_stat,  # type: ignore[arg-type]
        rs_agg=rs_agg, rs_lo=rs_lo, rs_hi=rs_hi, veto=veto,  # type: ignore[arg-type]
    )  # fmt: skip


# --- helpers -----------------------------------------------------------------------------
def _check_choice(field: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{field} must be one of {', '.join(choices)}; got {value!r}")


def _number(name: str, field: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or math.isnan(float(v)):
        raise ValueError(f"{name}: {field} must be a number or None, got {v!r}")
    return float(v)


def _tensor(label: str, x: Tensorish) -> torch.Tensor:
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
