"""Gap diagnostics: a hand-computed 2x3 case, slices, empty slices, bad input.

The worked example (the same as test_strategies; row 1 is post-tool, its last token
masked)::

    p_trainer = [[0.6, 0.2, 0.9], [0.1, 0.6, 0.3]]
    p_sampler = [[0.2, 0.5, 0.9], [0.4, 0.2, 0.7]]
    rho       = [[3,   0.4, 1  ], [0.25, 3,  -- ]]
    lr = ln rho = [[1.098612, -0.916291, 0], [-1.386294, 1.098612, --]]

    gap |p_t - p_s| = [[.4, .3, 0], [.3, .4, --]]
        all: mean 1.4 / 5 = 0.28, max 0.4; text: 0.7 / 3, max 0.4; post: 0.35, max 0.4
    |lr| mean: all 4.499809 / 5 = 0.899962; text 2.014903 / 3; post 2.484906 / 2
    k1 = mean(-lr): all 0.105361 / 5 = 0.021072; text -0.182322 / 3 = -0.060774;
        post 0.287682 / 2 = 0.143841
    k3 = mean(rho - 1 - lr): all (1.217679 + 1.537682) / 5 = 0.551072
    chi2 = mean(rho^2) - 1: all (9 + .16 + 1 + .0625 + 9) / 5 - 1 = 2.8445;
        text 10.16 / 3 - 1 = 2.386667; post 9.0625 / 2 - 1 = 3.53125
    log_ppl_diff = mean over rows of -(row mean of lr): rows -0.060774, 0.143841
        -> all 0.041534; text -0.060774; post 0.143841
    ESS = (sum rho)^2 / (N sum rho^2): text 4.4^2 / (3 * 10.16) = 0.635171;
        post 3.25^2 / (2 * 9.0625) = 0.582759
    tails (rank-based, within 1%): text |lr| sorted [0, .916291, 1.098612]:
        p50 = .916291, p95 = p99 = .916291 (floor(q * 2) = 1), max 1.098612
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gapwatch.correction import diagnostics
from gapwatch.correction import names as N
from gapwatch.correction.sketch import LogSketch

PT = torch.tensor([[0.6, 0.2, 0.9], [0.1, 0.6, 0.3]], dtype=torch.float64)
PS = torch.tensor([[0.2, 0.5, 0.9], [0.4, 0.2, 0.7]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
POST_ROW = torch.tensor([False, True])
LT, LS = PT.log(), PS.log()


def test_summarize_hand_computed() -> None:
    s = diagnostics.summarize(LT, LS, MASK, post_tool=POST_ROW)
    ap = pytest.approx
    assert s[N.PROBS_DIFF_MEAN] == ap(0.28)
    assert s[N.PROBS_DIFF_MAX] == ap(0.4)
    assert s[N.ABS_LOG_RATIO_MEAN] == ap(0.899962, abs=1e-6)
    assert s[N.KL] == ap(0.021072, abs=1e-6)
    assert s[N.K3_KL] == ap(0.551072, abs=1e-6)
    assert s[N.CHI2_TOKEN] == ap(2.8445)
    assert s[N.LOG_PPL_DIFF] == ap(0.041534, abs=1e-6)
    assert s[N.sliced(N.PROBS_DIFF_MEAN, "text")] == ap(0.7 / 3)
    assert s[N.sliced(N.PROBS_DIFF_MEAN, "post_tool")] == ap(0.35)
    assert s[N.sliced(N.PROBS_DIFF_MAX, "post_tool")] == ap(0.4)
    assert s[N.sliced(N.ABS_LOG_RATIO_MEAN, "post_tool")] == ap(2.484906 / 2, abs=1e-6)
    assert s[N.sliced(N.KL, "text")] == ap(-0.060774, abs=1e-6)
    assert s[N.sliced(N.KL, "post_tool")] == ap(0.143841, abs=1e-6)
    assert s[N.sliced(N.CHI2_TOKEN, "text")] == ap(2.386667, abs=1e-6)
    assert s[N.sliced(N.CHI2_TOKEN, "post_tool")] == ap(3.53125)
    assert s[N.sliced(N.LOG_PPL_DIFF, "text")] == ap(-0.060774, abs=1e-6)
    assert s[N.sliced(N.LOG_PPL_DIFF, "post_tool")] == ap(0.143841, abs=1e-6)
    assert s[N.ess("text")] == ap(0.635171, abs=1e-6)
    assert s[N.ess("post_tool")] == ap(0.582759, abs=1e-6)
    assert s[N.tail("text", "p50")] == ap(0.916291, rel=0.01)
    assert s[N.tail("text", "p99")] == ap(0.916291, rel=0.01)
    assert s[N.tail("text", "max")] == ap(1.098612, rel=0.01)
    assert s[N.tail("post_tool", "p50")] == ap(1.098612, rel=0.01)  # sorted [1.0986, 1.3863]
    assert s[N.tail("post_tool", "max")] == ap(1.386294, rel=0.01)


def test_post_tool_per_token_equals_per_row() -> None:
    per_tok = POST_ROW.unsqueeze(-1).expand(2, 3)
    a = diagnostics.summarize(LT, LS, MASK, post_tool=POST_ROW)
    b = diagnostics.summarize(LT, LS, MASK, post_tool=per_tok.numpy())
    assert a.keys() == b.keys()
    for k in a:  # the two label forms sum along different paths
        assert b[k] == pytest.approx(a[k], rel=1e-12, abs=1e-15), k


def test_empty_slice_is_omitted() -> None:
    s = diagnostics.summarize(LT, LS, MASK)  # no post_tool: every token is text
    assert N.ess("text") in s and N.tail("text", "p95") in s
    assert not [k for k in s if "post_tool" in k]
    assert s[N.PROBS_DIFF_MEAN] == s[N.sliced(N.PROBS_DIFF_MEAN, "text")]
    d = diagnostics.distributions(LT, LS, MASK)
    assert list(d) == [N.dist("text")]
    nothing = torch.zeros(2, 3, dtype=torch.bool)
    assert diagnostics.summarize(LT, LS, nothing, post_tool=POST_ROW) == {}
    assert diagnostics.distributions(LT, LS, nothing) == {}


def test_masked_positions_ignored_even_if_garbage() -> None:
    lt, ls = LT.clone(), LS.clone()
    lt[1, 2], ls[1, 2] = math.nan, -math.inf
    assert diagnostics.summarize(lt, ls, MASK, post_tool=POST_ROW) == diagnostics.summarize(
        LT, LS, MASK, post_tool=POST_ROW
    )


def test_distributions_payload_format() -> None:
    d = diagnostics.distributions(LT, LS, MASK, post_tool=POST_ROW)
    assert set(d) == {N.dist("text"), N.dist("post_tool")}
    p = d[N.dist("text")]
    assert p["scheme"] == "logbucket:alpha=0.01,min=1e-06"
    assert set(p) == {"scheme", "keys", "counts", "upper"}
    assert sum(p["counts"]) == 3 and sum(d[N.dist("post_tool")]["counts"]) == 2
    assert p["keys"] == sorted(p["keys"]) and p["upper"] == sorted(p["upper"])
    sk = LogSketch.from_payload(p)
    assert sk.quantile(1.0) == pytest.approx(1.098612, rel=0.01)
    # the same buckets the summarize tails read
    direct = diagnostics.sketches(LT, LS, MASK, post_tool=POST_ROW)["text"]
    assert direct == sk
    assert LogSketch().add((LT - LS)[0].abs()) == sk


def test_numpy_and_float32_inputs() -> None:
    a = diagnostics.summarize(LT.numpy(), LS.numpy(), MASK.numpy(), post_tool=POST_ROW.numpy())
    b = diagnostics.summarize(LT.float(), LS.float(), MASK, post_tool=POST_ROW)
    assert a.keys() == b.keys()
    for k in a:
        assert b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-5), k


def test_large_random_matches_numpy_reference() -> None:
    rng = np.random.default_rng(0)
    B, T = 64, 128
    ls = np.log(rng.uniform(0.01, 1.0, (B, T))).astype(np.float32)
    lt = (ls + rng.normal(0, 0.3, (B, T))).astype(np.float32)
    mask = rng.uniform(size=(B, T)) > 0.2
    post = rng.uniform(size=(B, T)) > 0.5
    s = diagnostics.summarize(lt, ls, mask, post_tool=post)
    lr = (lt - ls).astype(np.float64)
    slices: list[tuple[N.Slice, np.ndarray]] = [("text", mask & ~post), ("post_tool", mask & post)]
    for name, sel in slices:
        x = lr[sel]
        rho = np.exp(x)
        assert s[N.sliced(N.ABS_LOG_RATIO_MEAN, name)] == pytest.approx(np.abs(x).mean(), rel=1e-4)
        assert s[N.sliced(N.K3_KL, name)] == pytest.approx((rho - 1 - x).mean(), rel=1e-3)
        assert s[N.ess(name)] == pytest.approx(rho.mean() ** 2 / (rho**2).mean(), rel=1e-4)
        gap = np.abs(np.exp(lt.astype(np.float64)) - np.exp(ls.astype(np.float64)))[sel]
        assert s[N.sliced(N.PROBS_DIFF_MAX, name)] == pytest.approx(gap.max(), rel=1e-5)
        for q, level in diagnostics.TAIL_Q.items():
            exact = np.quantile(np.abs(x), level, method="lower")
            assert s[N.tail(name, q)] == pytest.approx(exact, rel=0.0101), (name, q)


def test_bad_inputs_raise_value_error() -> None:
    with pytest.raises(ValueError, match=r"post_tool must be \(B, T\)"):
        diagnostics.summarize(LT, LS, MASK, post_tool=torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"must both be \(B, T\)"):
        diagnostics.summarize(LT, LS[:, :2], MASK)
    bad = LT.clone()
    bad[0, 0] = math.nan
    with pytest.raises(ValueError, match="NaN"):
        diagnostics.summarize(bad, LS, MASK)


@pytest.mark.parametrize("per_row", [True, False])
def test_slice_sketches_equal_sketch_of_slice_values(per_row: bool) -> None:
    rng = np.random.default_rng(2)
    B, T = 16, 40
    ls = np.log(rng.uniform(0.01, 1.0, (B, T))).astype(np.float32)
    lt = ls.copy()
    lt[:, ::3] += rng.normal(0, 0.5, (B, (T + 2) // 3)).astype(np.float32)  # zeros elsewhere
    mask = rng.uniform(size=(B, T)) > 0.3
    post = rng.uniform(size=B) > 0.5 if per_row else rng.uniform(size=(B, T)) > 0.5
    post_bt = np.broadcast_to(post[:, None], (B, T)) if per_row else post
    stats, sk = diagnostics.analyze(lt, ls, mask, post_tool=post)
    absl = np.abs(lt - ls)
    pairs: list[tuple[N.Slice, np.ndarray]] = [
        ("text", mask & ~post_bt),
        ("post_tool", mask & post_bt),
    ]
    for name, sel in pairs:
        assert sk[name] == LogSketch().add(absl[sel]), name  # invalid tokens removed exactly
    assert stats == diagnostics.summarize(lt, ls, mask, post_tool=post)
    assert diagnostics.payloads(sk) == diagnostics.distributions(lt, ls, mask, post_tool=post)


def test_gap_by_turn_buckets_rows_by_their_interaction_index() -> None:
    import math

    import torch

    from gapwatch.correction import diagnostics
    from gapwatch.correction import names as N

    ls = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]))
    lt = torch.log(torch.tensor([[0.6, 0.4], [0.5, 0.5], [0.25, 0.5], [0.5, 0.9]]))
    m = torch.tensor([[True, True], [True, False], [True, False], [False, False]])
    out = diagnostics.by_turn(lt, ls, m, torch.tensor([1, 2, 7, 3]))
    assert out[N.by_turn(N.PROBS_DIFF_MEAN, "1")] == pytest.approx(0.1)
    assert out[N.by_turn(N.PROBS_DIFF_MEAN, "2")] == pytest.approx(0.0)
    assert out[N.by_turn(N.PROBS_DIFF_MEAN, "5+")] == pytest.approx(0.25)  # turn 7: open bucket
    assert out[N.by_turn(N.ABS_LOG_RATIO_MEAN, "5+")] == pytest.approx(math.log(2))
    assert N.by_turn(N.PROBS_DIFF_MEAN, "3") not in out  # no valid token in turn 3
    assert N.by_turn(N.ABS_LOG_RATIO_MEAN, "1") == "rollout_corr/abs_log_ratio_mean/turn_1"
    with pytest.raises(ValueError, match="turn must be"):
        diagnostics.by_turn(lt, ls, m, torch.tensor([1, 2]))


def test_drift_families_hand_computed() -> None:
    """``drift`` on the worked example: the same tails and ESS per slice as the mismatch
    (the same log-ratios), under the family's names, and the family's mean with its sign."""
    ap = pytest.approx
    gap = diagnostics.summarize(LT, LS, MASK, post_tool=POST_ROW)
    for ratio, sign in (("ref_drift", 1.0), ("ppo", -1.0)):
        figs, sk = diagnostics.drift(LT, LS, MASK, ratio=ratio, post_tool=POST_ROW)
        mean = N.MEAN_OF[ratio][0]
        assert figs[mean] == ap(sign * -0.021072, abs=1e-6)  # k1 = mean(-lr)
        assert figs[N.sliced(mean, "text")] == ap(sign * 0.060774, abs=1e-6)
        assert figs[N.sliced(mean, "post_tool")] == ap(sign * -0.143841, abs=1e-6)
        assert figs[N.ess("text", ratio)] == ap(0.635171, abs=1e-6)
        assert figs[N.ess("post_tool", ratio)] == ap(0.582759, abs=1e-6)
        for s in N.SLICES:
            for q in N.QUANTILES:
                assert figs[N.tail(s, q, ratio)] == gap[N.tail(s, q)]
        named = diagnostics.payloads(sk, ratio)
        assert set(named) == {N.dist(s, ratio) for s in N.SLICES}
        plain = diagnostics.payloads(sk)
        assert all(named[N.dist(s, ratio)] == plain[N.dist(s)] for s in N.SLICES)


def test_drift_slices_apart_and_empty_slice_omitted() -> None:
    """Post-tool tokens drifted, text tokens not: only the post-tool tails and ESS move;
    with no post-tool token its figures are absent, never NaN."""
    num = torch.zeros((4, 5), dtype=torch.float64)
    num[2:, :] = torch.linspace(-2.0, 2.0, 10).view(2, 5)
    post = torch.tensor([False, False, True, True])
    figs, _ = diagnostics.drift(num, torch.zeros_like(num), ratio="ref_drift", post_tool=post)
    assert figs[N.tail("text", "max", "ref_drift")] == 0.0
    assert figs[N.ess("text", "ref_drift")] == 1.0
    assert figs[N.tail("post_tool", "max", "ref_drift")] == pytest.approx(2.0, rel=0.01)
    assert figs[N.ess("post_tool", "ref_drift")] < 0.7
    only_text, _ = diagnostics.drift(num[:2], num[:2], ratio="ppo", post_tool=post[:2])
    assert N.ess("post_tool", "ppo") not in only_text
    assert not any(k.endswith("/post_tool") or "/post_tool/" in k for k in only_text)
    assert all(math.isfinite(v) for v in only_text.values())


def test_drift_refuses_the_mismatch_family_and_nan() -> None:
    with pytest.raises(ValueError, match="drift ratio must be one of ref_drift, ppo"):
        diagnostics.drift(LT, LS, MASK, ratio="mismatch")
    bad = LT.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        diagnostics.drift(bad, LS, MASK, ratio="ppo")
