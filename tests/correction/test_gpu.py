"""CPU and CUDA give the same weights, metrics, summaries and sketches (skipped without CUDA)."""

from __future__ import annotations

import pytest
import torch

from gapwatch.correction import diagnostics, strategies


@pytest.mark.gpu
def test_cpu_and_cuda_agree() -> None:
    g = torch.Generator().manual_seed(0)
    B, T = 64, 256
    ls = torch.log(torch.rand(B, T, generator=g) * 0.99 + 0.01)
    lt = ls + torch.randn(B, T, generator=g) * 0.2
    mask = torch.rand(B, T, generator=g) > 0.1
    post = torch.rand(B, T, generator=g) > 0.5
    dev = torch.device("cuda")
    for name in strategies.names():
        fn = strategies.get(name)
        w_c, m_c = fn(lt, ls, mask)
        w_g, m_g = fn(lt.to(dev), ls.to(dev), mask.to(dev))
        assert w_g.device.type == "cuda"
        torch.testing.assert_close(w_g.cpu(), w_c, rtol=1e-5, atol=1e-6)
        assert m_g.keys() == m_c.keys()
        for k in m_c:
            assert m_g[k] == pytest.approx(m_c[k], rel=1e-4, abs=1e-6), (name, k)
    s_c = diagnostics.summarize(lt, ls, mask, post_tool=post)
    s_g = diagnostics.summarize(lt.to(dev), ls.to(dev), mask.to(dev), post_tool=post.to(dev))
    assert s_g.keys() == s_c.keys()
    for k in s_c:
        assert s_g[k] == pytest.approx(s_c[k], rel=1e-4, abs=1e-6), k
    # bucket indices can differ only for a value within float rounding of a bucket edge
    d_c = diagnostics.distributions(lt, ls, mask, post_tool=post)
    d_g = diagnostics.distributions(lt.to(dev), ls.to(dev), mask.to(dev), post_tool=post.to(dev))
    for k in d_c:
        assert sum(d_g[k]["counts"]) == sum(d_c[k]["counts"])
        diff = sum(abs(a - b) for a, b in zip(d_g[k]["counts"], d_c[k]["counts"], strict=False))
        assert diff <= 0.001 * sum(d_c[k]["counts"]) + 2
