"""Codecs: identity, quantisation levels, top-k, straight-through gradient, layer choice."""

from __future__ import annotations

import pytest
import torch

from gapwatch.workers import codecs


def test_none_is_identity() -> None:
    x = torch.randn(3, 5, 16)
    assert torch.equal(codecs.get("none")(x), x)


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_quant_has_2q_plus_1_levels_per_token(bits: int) -> None:
    x = torch.randn(4, 7, 64)
    y = codecs.get("quant", bits=bits)(x)
    q = 2 ** (bits - 1) - 1
    scale = x.abs().amax(-1, keepdim=True) / q
    levels = (y / scale).round()
    assert torch.allclose(y, levels * scale, atol=1e-6)
    assert levels.abs().max() <= q
    err = (y - x).abs().max().item()
    assert err <= scale.max().item() / 2 + 1e-6  # rounding error at most half a step


def test_fewer_bits_larger_error() -> None:
    x = torch.randn(16, 128)
    errs = [(codecs.get("quant", bits=b)(x) - x).pow(2).mean().item() for b in (8, 4, 3, 2)]
    assert errs == sorted(errs)


def test_topk_keeps_the_largest_fraction() -> None:
    x = torch.randn(5, 100)
    y = codecs.get("topk", keep=0.1)(x)
    assert ((y != 0).sum(-1) == 10).all()
    kept = x.abs().topk(10, dim=-1).values.min(-1).values
    dropped = torch.where(y == 0, x.abs(), torch.zeros_like(x)).max(-1).values
    assert (dropped <= kept).all()
    assert torch.equal(y[y != 0], x[y != 0])


@pytest.mark.parametrize(("name", "kw"), [("quant", {"bits": 2}), ("topk", {"keep": 0.2})])
def test_straight_through_gradient_is_identity(name: str, kw: dict[str, float]) -> None:
    codec = codecs.get(name, **kw)
    x = torch.randn(3, 32, requires_grad=True)
    w = torch.randn(3, 32)
    y = codecs.straight_through(codec, x)
    assert torch.equal(y.detach(), codec(x.detach()))
    (y * w).sum().backward()
    assert x.grad is not None and torch.equal(x.grad, w)


def test_boundaries() -> None:
    assert codecs.boundaries(4, "all") == [0, 1, 2, 3]
    assert codecs.boundaries(4, 2) == [1, 3]
    assert codecs.boundaries(6, 3) == [2, 5]
    with pytest.raises(ValueError, match="compression_layers"):
        codecs.boundaries(4, "some")


def test_attach_compresses_only_the_hooked_model() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=20,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    a = LlamaForCausalLM(cfg).eval()
    b = LlamaForCausalLM(cfg).eval()
    b.load_state_dict(a.state_dict())
    ids = torch.randint(0, 20, (2, 9))
    handles = codecs.attach(b, codecs.get("quant", bits=2), "all")
    assert len(handles) == 2
    la, lb = a(input_ids=ids).logits, b(input_ids=ids).logits
    assert not torch.allclose(la, lb)
    for h in handles:
        h.remove()
    assert torch.allclose(a(input_ids=ids).logits, b(input_ids=ids).logits)
    with pytest.raises(ValueError, match="decoder layers"):
        codecs.attach(torch.nn.Linear(2, 2), codecs.get("none"))
