"""Synthetic stores for benchmarks and UI tests: ``fill(store, runs, steps, names)``.

Each run is a noisy random walk per metric with rare one-step spikes (so downsampling has
something to keep), written through ``Store.write_steps`` like a real recorder would.
Runs come in dense-control / compressed-treatment pairs, so the UI has pairs to compare.
Standard library only (``random``), seeded, so the same call builds the same store.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from .store import Store


def metric_names(n: int) -> list[str]:
    """``n`` synthetic metric names, ``synth/m000`` ...."""
    return [f"synth/m{i:03d}" for i in range(n)]


def fill(
    store: Store,
    runs: int,
    steps: int,
    names: int | Sequence[str],
    *,
    sweep_name: str = "synth",
    seed: int = 0,
    steps_per_write: int = 50,
    spike_prob: float = 0.002,
) -> list[int]:
    """Add a sweep of ``runs`` runs x ``steps`` steps x ``names`` metrics; return run ids.

    ``names``: a count (synthetic names) or the metric names to use. Steps count from 1.
    ``steps_per_write`` steps go to each ``write_steps`` call (one transaction).
    """
    if runs < 1 or steps < 1:
        raise ValueError(f"fill needs runs >= 1 and steps >= 1, got runs={runs} steps={steps}")
    if steps_per_write < 1:
        raise ValueError(f"steps_per_write must be >= 1, got {steps_per_write}")
    name_list = metric_names(names) if isinstance(names, int) else list(names)
    rng = random.Random(seed)
    sweep_id = store.ensure_sweep(sweep_name, f"synthetic: {runs} runs x {steps} steps")
    run_ids: list[int] = []
    for r in range(runs):
        role = "control" if r % 2 == 0 else "treatment"
        pair = f"seed{r // 2}"
        rid = store.ensure_run(
            sweep_id,
            f"trial_{r:05d}",
            role=role,
            pair_key=pair,
            seed=r // 2,
            compression="none" if role == "control" else "quant2",
            correction="none" if role == "control" else "tis",
            config={"steps": steps, "synthetic": True},
            status="completed",
        )
        run_ids.append(rid)
        level = [rng.uniform(-1.0, 1.0) for _ in name_list]
        batch: list[tuple[int, dict[str, float], dict[str, object]]] = []
        for step in range(1, steps + 1):
            metrics: dict[str, float] = {}
            for i, name in enumerate(name_list):
                level[i] += rng.gauss(0.0, 0.02)
                v = level[i]
                if rng.random() < spike_prob:
                    v += rng.choice((-1.0, 1.0)) * 10.0
                metrics[name] = v
            batch.append((step, metrics, {}))
            if len(batch) == steps_per_write:
                store.write_steps(rid, batch)
                batch = []
        if batch:
            store.write_steps(rid, batch)
    return run_ids
