"""Drift diagnostics in a real short run: the policy against the frozen reference
(``ref_drift``) and the PPO ratio over the update (``ppo``), per slice, beside the
trainer-vs-sampler mismatch; and proof that measuring them does not change the training."""

from __future__ import annotations

import math
from typing import Any

from gapwatch.correction import names as N
from gapwatch.workers import train
from gapwatch.workers.config import QUICK_CODEC

from .conftest import small

FAMILIES = ("ref_drift", "ppo")


def run(**over: Any) -> list[Any]:
    return list(train(small(**over)))


def family_names(ratio: N.Ratio) -> set[str]:
    mean = N.MEAN_OF[ratio][0]
    out = {mean}
    for s in N.SLICES:
        out |= {N.tail(s, q, ratio) for q in N.QUANTILES}
        out |= {N.ess(s, ratio), N.sliced(mean, s)}
    return out


def test_drift_figures_present_finite_and_zero_before_any_update() -> None:
    steps = run(compression=QUICK_CODEC[0], compression_kwargs=QUICK_CODEC[1])
    for res in steps:
        for ratio in FAMILIES:
            got = family_names(ratio)
            assert got <= set(res.metrics), (res.step, sorted(got - set(res.metrics)))
            assert all(math.isfinite(res.metrics[n]) for n in got), res.step
            assert {N.dist(s, ratio) for s in N.SLICES} <= set(res.distributions)
        for s in N.SLICES:
            for ratio in N.RATIOS:
                assert 0 < res.metrics[N.ess(s, ratio)] <= 1 + 1e-9
    m1, m3 = steps[0].metrics, steps[-1].metrics
    # step 1: the policy IS the reference (same weights, same compressed forward)
    for s in N.SLICES:
        assert m1[N.tail(s, "max", "ref_drift")] == 0.0
        assert m1[N.ess(s, "ref_drift")] == 1.0
        # after two updates it has moved, on both slices
        assert m3[N.tail(s, "max", "ref_drift")] > 0.0
        assert m3[N.ess(s, "ref_drift")] < 1.0
    # the slices are measured apart: their tails differ
    assert m3[N.tail("post_tool", "p95", "ref_drift")] != m3[N.tail("text", "p95", "ref_drift")]
    # compressed, ratio against the sampler's log-probs: the PPO ratio's first minibatch
    # carries the whole gap, so its tails are of the mismatch's size, not the drift's
    for s in N.SLICES:
        assert m1[N.tail(s, "p95", "ppo")] > 10 * m1[N.tail(s, "p95", "ref_drift")]
        assert m1[N.tail(s, "max", "ppo")] >= 0.5 * m1[N.tail(s, "max")]


def test_a_diagnostics_only_reference_changes_nothing_in_the_training() -> None:
    """With the KL anchor off, keeping a reference only adds figures: every other figure
    of every step is identical with and without it (no RNG draw, no loss term)."""
    on = run(kl_coef=0.0, drift_reference=True, steps=2)
    off = run(kl_coef=0.0, drift_reference=False, steps=2)
    drift = family_names("ref_drift")
    for a, b in zip(on, off, strict=True):
        assert drift <= set(a.metrics) and not drift & set(b.metrics)
        assert N.KL_TO_REF not in a.metrics  # no anchor in the loss
        timing = {N.STEP_TIME, N.TOKENS_PER_S}
        assert {k: v for k, v in a.metrics.items() if k not in drift | timing} == {
            k: v for k, v in b.metrics.items() if k not in timing
        }
        assert {N.dist(s, "ref_drift") for s in N.SLICES} <= set(a.distributions)
        assert not any(k.startswith("dist/ref_drift/") for k in b.distributions)
