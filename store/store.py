"""``Store``: the one object the recorder, the rules and the UI talk to.

Open one with ``open_store(url)`` (schema brought to head) or
``open_store(url, read_only=True)`` (creates nothing; the UI's way in). Writes go through
short transactions that take the write lock up front; ``write_batch`` / ``write_steps``
are the bulk path (see ``store.ingest``), the reads' SQL is in ``store.reads``.

Why one file of ~600 lines: ``Store`` is the store's whole public API, one class whose
methods are each a few lines around one query (grouped: sweeps and runs, writes, reads);
the SQL, the ingest encoding, the engine and the export live in their own modules.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from . import engine as eng
from . import export, ingest, reads, staleness
from .errors import StoreError
from .rows import DecisionRow, DistRow, Point, RunRow, SweepRow
from .schema import (
    ACTIONS,
    ROLES,
    RUN_STATUSES,
    SWEEP_STATUSES,
    Decision,
    Distribution,
    Metric,
    MetricName,
    Run,
    Sweep,
)

T = TypeVar("T")
_RETRIES = 5
_FLOAT_OF_FLAG = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


DecisionIn = tuple[int, int, str, str, dict[str, Any]]
"""(run_id, step, rule, action, evidence) of one decision to write."""


def _now() -> datetime:
    return datetime.now(UTC)


def _utc(dt: datetime) -> datetime:
    """SQLite hands back naive datetimes (stored as UTC); make every backend's tz-aware."""
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def _opt_utc(dt: datetime | None) -> datetime | None:
    return None if dt is None else _utc(dt)


def _activity(old: Any, steps: list[int], now: datetime) -> dict[str, Any]:
    """``active_at`` and ``step_interval_s`` of a run (``old``: its row before) that is
    written ``steps`` now: only new steps (past its newest) count; the wall time since it
    last showed life, shared among them, is one sample of its interval, once it has a
    step before them (the wait for a first step is loading, not a step)."""
    new = [s for s in steps if old.last_step is None or s > old.last_step]
    if not new:
        return {}
    out: dict[str, Any] = {"active_at": now}
    if old.last_step is not None and old.active_at is not None:
        sample = (now - _utc(old.active_at)).total_seconds() / len(new)
        out["step_interval_s"] = staleness.next_interval(old.step_interval_s, sample)
    return out


def _choice(what: str, value: str, valid: Sequence[str]) -> str:
    if value not in valid:
        raise StoreError(f"unknown {what} {value!r}; valid: {', '.join(valid)}")
    return value


def _json_text(what: str, obj: Any) -> str:
    try:
        return json.dumps(obj, sort_keys=True, default=str)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{what} is not JSON-serialisable ({exc})") from None


class Store:
    """A gapwatch store on SQLite or PostgreSQL (see the module docstring)."""

    def __init__(self, engine: Engine, url: URL, *, read_only: bool) -> None:
        self.engine = engine
        self.url = url
        self.read_only = read_only
        self._write_engine = engine.execution_options(**eng.WRITE)
        self._upsert = ingest.Upserter(engine.dialect)
        self._series_sql = reads.series_sql(engine.dialect.name)
        self._name_ids: dict[str, int] = {}

    # --- plumbing -----------------------------------------------------------------

    @property
    def url_display(self) -> str:
        """The store URL with any password masked."""
        return eng.display(self.url)

    @property
    def dialect(self) -> str:
        """'sqlite' or 'postgresql'."""
        return str(self.engine.dialect.name)

    def revision(self) -> str | None:
        """The schema revision the store is at."""
        with eng.db_errors(self.url), self.engine.connect() as conn:
            return eng.current_revision(conn)

    def close(self) -> None:
        """Release the engine's connections."""
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.url_display!r}, read_only={self.read_only})"

    def _write(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in one write transaction; retry while SQLite says 'locked'."""
        if self.read_only:
            raise StoreError(f"store {self.url_display} was opened read-only; this call writes")
        for attempt in range(_RETRIES):
            try:
                with eng.db_errors(self.url), self._write_engine.begin() as conn:
                    return fn(conn)
            except StoreError as exc:
                orig = exc.__cause__
                locked = isinstance(orig, OperationalError) and "locked" in str(orig).lower()
                if not locked or attempt == _RETRIES - 1:
                    raise
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    def _read(self, fn: Callable[[Connection], T]) -> T:
        with eng.db_errors(self.url), self.engine.connect() as conn:
            return fn(conn)

    def _insert(self, table: Any) -> Any:
        return (sqlite.insert if self.dialect == "sqlite" else postgresql.insert)(table)

    # --- sweeps and runs --------------------------------------------------------------

    def ensure_sweep(self, name: str, config_text: str) -> int:
        """Id of the sweep called ``name``, creating it (status running) if new."""
        if not name:
            raise StoreError("a sweep needs a non-empty name")

        def go(conn: Connection) -> int:
            conn.execute(
                self._insert(Sweep.__table__)
                .values(name=name, config_text=config_text, created=_now(), status="running")
                .on_conflict_do_nothing(index_elements=["name"])
            )
            return int(conn.execute(select(Sweep.id).where(Sweep.name == name)).scalar_one())

        return self._write(go)

    def set_sweep_status(self, sweep_id: int, status: str) -> None:
        """Set a sweep's status: running | completed | interrupted | failed."""
        _choice("sweep status", status, SWEEP_STATUSES)

        def go(conn: Connection) -> None:
            res = conn.execute(update(Sweep).where(Sweep.id == sweep_id).values(status=status))
            if res.rowcount == 0:
                raise StoreError(f"no sweep with id {sweep_id} in {self.url_display}")

        self._write(go)

    def ensure_run(
        self,
        sweep_id: int,
        trial_id: str,
        *,
        role: str,
        pair_key: str,
        seed: int,
        compression: str,
        correction: str,
        config: dict[str, Any],
        status: str = "running",
    ) -> int:
        """Id of the run (sweep_id, trial_id), creating it if new (an existing one is kept)."""
        _choice("role", role, ROLES)
        _choice("run status", status, RUN_STATUSES)
        config_json = _json_text(f"config of trial {trial_id!r}", config)

        def go(conn: Connection) -> int:
            if conn.execute(select(Sweep.id).where(Sweep.id == sweep_id)).first() is None:
                raise StoreError(f"no sweep with id {sweep_id} in {self.url_display}")
            conn.execute(
                self._insert(Run.__table__)
                .values(
                    sweep_id=sweep_id,
                    trial_id=trial_id,
                    role=role,
                    pair_key=pair_key,
                    seed=int(seed),
                    compression=compression,
                    correction=correction,
                    config_json=config_json,
                    status=status,
                    started=_now(),
                )
                .on_conflict_do_nothing(index_elements=["sweep_id", "trial_id"])
            )
            q = select(Run.id).where(Run.sweep_id == sweep_id, Run.trial_id == trial_id)
            return int(conn.execute(q).scalar_one())

        return self._write(go)

    def set_run_status(
        self,
        run_id: int,
        status: str,
        *,
        stop_rule: str | None = None,
        stop_step: int | None = None,
        error: str | None = None,
    ) -> None:
        """Set a run's status (running | completed | stopped | failed) and why it ended."""
        _choice("run status", status, RUN_STATUSES)
        values: dict[str, Any] = {
            "status": status,
            "stop_rule": stop_rule,
            "stop_step": stop_step,
            "error": error,
            "ended": None if status == "running" else _now(),
        }

        def go(conn: Connection) -> None:
            res = conn.execute(update(Run).where(Run.id == run_id).values(**values))
            if res.rowcount == 0:
                raise StoreError(f"no run with id {run_id} in {self.url_display}")

        self._write(go)

    def update_run_config(self, run_id: int, values: dict[str, Any]) -> None:
        """Set top-level keys of a run's stored config (others kept), e.g. where it ran
        (``placement``); keys that make up the run's identity are not meant for this."""

        def go(conn: Connection) -> None:
            old = conn.execute(select(Run.config_json).where(Run.id == run_id)).scalar()
            if old is None:
                raise StoreError(f"no run with id {run_id} in {self.url_display}")
            merged = _json_text(f"config of run {run_id}", {**json.loads(old), **values})
            conn.execute(update(Run).where(Run.id == run_id).values(config_json=merged))

        self._write(go)

    def delete_run_data(self, run_id: int, *, after: int | None = None) -> None:
        """Drop a run's metrics, distributions and decisions (those after step ``after``,
        or all), keeping its row.

        The sweep calls this when a trial starts again: from step 1 (all of it goes, and
        the checkpoint with it) or from a checkpoint (what came after it goes), so a rerun
        leaves no stale tail of steps and nothing is counted twice.
        """
        cut = -1 if after is None else int(after)

        def go(conn: Connection) -> None:
            if conn.execute(select(Run.id).where(Run.id == run_id)).first() is None:
                raise StoreError(f"no run with id {run_id} in {self.url_display}")
            for table in (Metric, Distribution, Decision):
                conn.execute(delete(table).where(table.run_id == run_id, table.step > cut))
            values: dict[str, Any] = {"stop_rule": None, "stop_step": None}
            values["last_step"] = None if after is None else cut
            if after is None:
                values.update(checkpoint_step=None, checkpoint_path=None, step_interval_s=None)
            conn.execute(update(Run).where(Run.id == run_id).values(**values))

        self._write(go)

    def begin_attempt(self, run_id: int) -> int:
        """Count one more start of the run's trainer (its first, a retry on another node,
        a resume), a sign of life (``active_at``); the count now."""

        def go(conn: Connection) -> int:
            res = conn.execute(
                update(Run)
                .where(Run.id == run_id)
                .values(attempts=func.coalesce(Run.attempts, 0) + 1, active_at=_now())
            )
            if res.rowcount == 0:
                raise StoreError(f"no run with id {run_id} in {self.url_display}")
            count = conn.execute(select(Run.attempts).where(Run.id == run_id)).scalar_one()
            return int(count or 0)

        return self._write(go)

    def set_checkpoint(self, run_id: int, step: int, path: str) -> None:
        """Record the run's newest checkpoint: saved after ``step``, in ``path``."""

        def go(conn: Connection) -> None:
            res = conn.execute(
                update(Run)
                .where(Run.id == run_id)
                .values(checkpoint_step=int(step), checkpoint_path=str(path))
            )
            if res.rowcount == 0:
                raise StoreError(f"no run with id {run_id} in {self.url_display}")

        self._write(go)

    # --- metrics, distributions, decisions ---------------------------------------------

    def _ids_for(self, names: Iterable[str]) -> dict[str, int]:
        """Ids of metric names, adding the new ones in their own short transaction."""
        new = {n for n in names if n not in self._name_ids}
        for n in new:
            if not isinstance(n, str) or not n:
                raise StoreError(f"metric name {n!r} is not a non-empty string")
        missing = sorted(new)  # one order for every writer: no deadlock between two
        if missing:

            def go(conn: Connection) -> list[Any]:
                ins = self._insert(MetricName.__table__).on_conflict_do_nothing(
                    index_elements=["name"]
                )
                conn.execute(ins, [{"name": n} for n in missing])
                q = select(MetricName.id, MetricName.name).where(MetricName.name.in_(missing))
                return list(conn.execute(q).all())

            for nid, name in self._write(go):
                self._name_ids[name] = int(nid)
        return self._name_ids

    def write_steps(
        self,
        run_id: int,
        steps: Iterable[tuple[int, dict[str, float], dict[str, Any]]],
    ) -> int:
        """Upsert many steps' metrics and distributions in one transaction.

        A step sent again (after a resume) overwrites what was stored for it; NaN and
        +-inf are kept as NULL plus a flag. Returns the number of metric rows written.
        """
        return self.write_batch({run_id: steps})

    def write_batch(
        self,
        steps: Mapping[int, Iterable[tuple[int, dict[str, float], dict[str, Any]]]],
        decisions: Iterable[DecisionIn] = (),
    ) -> int:
        """Steps of many runs (``{run_id: steps}``) and decisions (``(run_id, step, rule,
        action, evidence)``), written in ONE transaction: a sweep's writer flushes every
        trial's buffer at once. Returns the number of metric rows written."""
        merged = {rid: ingest.merge_steps(rid, ss) for rid, ss in steps.items()}
        merged = {rid: m for rid, m in merged.items() if m}
        ids = self._ids_for(n for m in merged.values() for _, mm, _ in m for n in mm)
        mrows = [r for rid, m in merged.items() for r in ingest.encode_metrics(rid, m, ids)]
        drows = [r for rid, m in merged.items() for r in ingest.encode_distributions(rid, m)]
        tops = {rid: max(s for s, _, _ in m) for rid, m in merged.items()}
        dec = [self._decision_values(*d) for d in decisions]
        if not merged and not dec:
            return 0

        def go(conn: Connection) -> None:
            # SQLite's two-argument max() is PostgreSQL's greatest()
            bigger = func.max if self.dialect == "sqlite" else func.greatest
            q = select(Run.id, Run.last_step, Run.active_at, Run.step_interval_s)
            before: dict[int, Any] = {}
            if tops:
                before = {int(r.id): r for r in conn.execute(q.where(Run.id.in_(list(tops))))}
            now = _now()
            for rid, top in tops.items():
                newest = bigger(func.coalesce(Run.last_step, top), top)
                values: dict[str, Any] = {"last_step": newest}
                if (old := before.get(rid)) is not None:
                    values.update(_activity(old, [s for s, _, _ in merged[rid]], now))
                res = conn.execute(update(Run).where(Run.id == rid).values(**values))
                if res.rowcount == 0:
                    raise StoreError(
                        f"no run with id {rid} in {self.url_display}: create it with ensure_run"
                    )
            self._upsert.metrics(conn, mrows)
            self._upsert.distributions(conn, drows)
            if dec:
                known = {r for r in tops}
                for rid in {d["run_id"] for d in dec} - known:
                    if conn.execute(select(Run.id).where(Run.id == rid)).first() is None:
                        raise StoreError(f"no run with id {rid} in {self.url_display}")
                ins = self._insert(Decision.__table__)
                ins = ins.on_conflict_do_update(
                    index_elements=["run_id", "step", "rule"],
                    set_={
                        "action": ins.excluded.action,
                        "evidence_json": ins.excluded.evidence_json,
                    },
                )
                conn.execute(ins, dec)

        self._write(go)
        return len(mrows)

    @staticmethod
    def _decision_values(
        run_id: int, step: int, rule: str, action: str, evidence: dict[str, Any]
    ) -> dict[str, Any]:
        _choice("action", action, ACTIONS)
        return {
            "run_id": int(run_id),
            "step": int(step),
            "rule": rule,
            "action": action,
            "evidence_json": _json_text(f"evidence of rule {rule!r}", evidence),
            "created": _now(),
        }

    def write_decision(
        self, run_id: int, step: int, rule: str, action: str, evidence: dict[str, Any]
    ) -> None:
        """Record a rule's decision; the same (run, step, rule) again overwrites it."""
        self.write_batch({}, [(run_id, step, rule, action, evidence)])

    # --- reads -----------------------------------------------------------------------

    def sweeps(self) -> list[SweepRow]:
        """Every sweep, oldest first, with its number of runs per status."""

        def go(conn: Connection) -> list[SweepRow]:
            counts: dict[int, dict[str, int]] = {}
            for sid, status, n in conn.execute(reads.SWEEP_COUNTS_SQL):
                counts.setdefault(int(sid), {})[str(status)] = int(n)
            rows = Session(bind=conn).scalars(select(Sweep).order_by(Sweep.id)).all()
            return [
                SweepRow(
                    id=s.id,
                    name=s.name,
                    status=s.status,
                    created=_utc(s.created),
                    config_text=s.config_text,
                    run_counts=counts.get(s.id, {}),
                )
                for s in rows
            ]

        return self._read(go)

    @staticmethod
    def _run_row(r: Run) -> RunRow:
        return RunRow(
            id=r.id,
            sweep_id=r.sweep_id,
            trial_id=r.trial_id,
            role=r.role,
            pair_key=r.pair_key,
            seed=r.seed,
            compression=r.compression,
            correction=r.correction,
            config=json.loads(r.config_json),
            status=r.status,
            stop_rule=r.stop_rule,
            stop_step=r.stop_step,
            error=r.error,
            started=_utc(r.started),
            ended=_opt_utc(r.ended),
            last_step=r.last_step,
            checkpoint_step=r.checkpoint_step,
            checkpoint_path=r.checkpoint_path,
            attempts=r.attempts,
            active_at=_opt_utc(r.active_at),
            step_interval_s=r.step_interval_s,
        )

    def runs(self, sweep_id: int | None = None) -> list[RunRow]:
        """Every run (of one sweep, if given) in id order, with its last stored step."""
        q = select(Run).order_by(Run.id)
        if sweep_id is not None:
            q = q.where(Run.sweep_id == sweep_id)
        return self._read(lambda c: [self._run_row(r) for r in Session(bind=c).scalars(q)])

    def run(self, run_id: int) -> RunRow:
        """One run; StoreError if the store has no such run."""
        r = self._read(lambda c: Session(bind=c).scalar(select(Run).where(Run.id == run_id)))
        if r is None:
            raise StoreError(f"no run with id {run_id} in {self.url_display}: see `gapwatch runs`")
        return self._run_row(r)

    def _known_ids(self, conn: Connection, names: Sequence[str]) -> dict[int, str]:
        """Ids of those of ``names`` the store knows (read-only: never inserts)."""
        want = [n for n in dict.fromkeys(names) if n not in self._name_ids]
        if want:
            q = select(MetricName.id, MetricName.name).where(MetricName.name.in_(want))
            for nid, name in conn.execute(q):
                self._name_ids[name] = int(nid)
        return {self._name_ids[n]: n for n in names if n in self._name_ids}

    def metric_names(self, run_id: int) -> list[str]:
        """Names of the metrics stored for a run, sorted."""
        return self._read(
            lambda c: [str(r[0]) for r in c.execute(reads.RUN_METRIC_NAMES_SQL, {"run_id": run_id})]
        )

    def non_finite(self, run_id: int) -> dict[str, dict[str, int]]:
        """Per metric name, how many of the run's stored values were not finite, by kind
        (``{"critic/score/mean": {"nan": 2, "inf": 1}}``); names with none are absent."""

        def go(conn: Connection) -> dict[str, dict[str, int]]:
            q = (
                select(MetricName.name, Metric.flag, func.count())
                .join(MetricName, MetricName.id == Metric.name_id)
                .where(Metric.run_id == run_id, Metric.flag.is_not(None))
                .group_by(MetricName.name, Metric.flag)
                .order_by(MetricName.name)
            )
            out: dict[str, dict[str, int]] = {}
            for name, flag, n in conn.execute(q):
                out.setdefault(str(name), {})[str(flag)] = int(n)
            return out

        return self._read(go)

    def series(
        self, run_ids: Sequence[int], names: Sequence[str], max_points: int = 500
    ) -> list[Point]:
        """Points of each (run, name) series, downsampled in SQL to <= ``max_points``.

        Keeps each series' first and last point and every bucket's min and max (see
        ``store.reads``). Ordered by run, name id, step. Non-finite points come back as
        ``value=None`` with ``flag`` 'nan' | 'inf' | '-inf'.
        """
        if max_points < 4:
            raise StoreError(
                f"max_points must be at least 4 (first, last, a min, a max), got {max_points}"
            )
        if not run_ids or not names:
            return []

        def go(conn: Connection) -> list[Point]:
            by_id = self._known_ids(conn, names)
            if not by_id:
                return []
            params = {
                "run_ids": [int(r) for r in run_ids],
                "name_ids": list(by_id),
                "max_points": max_points,
                "nb": reads.buckets_for(max_points),
            }
            return [
                Point(rid, by_id[nid], step, value, flag)
                for rid, nid, step, value, flag in conn.execute(self._series_sql, params)
            ]

        return self._read(go)

    def latest(
        self, run_ids: Sequence[int], names: Sequence[str]
    ) -> dict[int, dict[str, float | None]]:
        """The value at each series' newest step: {run_id: {name: value}} (None if not finite)."""
        out: dict[int, dict[str, float | None]] = {int(r): {} for r in run_ids}
        if not run_ids or not names:
            return out

        def go(conn: Connection) -> None:
            by_id = self._known_ids(conn, names)
            if not by_id:
                return
            params = {"run_ids": list(out), "name_ids": list(by_id)}
            for rid, nid, value in conn.execute(reads.LATEST_SQL, params):
                out[int(rid)][by_id[nid]] = value

        self._read(go)
        return out

    def history(
        self,
        run_id: int,
        *,
        after: int = -(2**31),
        until: int = 2**31,
        names: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Every step of a run as ``{"step": n, name: value, ...}``, oldest first; only the
        steps in (``after``, ``until``] and, with ``names``, only those metrics.

        For the rules, which compare numbers: a flagged value comes back as the float it
        was (nan, inf, -inf), not None.
        """

        def go(conn: Connection) -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            cur: dict[str, Any] | None = None
            params: dict[str, Any] = {"run_id": run_id, "after": int(after), "until": int(until)}
            sql = reads.HISTORY_SQL
            if names is not None:
                params["name_ids"] = list(self._known_ids(conn, names))
                if not params["name_ids"]:
                    return out
                sql = reads.HISTORY_OF_SQL
            for step, name, value, flag in conn.execute(sql, params):
                if cur is None or cur["step"] != step:
                    cur = {"step": int(step)}
                    out.append(cur)
                cur[name] = _FLOAT_OF_FLAG[flag] if flag is not None else value
            return out

        return self._read(go)

    def distribution_steps(self, run_id: int, name: str) -> list[int]:
        """Steps at which a run has the distribution ``name``, ascending."""
        q = (
            select(Distribution.step)
            .where(Distribution.run_id == run_id, Distribution.name == name)
            .order_by(Distribution.step)
        )
        return self._read(lambda c: [int(s) for s in c.execute(q).scalars()])

    def distributions(
        self, run_id: int, name: str, steps: Sequence[int] | None = None
    ) -> list[DistRow]:
        """A run's payloads of the distribution ``name`` (at ``steps``, or all), by step."""
        q = select(Distribution.step, Distribution.payload).where(
            Distribution.run_id == run_id, Distribution.name == name
        )
        if steps is not None:
            if not steps:
                return []
            q = q.where(Distribution.step.in_([int(s) for s in steps]))
        q = q.order_by(Distribution.step)
        return self._read(lambda c: [DistRow(int(s), json.loads(p)) for s, p in c.execute(q).all()])

    def decisions(
        self, run_id: int | None = None, sweep_id: int | None = None
    ) -> list[DecisionRow]:
        """Decisions of a run, of a sweep's runs, or all; by run, step, id."""
        q = select(Decision).order_by(Decision.run_id, Decision.step, Decision.id)
        if run_id is not None:
            q = q.where(Decision.run_id == run_id)
        if sweep_id is not None:
            q = q.join(Run, Run.id == Decision.run_id).where(Run.sweep_id == sweep_id)

        def go(conn: Connection) -> list[DecisionRow]:
            return [
                DecisionRow(
                    id=d.id,
                    run_id=d.run_id,
                    step=d.step,
                    rule=d.rule,
                    action=d.action,
                    evidence=json.loads(d.evidence_json),
                    created=_utc(d.created),
                )
                for d in Session(bind=conn).scalars(q)
            ]

        return self._read(go)

    def export_run(self, run_id: int, path: str | Path, *, overwrite: bool = False) -> int:
        """Write a run's metrics as a log ``gapwatch replay`` reads; returns the step count.

        ``.jsonl`` or ``.csv`` by the file name (formats: ``store.export``); an existing
        file is replaced only with ``overwrite``.
        """
        self.run(run_id)  # refuses an unknown run with a clear line
        out = export.check_target(path, overwrite=overwrite)
        return export.write_log(self.history(run_id), out)


def open_store(
    url: str | None = None, *, read_only: bool = False, busy_timeout_s: float | None = None
) -> Store:
    """Open (and, unless ``read_only``, create or upgrade) the store at ``url``.

    ``url``: ``sqlite:///path.db``, ``postgresql[+psycopg]://user@host:port/db`` or a bare
    path (a SQLite file); None -> ``$GAPWATCH_DB_URL`` -> ``sqlite:///./gapwatch.db``.
    ``read_only=True`` creates nothing and refuses a missing or out-of-date store.
    ``busy_timeout_s``: SQLite's wait on another writer's lock (``store.engine``).
    """
    u = eng.resolve_url(url)
    if u.drivername.startswith("sqlite"):
        eng.check_sqlite_file(u, read_only=read_only)
    engine = eng.make_engine(u, read_only=read_only, busy_timeout_s=busy_timeout_s)
    try:
        with eng.db_errors(u):
            eng.prepare_schema(engine, u, read_only=read_only)
    except BaseException:
        engine.dispose()
        raise
    return Store(engine, u, read_only=read_only)
