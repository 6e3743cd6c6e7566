"""Each run's newest checkpoint: ``runs.checkpoint_step`` and ``runs.checkpoint_path``.

A built-in trial saves a checkpoint every ``checkpoint_every`` steps; ``--resume`` takes
each unfinished trial up from the one recorded here, keeping its stored steps up to it.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("checkpoint_step", sa.Integer))
    op.add_column("runs", sa.Column("checkpoint_path", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("checkpoint_path")
        batch.drop_column("checkpoint_step")
