"""The store's tables as SQLAlchemy 2 typed ORM classes (the schema at head).

The Alembic revisions in ``store/migrations/versions`` build exactly this schema;
``tests/store/test_migrations.py`` checks that the two agree. Metric names are kept once
in ``metric_names`` and referenced by id from ``metrics``, so the hot table's rows and its
primary key stay small (the ingest and series queries are bounded by that index).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

SWEEP_STATUSES = ("running", "completed", "interrupted", "failed")
RUN_STATUSES = ("running", "completed", "stopped", "failed")
INTERRUPTED = "interrupted"
"""The ``stop_rule`` of a run stopped by Ctrl-C (SIGINT): not a rule but a person; the
run is ``stopped`` at its newest step, the reason in its ``error``. Not a collapse: the
UI counts it neither as collapsed nor as steps saved by early stopping."""
ROLES = ("control", "treatment")
ACTIONS = ("continue", "warn", "stop")
FLAGS = ("nan", "inf", "-inf")
"""Values of ``metrics.flag``: why ``value`` is NULL (the float was not finite)."""


class Base(DeclarativeBase):
    pass


class Sweep(Base):
    __tablename__ = "sweeps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    config_text: Mapped[str] = mapped_column(Text)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(20))


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("sweep_id", "trial_id", name="uq_runs_sweep_trial"),
        Index("ix_runs_sweep_status", "sweep_id", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"))
    trial_id: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(20))
    pair_key: Mapped[str] = mapped_column(String(200))
    seed: Mapped[int] = mapped_column(Integer)
    compression: Mapped[str] = mapped_column(String(200))
    correction: Mapped[str] = mapped_column(String(200))
    config_json: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20))
    stop_rule: Mapped[str | None] = mapped_column(String(200))
    stop_step: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    started: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ended: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_step: Mapped[int | None] = mapped_column(Integer)
    """Newest step written for this run (maintained by ``write_steps``; revision 0002)."""
    checkpoint_step: Mapped[int | None] = mapped_column(Integer)
    """The step the run's newest checkpoint was saved after (revision 0005)."""
    checkpoint_path: Mapped[str | None] = mapped_column(Text)
    """Where that checkpoint is (a directory Ray Tune keeps)."""
    attempts: Mapped[int | None] = mapped_column(Integer)
    """How many times the run's trainer was started (a retry after its node was lost, a
    ``--resume``, each counts; revision 0006). NULL: recorded before it was counted."""
    active_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """When the run last showed life: its newest step first written, or its trainer
    (re)started (``begin_attempt``); revision 0007. NULL: neither yet, or recorded before."""
    step_interval_s: Mapped[float | None] = mapped_column(Float)
    """Its typical wall time between two new steps, seconds (kept by ``write_batch``: see
    ``store.staleness``); NULL before its second step."""


class MetricName(Base):
    __tablename__ = "metric_names"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(300), unique=True)


class Metric(Base):
    """One figure of one run at one step. The primary key is the unique (run, name, step)."""

    __tablename__ = "metrics"
    __table_args__ = {"sqlite_with_rowid": False}

    run_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    """A ``runs.id``. No foreign key, on purpose (revision 0003): ``write_steps``, the one
    writer, checks the run in its transaction; the per-row FK checks cost ~65% of ingest."""
    name_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    """A ``metric_names.id`` (no foreign key, as for ``run_id``)."""
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[float | None] = mapped_column(Float)
    """NULL exactly when ``flag`` says the reported float was not finite."""
    flag: Mapped[str | None] = mapped_column(String(8))
    """'nan', 'inf' or '-inf' where the reported value was not finite, else NULL."""


class Distribution(Base):
    """A histogram payload (``correction.sketch`` layout) of one run at one step."""

    __tablename__ = "distributions"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(300), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    scheme: Mapped[str] = mapped_column(String(200))
    payload: Mapped[str] = mapped_column(Text)
    """The whole payload as JSON text: scheme, keys, counts, upper."""


class Decision(Base):
    __tablename__ = "decisions"
    __table_args__ = (
        UniqueConstraint("run_id", "step", "rule", name="uq_decisions_run_step_rule"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)
    rule: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(20))
    evidence_json: Mapped[str] = mapped_column(Text)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))
