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

Length: the math is ``weigh`` and ``weight_metrics`` (~150 lines); the rest is the
``Strategy`` fields' validation and fifteen registered factories, each a docstring and one
``Strategy(...)`` line, kept beside the math they configure.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from gapwatch.correction import names as N
from gapwatch.correction.inputs import Tensorish, prepare

__all__ = [
    "Strategy",
    "factory",
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
        w = weigh(self, lt, ls, m)
        return w.weights, weight_metrics(self, w, m)


@dataclass(frozen=True)
class Weighting:
    """What :func:`weigh` computed: the weights and what the metrics need to explain them."""

    weights: torch.Tensor
    """(B, T) detached; 0 off-mask and on every masked, rejected or vetoed token."""
    raw: torch.Tensor
    """Raw ratio at the strategy's level before truncation/masking: (B, T) for token (and
    none), (B, 1) for sequence and geometric (one ratio per row)."""
    kept: torch.Tensor
    """(B, T) bool: valid and not masked, rejected or vetoed."""
    vetoed: torch.Tensor | None
    """(B,) bool rows rejected by the veto, or None (veto off)."""


def weigh(s: Strategy, lt: torch.Tensor, ls: torch.Tensor, m: torch.Tensor) -> Weighting:
    """The strategy's weights from (B, T) log-probs and a (B, T) bool mask."""
    lr = torch.where(m, lt - ls, 0.0)  # (B, T) log_rho, 0 off-mask
    cnt = m.sum(-1).to(lr.dtype)  # (B,) valid tokens per row
    if s.level in ("sequence", "geometric") or s.rs_stat is not None:
        lr = lr.clamp(-_GUARD, _GUARD)  # finite row sums for any finite input

    if s.level in ("sequence", "geometric"):
        srow = lr.sum(-1, keepdim=True)  # (B, 1)
        if s.level == "geometric":
            srow = srow / cnt.clamp(min=1.0).unsqueeze(-1)
        raw = torch.exp(srow.clamp(-LOG_CLAMP, LOG_CLAMP))  # (B, 1)
    else:
        raw = torch.exp(lr.clamp(-LOG_CLAMP, LOG_CLAMP))  # (B, T)

    keep = m  # (B, T) bool, narrowed by the band, the rejection and the veto
    if s.level == "none":
        w = torch.ones_like(raw)
    elif s.mode == "truncate":
        assert s.C is not None
        w = raw.clamp(max=s.C)
    else:
        assert s.lo is not None and s.hi is not None
        w = raw
        keep = keep & (raw >= s.lo) & (raw <= s.hi)
    if s.rs_stat is not None:
        keep = keep & _reject_rows(s, lr, cnt).unsqueeze(-1)
    vetoed = None
    if s.veto is not None:
        vetoed = ((lr < math.log(s.veto)) & m).any(-1)  # (B,)
        keep = keep & ~vetoed.unsqueeze(-1)
    weights = torch.where(keep, w, 0.0).detach()  # (B, T)
    return Weighting(weights=weights, raw=raw, kept=keep, vetoed=vetoed)


def weight_metrics(s: Strategy, w: Weighting, m: torch.Tensor) -> dict[str, float]:
    """The ``rollout_corr/*`` figures of a :class:`Weighting` over the valid tokens of ``m``.

    Token fractions are over valid tokens, sequence fractions over rows with a valid
    token. With no valid token at all the fractions are 0 and every other figure NaN.
    """
    has = m.any(-1)  # (B,) rows with a valid token
    n_tok, n_rows = int(m.sum()), max(int(has.sum()), 1)
    n = max(n_tok, 1)
    raw = w.raw.expand(m.shape)[m]  # (N,) raw ratio of each valid token
    weights = w.weights[m]  # (N,)
    masked = m & ~w.kept  # (B, T) valid tokens whose weight was forced to 0
    if s.level == "none":
        high = low = 0
    elif s.mode == "truncate":
        assert s.C is not None
        high, low = int((raw > s.C).sum()), int((raw < 1.0 / s.C).sum())
    else:
        assert s.lo is not None and s.hi is not None
        high, low = int((raw > s.hi).sum()), int((raw < s.lo).sum())
    wsum, w2sum = float(weights.sum()), float(torch.dot(weights, weights))
    masked_frac = int(masked.sum()) / n
    return {
        N.IS_MEAN: _stat(weights, torch.mean),
        N.IS_STD: _stat(weights, lambda t: t.var(correction=0).sqrt()),
        N.IS_MIN: _stat(weights, torch.amin),
        N.IS_MAX: _stat(weights, torch.amax),
        # ESS = 1 / mean(n^2), n = w / mean(w)  ==  (sum w)^2 / (N sum w^2)
        N.IS_ESS: wsum * wsum / max(n * w2sum, _TINY) if n_tok else math.nan,
        N.IS_RATIO_FRACTION_HIGH: high / n,
        N.IS_RATIO_FRACTION_LOW: low / n,
        N.MASKED_FRACTION: masked_frac,
        N.RS_MASKED_FRACTION: masked_frac,  # verl's name for the same figure
        N.RS_SEQ_MASKED_FRACTION: int((masked.any(-1) & has).sum()) / n_rows,
        N.IS_VETO_FRACTION: 0.0 if w.vetoed is None else int((w.vetoed & has).sum()) / n_rows,
        N.RAW_RATIO_MIN: _stat(raw, torch.amin),
        N.RAW_RATIO_MEAN: _stat(raw, torch.mean),
        N.RAW_RATIO_MAX: _stat(raw, torch.amax),
    }


_TINY = float(torch.finfo(torch.float32).tiny)


def _stat(values: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> float:
    """``fn`` of a 1-D tensor as a float; NaN for an empty one."""
    return float(fn(values)) if values.numel() else math.nan


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


def factory(name: str) -> Factory:
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown correction strategy {name!r}; valid: {', '.join(names())}")
    return _REGISTRY[name]


def params(name: str) -> dict[str, Any]:
    """The keyword thresholds of strategy ``name`` with their defaults."""
    sig = inspect.signature(factory(name))
    return {p.name: p.default for p in sig.parameters.values()}


def get(name: str, **kwargs: Any) -> Strategy:
    """Build strategy ``name`` with keyword thresholds; bad name/keyword/value -> ValueError."""
    fn = factory(name)
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
