"""Correction strategies: hand-computed 2x3 cases for every alias and axis, registry errors.

The worked example (rho = p_trainer / p_sampler; the last token of row 1 is masked)::

    p_trainer = [[0.6, 0.2, 0.9], [0.1, 0.6, 0.3]]
    p_sampler = [[0.2, 0.5, 0.9], [0.4, 0.2, 0.7]]
    mask      = [[1,   1,   1  ], [1,   1,   0  ]]
    rho       = [[3,   0.4, 1  ], [0.25, 3,  -- ]]          5 valid tokens

    sequence ratio  row0 = 3 * 0.4 * 1 = 1.2        row1 = 0.25 * 3 = 0.75
    geometric ratio row0 = 1.2 ** (1/3) = 1.062659  row1 = 0.75 ** (1/2) = 0.866025
    k3 = rho - 1 - ln rho: 3 -> 0.901388, 0.4 -> 0.316291, 1 -> 0, 0.25 -> 0.636294
       mean k3: row0 = 1.217679 / 3 = 0.405893, row1 = 1.537682 / 2 = 0.768841
    k2 = 0.5 ln^2 rho: 3 -> 0.603474, 0.4 -> 0.419794, 0.25 -> 0.960906
       sum k2: row0 = 1.023269, row1 = 1.564380

    tis (C=2):       w = [[2, .4, 1], [.25, 2, 0]]   sum 5.65, mean 1.13
                     ESS = 5.65^2 / (5 * (4 + .16 + 1 + .0625 + 4)) = 0.692274
                     above C: {3, 3} -> 0.4; below 1/C: {.4, .25} -> 0.4
                     raw ratio min .25, mean 7.65 / 5 = 1.53, max 3
    icepop [.5, 5]:  w = [[3, 0, 1], [0, 3, 0]]      masked 2/5, seqs masked 2/2
    seq_tis (C=2):   w = [[1.2]*3, [.75, .75, 0]]    mean 5.1 / 5 = 1.02
    seq_mis hi=1:    row0 ratio 1.2 > 1 rejected: w = [[0, 0, 0], [.75, .75, 0]]
    geo_rs default:  neither geometric ratio in [.999, 1.001]: all 0
    geo_rs [.9,1.1]: row0 kept, row1 rejected: w = [[1, 1, 1], [0, 0, 0]]
    k3_rs hi=0.5:    row0 (0.406) kept, row1 (0.769) rejected
    tis veto=0.3:    row1 has 0.25 < 0.3: vetoed -> w = [[2, .4, 1], [0, 0, 0]]
"""

from __future__ import annotations

import math
import pickle

import pytest
import torch

from gapwatch.correction import names as N
from gapwatch.correction import strategies

PT = torch.tensor([[0.6, 0.2, 0.9], [0.1, 0.6, 0.3]], dtype=torch.float64)
PS = torch.tensor([[0.2, 0.5, 0.9], [0.4, 0.2, 0.7]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
LT, LS = PT.log(), PS.log()


def run(name: str, **kw: object) -> tuple[list[list[float]], dict[str, float]]:
    w, m = strategies.get(name, **kw)(LT, LS, MASK)
    assert w.shape == (2, 3)
    return w.tolist(), m


def close(a: list[list[float]], b: list[list[float]]) -> bool:
    ta, tb = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    return torch.allclose(ta, tb, atol=1e-6)


def test_tis_hand_computed() -> None:
    w, m = run("tis")
    assert close(w, [[2, 0.4, 1], [0.25, 2, 0]])
    assert m[N.IS_MEAN] == pytest.approx(1.13)
    assert m[N.IS_STD] == pytest.approx(math.sqrt(9.2225 / 5 - 1.13**2))
    assert m[N.IS_MIN] == pytest.approx(0.25)
    assert m[N.IS_MAX] == pytest.approx(2.0)
    assert m[N.IS_ESS] == pytest.approx(0.692274, abs=1e-6)
    assert m[N.IS_RATIO_FRACTION_HIGH] == pytest.approx(0.4)
    assert m[N.IS_RATIO_FRACTION_LOW] == pytest.approx(0.4)
    assert m[N.MASKED_FRACTION] == m[N.RS_MASKED_FRACTION] == 0.0
    assert m[N.RAW_RATIO_MIN] == pytest.approx(0.25)
    assert m[N.RAW_RATIO_MEAN] == pytest.approx(1.53)
    assert m[N.RAW_RATIO_MAX] == pytest.approx(3.0)


def test_tis_threshold_by_keyword() -> None:
    w, m = run("tis", C=5.0)
    assert close(w, [[3, 0.4, 1], [0.25, 3, 0]])
    assert m[N.IS_RATIO_FRACTION_HIGH] == 0.0
    assert m[N.IS_RATIO_FRACTION_LOW] == 0.0  # nothing below 1/C = 0.2
    w, m = run("tis", C=math.inf)
    assert close(w, [[3, 0.4, 1], [0.25, 3, 0]])


def test_icepop_hand_computed() -> None:
    w, m = run("icepop")
    assert close(w, [[3, 0, 1], [0, 3, 0]])
    assert m[N.MASKED_FRACTION] == pytest.approx(0.4)
    assert m[N.RS_SEQ_MASKED_FRACTION] == pytest.approx(1.0)
    assert m[N.IS_RATIO_FRACTION_LOW] == pytest.approx(0.4)
    assert m[N.IS_RATIO_FRACTION_HIGH] == 0.0
    w, _ = run("icepop", lo=0.3, hi=2.0)
    assert close(w, [[0, 0.4, 1], [0, 0, 0]])


def test_seq_tis_hand_computed() -> None:
    w, m = run("seq_tis")
    assert close(w, [[1.2, 1.2, 1.2], [0.75, 0.75, 0]])
    assert m[N.IS_MEAN] == pytest.approx(1.02)
    assert m[N.RAW_RATIO_MIN] == pytest.approx(0.75)
    assert m[N.RAW_RATIO_MAX] == pytest.approx(1.2)
    w, m = run("seq_tis", C=1.0)
    assert close(w, [[1, 1, 1], [0.75, 0.75, 0]])
    assert m[N.IS_RATIO_FRACTION_HIGH] == pytest.approx(0.6)  # row0's 3 tokens of 5


def test_seq_mis_hand_computed() -> None:
    w, m = run("seq_mis")  # both sequence ratios lie in [0.5, 2.0]
    assert close(w, [[1.2, 1.2, 1.2], [0.75, 0.75, 0]])
    assert m[N.MASKED_FRACTION] == 0.0
    w, m = run("seq_mis", hi=1.0)
    assert close(w, [[0, 0, 0], [0.75, 0.75, 0]])
    assert m[N.MASKED_FRACTION] == pytest.approx(0.6)
    assert m[N.RS_SEQ_MASKED_FRACTION] == pytest.approx(0.5)


def test_geo_rs_hand_computed() -> None:
    w, m = run("geo_rs")
    assert close(w, [[0, 0, 0], [0, 0, 0]])
    assert m[N.MASKED_FRACTION] == pytest.approx(1.0)
    w, m = run("geo_rs", lo=0.9, hi=1.1)
    assert close(w, [[1, 1, 1], [0, 0, 0]])
    assert m[N.RS_SEQ_MASKED_FRACTION] == pytest.approx(0.5)


def test_k3_rs_hand_computed() -> None:
    w, _ = run("k3_rs")
    assert close(w, [[0, 0, 0], [0, 0, 0]])
    w, m = run("k3_rs", hi=0.5)
    assert close(w, [[1, 1, 1], [0, 0, 0]])
    assert m[N.MASKED_FRACTION] == pytest.approx(0.4)
    w, _ = run("k3_rs", hi=0.8)
    assert close(w, [[1, 1, 1], [1, 1, 0]])


def test_none_hand_computed() -> None:
    w, m = run("none")
    assert close(w, [[1, 1, 1], [1, 1, 0]])
    assert m[N.IS_ESS] == pytest.approx(1.0)
    assert m[N.RAW_RATIO_MAX] == pytest.approx(3.0)  # raw token ratio still reported


def test_veto_hand_computed() -> None:
    w, m = run("tis", veto=0.3)
    assert close(w, [[2, 0.4, 1], [0, 0, 0]])
    assert m[N.IS_VETO_FRACTION] == pytest.approx(0.5)
    assert m[N.MASKED_FRACTION] == pytest.approx(0.4)
    w, m = run("tis", veto=strategies.VETO_DEFAULT)
    assert m[N.IS_VETO_FRACTION] == 0.0


def test_generic_axes_hand_computed() -> None:
    g0, g1 = 1.2 ** (1 / 3), 0.75**0.5
    w, _ = run("token_truncate", C=2.0)
    assert close(w, [[2, 0.4, 1], [0.25, 2, 0]])
    w, _ = run("token_mask", lo=0.3, hi=2.0)
    assert close(w, [[0, 0.4, 1], [0, 0, 0]])
    w, _ = run("sequence_truncate", C=1.0)
    assert close(w, [[1, 1, 1], [0.75, 0.75, 0]])
    w, _ = run("sequence_mask", lo=0.8, hi=1.5)
    assert close(w, [[1.2, 1.2, 1.2], [0, 0, 0]])
    w, m = run("geometric_truncate", C=1.0)
    assert close(w, [[1, 1, 1], [g1, g1, 0]])
    assert m[N.IS_RATIO_FRACTION_HIGH] == pytest.approx(0.6)
    assert m[N.IS_RATIO_FRACTION_LOW] == pytest.approx(0.4)
    w, _ = run("geometric_truncate", C=2.0)
    assert close(w, [[g0, g0, g0], [g1, g1, 0]])
    w, _ = run("geometric_mask", lo=0.9, hi=1.1)
    assert close(w, [[g0, g0, g0], [0, 0, 0]])
    w, _ = run("seq_reject", stat="k2", agg="sum", lo=None, hi=1.2)  # 1.023 kept, 1.564 not
    assert close(w, [[1, 1, 1], [0, 0, 0]])
    w, _ = run("seq_reject", stat="k1", agg="sum", lo=0.8, hi=1.0)  # ratio 0.75 < 0.8, 1.2 > 1
    assert close(w, [[0, 0, 0], [0, 0, 0]])
    w, _ = run("seq_reject", stat="k1", agg="mean", lo=0.85, hi=1.1)  # geometric ratios
    assert close(w, [[1, 1, 1], [1, 1, 0]])
    w, _ = run("seq_reject", stat="k3", agg="sum", hi=1.3)  # sums 1.218, 1.538
    assert close(w, [[1, 1, 1], [0, 0, 0]])
    # compose: sequence IS, then k3-mean rejection, equals seq_tis on the kept row
    w, _ = run("compose", level="sequence", C=2.0, rs_stat="k3", rs_agg="mean", rs_hi=0.5)
    assert close(w, [[1.2, 1.2, 1.2], [0, 0, 0]])


def test_aliases_equal_their_composed_form() -> None:
    pairs: list[tuple[tuple[str, dict[str, object]], tuple[str, dict[str, object]]]] = [
        (("tis", {}), ("compose", {"level": "token", "C": 2.0})),
        (("icepop", {}), ("compose", {"mode": "mask", "lo": 0.5, "hi": 5.0})),
        (("seq_tis", {}), ("compose", {"level": "sequence", "C": 2.0})),
        (
            ("seq_mis", {}),
            ("compose", {"level": "sequence", "rs_stat": "k1", "rs_lo": 0.5, "rs_hi": 2.0}),
        ),
        (
            ("geo_rs", {}),
            ("compose", {"level": "none", "rs_stat": "k1", "rs_agg": "mean", "rs_lo": 0.999, "rs_hi": 1.001}),
        ),
        (("k3_rs", {}), ("compose", {"level": "none", "rs_stat": "k3", "rs_agg": "mean", "rs_hi": 0.01})),
    ]  # fmt: skip
    torch.manual_seed(0)
    lt, ls = torch.randn(8, 16) * 0.05 - 1, torch.randn(8, 16) * 0.05 - 1
    for (a, ka), (b, kb) in pairs:
        wa, ma = strategies.get(a, **ka)(lt, ls, None)
        wb, mb = strategies.get(b, **kb)(lt, ls, None)
        assert torch.equal(wa, wb), a
        assert ma == mb, a


def test_metrics_use_registered_names_only() -> None:
    valid = {v for k, v in vars(N).items() if k.isupper() and isinstance(v, str)}
    for name in strategies.names():
        _, m = strategies.get(name)(LT, LS, MASK)
        assert set(m) <= valid, name
        assert all(isinstance(v, float) for v in m.values())


def test_weights_are_detached_and_numpy_accepted() -> None:
    lt = LT.clone().requires_grad_(True)
    w, _ = strategies.get("tis")(lt, LS, MASK)
    assert not w.requires_grad
    w_np, m_np = strategies.get("tis")(LT.numpy(), LS.numpy(), MASK.numpy())
    w_t, m_t = strategies.get("tis")(LT, LS, MASK)
    assert torch.equal(w_np, w_t) and m_np == m_t
    w32, _ = strategies.get("tis")(LT.float(), LS.float(), MASK.int())
    assert w32.dtype == torch.float32 and close(w32.double().tolist(), w_t.tolist())


def test_all_masked_gives_zero_weights_and_nan_stats() -> None:
    w, m = strategies.get("tis")(LT, LS, torch.zeros(2, 3, dtype=torch.bool))
    assert torch.equal(w, torch.zeros(2, 3, dtype=torch.float64))
    assert math.isnan(m[N.IS_MEAN]) and m[N.MASKED_FRACTION] == 0.0


def test_registry_names_and_params() -> None:
    got = strategies.names()
    for alias in ("tis", "icepop", "seq_tis", "seq_mis", "geo_rs", "k3_rs", "none"):
        assert alias in got
    assert got == sorted(got)
    assert strategies.params("tis") == {"C": 2.0, "veto": None}
    assert strategies.params("icepop") == {"lo": 0.5, "hi": 5.0, "veto": None}
    assert strategies.params("seq_mis") == {"C": 2.0, "lo": 0.5, "hi": 2.0, "veto": None}
    assert strategies.params("geo_rs") == {"lo": 0.999, "hi": 1.001, "veto": None}
    assert strategies.params("k3_rs") == {"hi": 0.01, "veto": None}
    assert strategies.params("none") == {}
    for name in got:  # every factory builds with its defaults and documents itself
        assert isinstance(strategies.get(name), strategies.Strategy)
        assert strategies._REGISTRY[name].__doc__


def test_registry_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown correction strategy 'tiss'; valid: .*tis"):
        strategies.get("tiss")
    with pytest.raises(ValueError, match="unknown correction strategy 'nope'"):
        strategies.params("nope")
    with pytest.raises(ValueError, match=r"unknown keyword\(s\) c; accepted: C, veto"):
        strategies.get("tis", c=2.0)
    with pytest.raises(ValueError, match="already registered"):
        strategies.register("tis")(strategies.tis)
    with pytest.raises(ValueError, match="keyword-only"):
        strategies.register("brand_new")(lambda C: strategies.tis(C=C))
    assert "brand_new" not in strategies.names()


@pytest.mark.parametrize(
    ("name", "kw", "msg"),
    [
        ("tis", {"C": -1.0}, "C must be > 0"),
        ("tis", {"C": True}, "must be a number"),
        ("tis", {"C": "2"}, "must be a number"),
        ("icepop", {"lo": 3.0, "hi": 1.0}, "0 <= lo <= hi"),
        ("tis", {"veto": 2.0}, r"veto threshold must lie in \(0, 1\)"),
        ("seq_reject", {"stat": "k9"}, "rs_stat must be one of k1, k2, k3"),
        ("seq_reject", {"agg": "max"}, "rs_agg must be one of sum, mean"),
        ("seq_reject", {"lo": None, "hi": None}, "needs rs_lo or rs_hi"),
        ("compose", {"level": "tokens"}, "level must be one of token, sequence"),
    ],
)
def test_bad_threshold_values(name: str, kw: dict[str, object], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        strategies.get(name, **kw)


def test_bad_inputs_one_line_errors() -> None:
    fn = strategies.get("tis")
    with pytest.raises(ValueError, match=r"must both be \(B, T\)"):
        fn(LT[0], LS[0], None)
    with pytest.raises(ValueError, match=r"mask must be \(B, T\)"):
        fn(LT, LS, MASK[:, :2])
    with pytest.raises(ValueError, match="floating point"):
        fn(torch.zeros(2, 3, dtype=torch.long), LS, MASK)
    with pytest.raises(ValueError, match="torch tensor or numpy array"):
        fn([[0.0]], LS, MASK)  # type: ignore[arg-type]


def test_strategy_pickles() -> None:
    fn = strategies.get("seq_mis", hi=1.5)
    back = pickle.loads(pickle.dumps(fn))
    assert back == fn
    assert torch.equal(back(LT, LS, MASK)[0], fn(LT, LS, MASK)[0])
