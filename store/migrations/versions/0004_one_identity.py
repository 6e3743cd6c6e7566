"""Relabel every run with ``store.identity``: one set of keys and labels for every path.

Before this revision a sweep's runs and ``gapwatch run``'s runs were labelled by two
different codes: pair key ``mul/tiny/seed0`` vs ``mul-s0-<hash>``, codec ``quant(bits=2)``
vs ``quant:bits=2@every2``, correction ``tis(C=2)`` vs ``tis`` (thresholds dropped), and a
correction written without thresholds kept none. Each run of the built-in worker (its
``config_json`` is a ``workers.RunConfig`` dict) is brought to the one identity:

- its codec strength and thresholds are completed with the defaults the registries had
  when these runs were made (:data:`DEFAULTS`, a snapshot: what ran, not what a later
  default would be), and ``config_json`` saves them;
- ``compression``, ``correction`` and ``pair_key`` are recomputed by
  ``store.identity.of_config`` (the role is kept);
- ``trial_id`` becomes the identity's ``trial_key`` (its ``unique_key`` in the ``local``
  sweep), unless another run of the sweep already holds that key, so resuming an old
  sweep finds its finished trials.

Runs whose config is not a built-in worker's are left as they are. Downgrade is a no-op:
the old labels were the inconsistency this fixes.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

from gapwatch.store import identity

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

DEFAULTS: dict[str, dict[str, Any]] = {
    # codecs (workers.codecs)
    "codec:quant": {"bits": 4},
    "codec:topk": {"keep": 0.25},
    # correction strategies (correction.strategies); None (off) values left out
    "tis": {"C": 2.0},
    "icepop": {"lo": 0.5, "hi": 5.0},
    "seq_tis": {"C": 2.0},
    "seq_mis": {"C": 2.0, "lo": 0.5, "hi": 2.0},
    "geo_rs": {"lo": 0.999, "hi": 1.001},
    "k3_rs": {"hi": 0.01},
    "token_truncate": {"C": 2.0},
    "token_mask": {"lo": 0.5, "hi": 2.0},
    "sequence_truncate": {"C": 2.0},
    "sequence_mask": {"lo": 0.5, "hi": 2.0},
    "geometric_truncate": {"C": 2.0},
    "geometric_mask": {"lo": 0.999, "hi": 1.001},
    "seq_reject": {"stat": "k1", "agg": "sum", "lo": 0.5, "hi": 2.0},
    "compose": {"level": "token", "mode": "truncate", "C": 2.0, "rs_agg": "sum"},
}
"""Parameter defaults of the codecs and strategies as of this revision."""


def _complete(defaults: dict[str, Any], given: Any) -> dict[str, Any]:
    given = dict(given or {})
    out = {k: given.pop(k, v) for k, v in defaults.items()}
    out.update(given)
    return {k: v for k, v in out.items() if v is not None}


def relabel(config: dict[str, Any], role: str, sweep_name: str) -> dict[str, Any] | None:
    """The new columns of one run (None: not a built-in worker's config)."""
    if not all(k in config for k in ("seed", "compression", "correction")):
        return None
    config = dict(config)
    codec, corr = str(config["compression"]), str(config["correction"])
    config["compression_kwargs"] = _complete(
        DEFAULTS.get(f"codec:{codec}", {}), config.get("compression_kwargs")
    )
    config["correction_kwargs"] = _complete(DEFAULTS.get(corr, {}), config.get("correction_kwargs"))
    ident = identity.of_config(config, role=role if role in ("control", "treatment") else None)  # type: ignore[arg-type]
    key = ident.unique_key if sweep_name == "local" else ident.trial_key
    return {**ident.store_fields(), "trial_id": key, "config_json": json.dumps(config)}


def upgrade() -> None:
    bind = op.get_bind()
    runs = sa.table(
        "runs",
        sa.column("id", sa.Integer),
        sa.column("sweep_id", sa.Integer),
        sa.column("trial_id", sa.String),
        sa.column("role", sa.String),
        sa.column("pair_key", sa.String),
        sa.column("compression", sa.String),
        sa.column("correction", sa.String),
        sa.column("config_json", sa.Text),
    )
    sweeps = sa.table("sweeps", sa.column("id", sa.Integer), sa.column("name", sa.String))
    names = {int(i): str(n) for i, n in bind.execute(sa.select(sweeps.c.id, sweeps.c.name))}
    rows = bind.execute(
        sa.select(runs.c.id, runs.c.sweep_id, runs.c.trial_id, runs.c.role, runs.c.config_json)
    ).all()
    taken = {(int(r.sweep_id), str(r.trial_id)) for r in rows}
    for r in rows:
        try:
            config = json.loads(r.config_json)
        except ValueError:
            continue
        if not isinstance(config, dict):
            continue
        try:
            new = relabel(config, str(r.role), names.get(int(r.sweep_id), ""))
        except (TypeError, ValueError):
            new = None
        if new is None:
            continue
        sweep_key = (int(r.sweep_id), new["trial_id"])
        if new["trial_id"] != r.trial_id and sweep_key in taken:
            new["trial_id"] = r.trial_id  # another run of the sweep holds that key
        else:
            taken.discard((int(r.sweep_id), str(r.trial_id)))
            taken.add(sweep_key)
        new.pop("seed", None)
        new.pop("role", None)
        bind.execute(sa.update(runs).where(runs.c.id == r.id).values(**new))


def downgrade() -> None:
    pass
