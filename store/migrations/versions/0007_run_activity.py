"""When each run last showed life, and how often it writes a step: ``runs.active_at`` and
``runs.step_interval_s``.

``gapwatch runs`` shows a ``running`` run that has been silent far longer than its own
step interval, with no live process behind it, as ``stale`` (``store.staleness``); both
columns are kept by the store's writes (``write_batch``, ``begin_attempt``). NULL for
runs recorded before this revision (their ``started`` stands in).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("active_at", sa.DateTime(timezone=True)))
    op.add_column("runs", sa.Column("step_interval_s", sa.Float))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("step_interval_s")
        batch.drop_column("active_at")
