"""Non-finite flags on metrics, runs.last_step (backfilled), the runs-by-sweep index.

Revision 0001 stored a non-finite metric as a bare NULL. From here on ``metrics.flag``
says which ('nan', 'inf', '-inf'); rows already NULL stay unflagged (their cause is
unknown). ``runs.last_step`` lets the runs listing skip a scan of the metrics table.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("metrics", sa.Column("flag", sa.String(8)))
    op.add_column("runs", sa.Column("last_step", sa.Integer))
    op.execute(
        "UPDATE runs SET last_step = ("
        " SELECT MAX(s) FROM ("
        "  SELECT MAX(step) AS s FROM metrics WHERE metrics.run_id = runs.id"
        "  UNION ALL"
        "  SELECT MAX(step) AS s FROM distributions WHERE distributions.run_id = runs.id"
        " ) AS steps)"
    )
    op.create_index("ix_runs_sweep_status", "runs", ["sweep_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_runs_sweep_status", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("last_step")
    with op.batch_alter_table("metrics", table_kwargs={"sqlite_with_rowid": False}) as batch:
        batch.drop_column("flag")
