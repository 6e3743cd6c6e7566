"""Hypothesis properties of strategies, diagnostics and the sketch (modest example counts)."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gapwatch.correction import diagnostics, strategies
from gapwatch.correction import names as N
from gapwatch.correction.sketch import LogSketch

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALL = strategies.names()

shapes = st.tuples(st.integers(1, 4), st.integers(1, 6))


@st.composite
def batches(draw: st.DrawFn, finite: st.SearchStrategy[float] | None = None) -> tuple:
    shape = draw(shapes)
    elems = st.floats(-30.0, 0.0, width=32) if finite is None else finite
    lt = draw(hnp.arrays(np.float32, shape, elements=elems))
    ls = draw(hnp.arrays(np.float32, shape, elements=elems))
    mask = draw(hnp.arrays(np.bool_, shape))
    return torch.from_numpy(lt), torch.from_numpy(ls), torch.from_numpy(mask)


ANY_FINITE = st.floats(allow_nan=False, allow_infinity=False, width=32)


@SETTINGS
@given(batches(ANY_FINITE), st.sampled_from(ALL))
def test_weights_finite_for_finite_inputs(b: tuple, name: str) -> None:
    lt, ls, mask = b
    w, m = strategies.get(name)(lt, ls, mask)
    assert torch.isfinite(w).all()
    assert (w >= 0).all()
    for k in (N.IS_RATIO_FRACTION_HIGH, N.IS_RATIO_FRACTION_LOW, N.MASKED_FRACTION):
        assert 0.0 <= m[k] <= 1.0


@SETTINGS
@given(batches(), st.sampled_from(ALL), st.floats(-1e6, 1e6, width=32))
def test_masked_tokens_contribute_nothing(b: tuple, name: str, junk: float) -> None:
    lt, ls, mask = b
    w, m = strategies.get(name)(lt, ls, mask)
    assert (w[~mask] == 0).all()
    lt2, ls2 = lt.clone(), ls.clone()
    lt2[~mask], ls2[~mask] = junk, math.nan  # garbage where masked
    w2, m2 = strategies.get(name)(lt2, ls2, mask)
    assert torch.equal(w, w2)
    assert {k: v for k, v in m.items() if not math.isnan(v)} == {
        k: v for k, v in m2.items() if not math.isnan(v)
    }
    if mask.any():
        s1 = diagnostics.summarize(lt, ls, mask, post_tool=mask[:, 0])
        s2 = diagnostics.summarize(lt2, ls2, mask, post_tool=mask[:, 0])
        assert s1 == s2


@SETTINGS
@given(batches())
def test_token_truncate_inf_equals_raw_ratio(b: tuple) -> None:
    lt, ls, mask = b
    w, _ = strategies.get("token_truncate", C=math.inf)(lt, ls, mask)
    raw = torch.exp((lt - ls).clamp(-20, 20)) * mask
    assert torch.allclose(w, raw, rtol=1e-6, atol=0)


@SETTINGS
@given(
    batches(),
    st.sampled_from(
        ["seq_tis", "seq_mis", "geo_rs", "k3_rs", "sequence_truncate", "sequence_mask",
         "geometric_truncate", "geometric_mask", "seq_reject"]
    ),
)  # fmt: skip
def test_sequence_weight_constant_over_its_tokens(b: tuple, name: str) -> None:
    lt, ls, mask = b
    w, _ = strategies.get(name)(lt, ls, mask)
    for row in range(w.shape[0]):
        vals = w[row][mask[row]]
        if vals.numel():
            assert (vals == vals[0]).all()


@SETTINGS
@given(batches(), st.sampled_from(ALL))
def test_identical_logprobs_weights_one_gap_zero_ess_one(b: tuple, name: str) -> None:
    lt, _, mask = b
    w, m = strategies.get(name)(lt, lt.clone(), mask)
    assert torch.equal(w, mask.to(w.dtype))
    if mask.any():
        assert m[N.IS_ESS] == 1.0 or math.isclose(m[N.IS_ESS], 1.0, rel_tol=1e-6)
        post = torch.zeros_like(mask)
        post[0] = True
        s = diagnostics.summarize(lt, lt.clone(), mask, post_tool=post)
        assert s[N.PROBS_DIFF_MEAN] == 0.0 and s[N.PROBS_DIFF_MAX] == 0.0
        assert s[N.KL] == 0.0 and s[N.CHI2_TOKEN] == 0.0
        for sl in N.SLICES:
            if N.ess(sl) in s:
                assert math.isclose(s[N.ess(sl)], 1.0, rel_tol=1e-6)
                assert s[N.tail(sl, "max")] == 0.0


values = hnp.arrays(
    np.float64,
    st.integers(1, 300),
    elements=st.floats(1e-6, 1e6) | st.sampled_from([1e-6, 1.0, 2.0, 1e6]),
)


@SETTINGS
@given(values, st.sampled_from([0.005, 0.01, 0.05]))
def test_sketch_quantiles_within_alpha_of_rank_quantile(x: np.ndarray, alpha: float) -> None:
    sk = LogSketch(alpha=alpha, min_value=1e-6).add(x)
    qs = [0.0, 0.1, 0.5, 0.9, 0.95, 0.99, 1.0]
    got = sk.quantiles(qs)
    for q, g in zip(qs, got, strict=True):
        exact = np.sort(x)[math.floor(q * (len(x) - 1))]  # rank-based (np method="lower")
        assert exact == np.quantile(x, q, method="lower")
        assert abs(g - exact) <= alpha * exact * (1 + 1e-9), (q, g, exact)


@SETTINGS
@given(
    hnp.arrays(np.float32, st.integers(0, 200), elements=st.floats(0, 1e4, width=32)),
    hnp.arrays(np.float32, st.integers(0, 200), elements=st.floats(0, 1e4, width=32)),
)
def test_sketch_merge_equals_sketch_of_union(a: np.ndarray, b: np.ndarray) -> None:
    merged = LogSketch().add(a).merge(LogSketch().add(b))
    union = LogSketch().add(np.concatenate([a, b]))
    assert merged == union
    assert merged.to_payload() == union.to_payload()
    via_payload = LogSketch.from_payload(LogSketch().add(a).to_payload()).merge(
        LogSketch.from_payload(LogSketch().add(b).to_payload())
    )
    assert via_payload == union
