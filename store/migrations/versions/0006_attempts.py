"""How many times each run's trainer was started: ``runs.attempts``.

A sweep's trial is started again when its process is lost (its node died: Ray Tune's
retry, ``max_failures``) or when ``--resume`` takes it up; each start counts. NULL for
runs recorded before this revision (not counted then).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("attempts", sa.Integer))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("attempts")
