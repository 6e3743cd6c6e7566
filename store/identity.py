"""A run's identity: its keys and labels, computed once from its resolved config.

Every path that puts a run in the store (a sweep's trials, ``gapwatch run``, a followed
log, a trainer callback) and the migration that relabels old stores call
:func:`of_config` (or build a :class:`RunIdentity` directly for a run trained
elsewhere), so the same run gets the same labels whichever way it came in, and the UI and
the leaderboard group it with its peers.

What a run is known by:

- ``role``: ``control`` (the dense trainer forward, codec ``none``) or ``treatment``.
- ``compression_label``: the codec with its strength, ``topk(keep=0.05)``, plus
  ``@every2`` where only every 2nd layer is compressed; ``none`` for dense.
- ``correction_label``: the strategy with every threshold it ran with, ``tis(C=2)``,
  ``icepop(lo=0.5,hi=5)``; ``none``.
- ``settings``: 8 hex digits of a hash of everything a control shares with its
  treatments (task, model, sizes, optimiser, seed...; not the codec, the correction, the
  run's name or where it ran).
- ``pair_key``: ``mul/tiny/s0@1a2b3c4d``: task, model, seed and settings. A treatment and
  its control share it.
- ``trial_key``: ``s0-control``, ``s0-topk_keep0.05-tis_C2``: unique within a sweep,
  whose trials share their settings; ``unique_key`` adds ``@settings`` for places that
  hold runs of different settings (the ``local`` sweep of ``gapwatch run``).

"Resolved" means the thresholds and codec strengths are complete: a config that says
``correction: tis`` has been filled with ``C: 2.0`` by the code that validated it
(``workers.RunConfig``), so ``tis`` and ``tis(C=2)`` are one strategy here. This module
does no such filling itself: it is pure string work over a plain mapping (no registry,
no I/O), which the store's migrations can also use.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Final, Literal

Role = Literal["control", "treatment"]
VOID_PAIR: Final = "void_pair"
"""The decision that marks a pair void (its dense control was stopped by a rule): a ``warn``
on the control, a ``stop`` on each treatment, the reason in the evidence. Written by the
sweep's Monitor, read by the UI."""
DENSE: Final = "none"
"""Codec name of the dense trainer forward (every control's)."""
NO_CORRECTION: Final = "none"
"""Correction that leaves every token's weight at 1 (every control's)."""

NOT_SHARED: Final = frozenset(
    {
        "name",
        "compression",
        "compression_kwargs",
        "compression_layers",
        "correction",
        "correction_kwargs",
        "num_threads",
        "device",
        "placement",
        "model_info",
        "drift_reference",
    }
)
"""Config keys a treatment may differ from its control in (the arms of a pair, and where
or under what label it ran), and what is recorded about a run rather than set
(``model_info``: a named model's figures); every other key is part of ``settings``."""


def number(v: Any) -> str:
    """A threshold or strength as a label shows it: ``2.0`` -> ``2``, ``0.05`` -> ``0.05``."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if isinstance(v, int) or (math.isfinite(v) and v == int(v) and abs(v) < 1e15):
        return str(int(v))
    return f"{v:g}"


def label(name: str, kwargs: Mapping[str, Any]) -> str:
    """``name(k=v,...)`` in the mapping's order, None values left out; bare ``name`` if none."""
    parts = [f"{k}={number(v)}" for k, v in kwargs.items() if v is not None]
    return f"{name}({','.join(parts)})" if parts else name


def _slug(v: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "", number(v))


def _key_part(name: str, kwargs: Mapping[str, Any]) -> str:
    return name + "".join(f"_{k}{_slug(v)}" for k, v in kwargs.items() if v is not None)


def settings_hash(config: Mapping[str, Any]) -> str:
    """8 hex digits over every key of ``config`` but :data:`NOT_SHARED`."""
    shared = {k: v for k, v in config.items() if k not in NOT_SHARED}
    text = json.dumps(shared, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def model_name(model: str) -> str:
    """``tiny`` or the last part of a model directory (``/models/Qwen2.5-0.5B`` -> ``Qwen2.5-0.5B``)."""
    return PurePath(str(model)).name or str(model)


@dataclass(frozen=True)
class RunIdentity:
    """Who a run is, as the store keys and labels it."""

    seed: int
    task: str
    """The environment or task name (``mul``), or what a foreign trainer calls its task."""
    model: str
    """Short model name (``tiny``)."""
    settings: str
    """Hash of the settings a control shares with its treatments (see :func:`settings_hash`)."""
    codec: str = DENSE
    codec_kwargs: Mapping[str, Any] = field(default_factory=dict)
    layers: str | int = "all"
    """Which layer outputs are compressed: ``all`` or every n-th."""
    correction: str = NO_CORRECTION
    thresholds: Mapping[str, Any] = field(default_factory=dict)
    role: Role | None = None
    """None: derived, ``control`` exactly when the codec is dense."""
    pair: str | None = None
    """The pair key, where it is not derived (a run trained elsewhere, paired by hand)."""

    @property
    def run_role(self) -> Role:
        """The role: as given, else ``control`` for the dense codec, ``treatment`` otherwise."""
        if self.role is not None:
            return self.role
        return "control" if self.codec == DENSE else "treatment"

    @property
    def compression_label(self) -> str:
        """``none``, ``topk(keep=0.05)``, ``quant(bits=2)@every2``."""
        text = label(self.codec, self.codec_kwargs)
        if self.codec != DENSE and self.layers != "all":
            text += f"@every{self.layers}"
        return text

    @property
    def correction_label(self) -> str:
        """``none``, ``tis(C=2)``, ``icepop(lo=0.5,hi=5)``."""
        return label(self.correction, self.thresholds)

    @property
    def pair_key(self) -> str:
        """``mul/tiny/s0@1a2b3c4d``: shared by a control and its treatments."""
        if self.pair is not None:
            return self.pair
        return f"{self.task}/{self.model}/s{self.seed}@{self.settings}"

    @property
    def trial_key(self) -> str:
        """``s0-control`` or ``s0-topk_keep0.05-tis_C2``: unique among runs of one settings."""
        if self.run_role == "control":
            return f"s{self.seed}-control"
        codec = _key_part(self.codec, self.codec_kwargs)
        if self.codec != DENSE and self.layers != "all":
            codec += f"_every{self.layers}"
        return f"s{self.seed}-{codec}-{_key_part(self.correction, self.thresholds)}"

    @property
    def unique_key(self) -> str:
        """``s0-control@1a2b3c4d``: unique among runs of any settings."""
        return f"{self.trial_key}@{self.settings}"

    def store_fields(self) -> dict[str, Any]:
        """The run columns this identity fills: role, pair key, seed, labels."""
        return {
            "role": self.run_role,
            "pair_key": self.pair_key,
            "seed": int(self.seed),
            "compression": self.compression_label,
            "correction": self.correction_label,
        }


def of_config(config: Mapping[str, Any], *, role: Role | None = None) -> RunIdentity:
    """The identity of a run of the built-in worker from its resolved config (a
    ``workers.RunConfig`` as a plain dict: ``env``, ``model``, ``seed``, ``compression``,
    ``compression_kwargs``, ``compression_layers``, ``correction``, ``correction_kwargs``
    and the rest)."""
    try:
        seed = int(config["seed"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"a run config needs an integer seed, got {config.get('seed')!r}"
        ) from None
    return RunIdentity(
        seed=seed,
        task=str(config.get("env", "task")),
        model=model_name(str(config.get("model", "model"))),
        settings=settings_hash(config),
        codec=str(config.get("compression", DENSE)),
        codec_kwargs=dict(config.get("compression_kwargs") or {}),
        layers=config.get("compression_layers", "all"),
        correction=str(config.get("correction", NO_CORRECTION)),
        thresholds=dict(config.get("correction_kwargs") or {}),
        role=role,
    )
