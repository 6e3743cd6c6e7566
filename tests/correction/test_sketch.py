"""LogSketch: payload round trip and format, merge rules, memory bound, errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from gapwatch.correction.sketch import LogSketch, SketchError


def test_payload_round_trip_and_json() -> None:
    sk = LogSketch().add(np.array([0.0, 1e-9, 0.5, 0.5, 2.0, 30.0]))
    p = sk.to_payload()
    assert p["scheme"] == "logbucket:alpha=0.01,min=1e-06"
    assert len(p["keys"]) == len(p["counts"]) == len(p["upper"]) == 4  # zero, 0.5, 2, 30
    assert p["counts"] == [2, 2, 1, 1]
    assert p["upper"][0] == 1e-6 and p["keys"][0] == sk.zero_key
    assert all(isinstance(k, int) for k in p["keys"])
    back = LogSketch.from_payload(json.loads(json.dumps(p)))
    assert back == sk and back.count == 6


def test_bucket_bounds_contain_values() -> None:
    vals = np.array([1e-3, 0.1, 1.0, 7.5, 1e3])
    sk = LogSketch(alpha=0.02)
    for v in vals:
        one = LogSketch(alpha=0.02).add(np.array([v]))
        upper = one.to_payload()["upper"][0]
        assert upper / sk.gamma < v <= upper * (1 + 1e-12)
        assert abs(one.quantile(0.5) - v) <= 0.02 * v * (
            1 + 1e-9
        )  # the guarantee, with equality at edges


def test_ecdf_from_buckets() -> None:
    sk = LogSketch().add(torch.tensor([1.0, 2.0, 2.0, 4.0]))
    xs, fs = sk.ecdf()
    assert fs == [0.25, 0.75, 1.0]
    assert xs == sorted(xs) and 4.0 <= xs[-1] < 4.0 * sk.gamma  # upper bound of 4's bucket
    assert LogSketch().ecdf() == ([], [])


def test_quantile_edges() -> None:
    sk = LogSketch().add(np.arange(1, 101, dtype=np.float64))
    assert sk.quantile(0.0) == pytest.approx(1.0, rel=0.01)
    assert sk.quantile(1.0) == pytest.approx(100.0, rel=0.01)
    assert sk.quantile(0.5) == pytest.approx(50.0, rel=0.01)  # sorted[floor(0.5 * 99)] = 50
    assert LogSketch().add(np.zeros(5)).quantile(0.9) == 0.0
    with pytest.raises(SketchError, match=r"lie in \[0, 1\]"):
        sk.quantile(1.5)
    with pytest.raises(SketchError, match="empty sketch"):
        LogSketch().quantile(0.5)


def test_memory_independent_of_count() -> None:
    rng = np.random.default_rng(1)
    small = LogSketch().add(np.abs(rng.normal(0, 1, 10_000)))
    big = LogSketch().add(np.abs(rng.normal(0, 1, 1_000_000)))
    # buckets depend on the value range, not the count: a few hundred either way
    assert len(big.to_payload()["keys"]) < 2 * len(small.to_payload()["keys"]) + 50
    assert big._counts.nbytes < 64_000
    huge = LogSketch().add(np.array([math.inf, 1e300]))  # saturates in the top bucket
    assert huge.count == 2 and huge._counts.size == huge.max_index + 1


def test_merge_rules() -> None:
    a = LogSketch().add(np.array([1.0, 2.0]))
    b = LogSketch().add(np.array([3.0]))
    c = a.copy().merge(b)
    assert c.count == 3 and a.count == 2
    with pytest.raises(SketchError, match="different schemes"):
        a.merge(LogSketch(alpha=0.02))
    with pytest.raises(SketchError, match="only merge a LogSketch"):
        a.merge({"keys": []})  # type: ignore[arg-type]


def test_errors() -> None:
    with pytest.raises(SketchError, match="non-negative and not NaN"):
        LogSketch().add(np.array([1.0, -0.5]))
    with pytest.raises(SketchError, match="non-negative and not NaN"):
        LogSketch().add(np.array([math.nan]))
    with pytest.raises(SketchError, match="alpha must be"):
        LogSketch(alpha=1.5)
    with pytest.raises(SketchError, match="min_value"):
        LogSketch(min_value=0.0)
    with pytest.raises(SketchError, match="unknown sketch scheme"):
        LogSketch.from_payload({"scheme": "hdr:3", "keys": [], "counts": []})
    with pytest.raises(SketchError, match="lacks counts"):
        LogSketch.from_payload({"scheme": "logbucket:alpha=0.01,min=1e-06", "keys": []})
    with pytest.raises(SketchError, match="increasing"):
        LogSketch.from_payload(
            {"scheme": "logbucket:alpha=0.01,min=1e-06", "keys": [5, 3], "counts": [1, 1]}
        )
    assert isinstance(SketchError("x"), ValueError)
