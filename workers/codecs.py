"""Activation codecs: what a compressed trainer forward does to hidden states.

A codec is a pure function ``(x: (..., H)) -> (..., H)`` built by a registered factory from
its strength (``bits=2``, ``keep=0.1``). ``attach`` installs it as forward hooks on the
outputs of chosen decoder layers (every layer, or every n-th, as pipeline cuts would be)
of the TRAINER's model only; the sampler never sees a codec. The backward pass is straight
through: the hook returns ``x + (codec(x) - x).detach()``, so gradients flow as if the
codec were the identity.

Every codec here works per token (scale or top-k over the hidden dimension of one
position), so a compressed causal LM stays causal: a token's output depends only on it
and the tokens before it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from gapwatch.workers.registry import Registry

Codec = Callable[[torch.Tensor], torch.Tensor]

_REGISTRY: Registry[Codec] = Registry("codec", unknown_label="compression")
register = _REGISTRY.register
names = _REGISTRY.names
"""Sorted names of the registered codecs."""
factory = _REGISTRY.factory
"""The factory registered under a name (its keywords are the codec's strength)."""


def get(name: str, **kwargs: Any) -> Codec:
    """Build codec ``name`` with its strength; unknown names/arguments fail in one line."""
    return _REGISTRY.build(name, "compression_kwargs", **kwargs)


@register("none")
def identity() -> Codec:
    """The dense forward: hidden states unchanged."""
    return lambda x: x


@register("quant")
def absmax_quant(bits: int = 4) -> Codec:
    """Symmetric k-bit quantisation with one absmax scale per token.

    Levels are ``s * {-q, ..., q}`` with ``q = 2**(bits-1) - 1`` and ``s = max|x| / q`` over
    the hidden dimension (2 bits: {-s, 0, s}).
    """
    if bits not in (2, 3, 4, 8):
        raise ValueError(f"quant bits must be one of 2, 3, 4, 8, got {bits}")
    qmax = float(2 ** (bits - 1) - 1)

    def quant(x: torch.Tensor) -> torch.Tensor:  # x: (..., H)
        scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / qmax  # (..., 1)
        return (x / scale).round().clamp(-qmax, qmax) * scale  # (..., H)

    return quant


@register("topk")
def topk_sparsify(keep: float = 0.25) -> Codec:
    """Keep the ``keep`` fraction of largest-magnitude entries per token, zero the rest."""
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"topk keep must be in (0, 1], got {keep}")

    def sparsify(x: torch.Tensor) -> torch.Tensor:  # x: (..., H)
        k = max(1, round(keep * x.shape[-1]))
        idx = x.abs().topk(k, dim=-1).indices  # (..., k)
        return torch.zeros_like(x).scatter(-1, idx, x.gather(-1, idx))  # (..., H)

    return sparsify


def straight_through(codec: Codec, x: torch.Tensor) -> torch.Tensor:
    """``codec(x)`` in the forward pass, identity in the backward pass."""
    return x + (codec(x) - x).detach()


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a transformers causal LM (``model.model.layers`` for Llama-likes)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(
            f"cannot find decoder layers in {type(model).__name__}: expected model.model.layers; "
            "use a Llama/Qwen/Mistral-style causal LM"
        )
    return layers


def boundaries(n_layers: int, layers: str | int) -> list[int]:
    """Indices of layers whose output is compressed: ``"all"`` or every ``n``-th layer."""
    if layers == "all":
        return list(range(n_layers))
    if isinstance(layers, int) and not isinstance(layers, bool) and layers >= 1:
        return [i for i in range(n_layers) if (i + 1) % layers == 0]
    raise ValueError(
        f"compression_layers must be 'all' or a positive int (every n-th), got {layers!r}"
    )


def attach(model: nn.Module, codec: Codec, layers: str | int = "all") -> list[Any]:
    """Install ``codec`` (straight-through) on chosen decoder-layer outputs; return the handles."""

    def hook(_mod: nn.Module, _inp: Any, out: Any) -> Any:
        if isinstance(out, tuple):  # older transformers return (hidden, ...)
            return (straight_through(codec, out[0]), *out[1:])
        return straight_through(codec, out)

    mods = decoder_layers(model)
    return [mods[i].register_forward_hook(hook) for i in boundaries(len(mods), layers)]
