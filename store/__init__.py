"""gapwatch's SQL store: sweeps, runs, metrics, distributions, decisions.

SQLite file by default (WAL), PostgreSQL by URL; schema migrated by the Alembic revisions
in ``store/migrations``. Call ``open_store(url)`` and use the returned ``Store``; see
docs/interfaces.md ("store") for the contract and ``store.synth.fill`` for test data.
"""

from __future__ import annotations

from .errors import StoreError
from .rows import DecisionRow, DistRow, Point, RunRow, SweepRow
from .store import Store, open_store

__all__ = [
    "DecisionRow",
    "DistRow",
    "Point",
    "RunRow",
    "Store",
    "StoreError",
    "SweepRow",
    "open_store",
]
