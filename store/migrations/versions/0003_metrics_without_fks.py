"""Drop the foreign keys of ``metrics`` (the ingest hot path).

Measured on PostgreSQL 15 (2 cores): the per-row referential-integrity triggers on
``metrics.run_id`` / ``metrics.name_id`` were ~65% of bulk-ingest time (43k -> 120k
rows/s without them). Integrity is kept by the only writer, ``Store.write_steps``: it
locks and checks the run row in the same transaction and takes name ids from
``metric_names`` itself. SQLite cannot drop a constraint in place, so the table is
rebuilt (same columns, same primary key, WITHOUT ROWID) and its rows copied.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        op.create_table(
            "metrics_new",
            sa.Column("run_id", sa.Integer, primary_key=True),
            sa.Column("name_id", sa.Integer, primary_key=True),
            sa.Column("step", sa.Integer, primary_key=True),
            sa.Column("value", sa.Float),
            sa.Column("flag", sa.String(8)),
            sqlite_with_rowid=False,
        )
        op.execute(
            "INSERT INTO metrics_new (run_id, name_id, step, value, flag) "
            "SELECT run_id, name_id, step, value, flag FROM metrics"
        )
        op.drop_table("metrics")
        op.rename_table("metrics_new", "metrics")
        return
    for fk in sa.inspect(bind).get_foreign_keys("metrics"):
        if fk["name"]:  # PostgreSQL names every constraint
            op.drop_constraint(fk["name"], "metrics", type_="foreignkey")


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        with op.batch_alter_table(
            "metrics", recreate="always", table_kwargs={"sqlite_with_rowid": False}
        ) as batch:
            batch.create_foreign_key("metrics_run_id_fkey", "runs", ["run_id"], ["id"])
            batch.create_foreign_key("metrics_name_id_fkey", "metric_names", ["name_id"], ["id"])
        return
    op.create_foreign_key(
        "metrics_run_id_fkey", "metrics", "runs", ["run_id"], ["id"], ondelete="CASCADE"
    )
    op.create_foreign_key("metrics_name_id_fkey", "metrics", "metric_names", ["name_id"], ["id"])
