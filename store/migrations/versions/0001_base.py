"""Base tables: sweeps, runs, metric_names, metrics, distributions, decisions.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("config_text", sa.Text, nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "sweep_id",
            sa.Integer,
            sa.ForeignKey("sweeps.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("trial_id", sa.String(200), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("pair_key", sa.String(200), nullable=False),
        sa.Column("seed", sa.Integer, nullable=False),
        sa.Column("compression", sa.String(200), nullable=False),
        sa.Column("correction", sa.String(200), nullable=False),
        sa.Column("config_json", sa.Text, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("stop_rule", sa.String(200)),
        sa.Column("stop_step", sa.Integer),
        sa.Column("error", sa.Text),
        sa.Column("started", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended", sa.DateTime(timezone=True)),
        sa.UniqueConstraint("sweep_id", "trial_id", name="uq_runs_sweep_trial"),
    )
    op.create_table(
        "metric_names",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(300), nullable=False, unique=True),
    )
    op.create_table(
        "metrics",
        sa.Column(
            "run_id",
            sa.Integer,
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("name_id", sa.Integer, sa.ForeignKey("metric_names.id"), primary_key=True),
        sa.Column("step", sa.Integer, primary_key=True),
        sa.Column("value", sa.Float),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "distributions",
        sa.Column(
            "run_id",
            sa.Integer,
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("name", sa.String(300), primary_key=True),
        sa.Column("step", sa.Integer, primary_key=True),
        sa.Column("scheme", sa.String(200), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
    )
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "run_id",
            sa.Integer,
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("rule", sa.String(200), nullable=False),
        sa.Column("action", sa.String(20), nullable=False),
        sa.Column("evidence_json", sa.Text, nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("run_id", "step", "rule", name="uq_decisions_run_step_rule"),
    )


def downgrade() -> None:
    for table in ("decisions", "distributions", "metrics", "metric_names", "runs", "sweeps"):
        op.drop_table(table)
