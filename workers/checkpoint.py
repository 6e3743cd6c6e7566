"""A run's checkpoint: everything its next step depends on, in one directory.

``save(dir, run)`` writes ``state.pt`` (the trainer model's weights, the optimiser's state,
the task and sampling random states, torch's global random state) and ``meta.json`` (the
step and a hash of the run's config); ``load(dir, run)`` puts them back into a freshly
built run of the same config and returns the step. What is not saved is rebuilt the same
way a new run builds it: the frozen reference (the warm-started initial policy), the codec
hooks, the environment, and the sampler (its weights are the trainer's, synced after each
step). A run taken up from a checkpoint then yields exactly the steps an uninterrupted run
would (tests/workers/test_checkpoint.py checks it).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn


class _Trainer(Protocol):
    @property
    def opt(self) -> torch.optim.Optimizer: ...


class Checkpointable(Protocol):
    """What a checkpoint saves from and loads into (``workers.loop.GRPORun`` is one)."""

    @property
    def cfg(self) -> Any: ...
    @property
    def model(self) -> nn.Module: ...
    @property
    def trainer(self) -> _Trainer: ...
    @property
    def rng(self) -> random.Random: ...
    @property
    def gen(self) -> torch.Generator: ...
    @property
    def done(self) -> int: ...


VERSION = 1
"""Bump when what a checkpoint holds changes."""


def config_hash(config: dict[str, Any]) -> str:
    """A run config's hash (its name left out): a checkpoint loads only into the same run."""
    same = {k: v for k, v in config.items() if k not in ("name", "num_threads")}
    return hashlib.sha256(json.dumps(same, sort_keys=True, default=str).encode()).hexdigest()


def save(path: Path, run: Checkpointable) -> Path:
    """Write ``run``'s checkpoint into directory ``path`` (created); returns ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    state = {
        "model": run.model.state_dict(),
        "optimizer": run.trainer.opt.state_dict(),
        "rng": run.rng.getstate(),
        "gen": run.gen.get_state(),
        "torch_rng": torch.get_rng_state(),
    }
    fd, tmp = tempfile.mkstemp(dir=path, prefix=".state.", suffix=".pt")
    os.close(fd)
    torch.save(state, tmp)
    os.replace(tmp, path / "state.pt")  # a reader sees the old file or the whole new one
    meta = {"version": VERSION, "step": run.done, "config": config_hash(run.cfg.to_dict())}
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def load(path: Path, run: Checkpointable) -> int:
    """Restore ``run`` (just built from the same config) from the checkpoint in ``path``;
    returns the step it was saved after. A checkpoint of another run or version, or a
    missing one, is one ValueError line."""
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, ValueError):
        raise ValueError(f"no readable checkpoint in {path} (meta.json)") from None
    if meta.get("version") != VERSION:
        raise ValueError(f"checkpoint {path} is of version {meta.get('version')}, not {VERSION}")
    if meta.get("config") != config_hash(run.cfg.to_dict()):
        raise ValueError(f"checkpoint {path} was saved by a run of another config")
    state = torch.load(path / "state.pt", map_location=run.cfg.device, weights_only=False)
    run.model.load_state_dict(state["model"])
    run.trainer.opt.load_state_dict(state["optimizer"])
    run.rng.setstate(state["rng"])
    run.gen.set_state(state["gen"])
    torch.set_rng_state(state["torch_rng"])
    return int(meta["step"])
