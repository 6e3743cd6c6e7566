"""Schema migrations and the errors of opening a store, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import multiprocessing as mp
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from gapwatch.store import StoreError, open_store
from gapwatch.store import engine as eng
from gapwatch.store.schema import Base


def _engine(url: str):  # type: ignore[no-untyped-def]
    return eng.make_engine(eng.resolve_url(url), read_only=False)


def test_the_real_revisions_ship_in_the_package() -> None:
    revs, head = eng.known_revisions()
    assert revs == ["0001", "0002", "0003", "0004", "0005", "0006", "0007"] and head == "0007"
    assert (eng.MIGRATIONS_DIR / "env.py").exists()


def test_empty_database_is_upgraded_to_head(store_url: str) -> None:
    with open_store(store_url) as st:
        assert st.revision() == "0007"
        tables = set(inspect(st.engine).get_table_names())
    assert {"sweeps", "runs", "metrics", "metric_names", "distributions", "decisions"} <= tables
    with open_store(store_url) as st:  # a second open is a no-op
        assert st.revision() == "0007"


def test_orm_schema_matches_the_migrations(store_url: str) -> None:
    with open_store(store_url) as st, st.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


@pytest.mark.parametrize("start", ["0001", "0002", "0003", "0006"])
def test_database_at_an_older_revision_is_upgraded_and_keeps_its_data(
    store_url: str, start: str
) -> None:
    engine = _engine(store_url)
    eng.upgrade(engine, start)
    now = datetime.now(UTC)
    with engine.begin() as conn:
        assert eng.current_revision(conn) == start
        conn.execute(
            text(
                "INSERT INTO sweeps (id, name, config_text, created, status) "
                "VALUES (1, 'old', 'cfg', :t, 'completed')"
            ),
            {"t": now},
        )
        conn.execute(
            text(
                "INSERT INTO runs (id, sweep_id, trial_id, role, pair_key, seed, compression,"
                " correction, config_json, status, started) VALUES (1, 1, 't', 'control',"
                " 'p', 0, 'none', 'none', '{}', 'completed', :t)"
            ),
            {"t": now},
        )
        conn.execute(text("INSERT INTO metric_names (id, name) VALUES (1, 'critic/score/mean')"))
        conn.execute(
            text(
                "INSERT INTO metrics (run_id, name_id, step, value) VALUES "
                "(1, 1, 1, 0.5), (1, 1, 2, NULL), (1, 1, 9, 0.7)"
            )
        )
        if start != "0001":  # what 0002's write_steps kept up to date
            conn.execute(text("UPDATE runs SET last_step = 9"))
    engine.dispose()

    with open_store(store_url) as st:
        assert st.revision() == "0007"
        assert [s.name for s in st.sweeps()] == ["old"]
        assert st.run(1).last_step == 9  # 0001 -> 0002 backfills it
        assert [(p.step, p.value, p.flag) for p in st.series([1], ["critic/score/mean"])] == [
            (1, 0.5, None),
            (2, None, None),
            (9, 0.7, None),
        ]
        assert st.run(1).active_at is None  # 0007: not known for an older run
        st.write_steps(1, [(10, {"critic/score/mean": float("nan")}, {})])
        assert st.series([1], ["critic/score/mean"])[-1].flag == "nan"
        assert st.run(1).active_at is not None and st.run(1).step_interval_s is None


def _old_run(conn: Any, rid: int, sweep: int, trial: str, role: str, labels: tuple[str, str, str],
             config: dict[str, Any]) -> None:  # fmt: skip
    conn.execute(
        text(
            "INSERT INTO runs (id, sweep_id, trial_id, role, pair_key, seed, compression,"
            " correction, config_json, status, started) VALUES (:id, :sw, :trial, :role, :pair,"
            " :seed, :comp, :corr, :cfg, 'completed', :t)"
        ),
        {"id": rid, "sw": sweep, "trial": trial, "role": role, "pair": labels[0],
         "seed": config["seed"], "comp": labels[1], "corr": labels[2],
         "cfg": json.dumps(config), "t": datetime.now(UTC)},
    )  # fmt: skip


def test_0004_relabels_old_runs_with_the_one_identity(store_url: str) -> None:
    """A sweep's runs and `gapwatch run`'s runs, labelled by the two old codes, come out
    with store.identity's keys and labels; a foreign config is left alone."""
    engine = _engine(store_url)
    eng.upgrade(engine, "0003")
    now = datetime.now(UTC)
    sweep_run = {"name": "s0-quant_bits2-tis", "env": "mul", "model": "tiny", "seed": 0,
                 "steps": 4, "compression": "quant", "compression_kwargs": {"bits": 2},
                 "correction": "tis", "correction_kwargs": {}}  # fmt: skip
    control = {**sweep_run, "name": "s0-control", "compression": "none",
               "compression_kwargs": {}, "correction": "none"}  # fmt: skip
    local = {**sweep_run, "name": "mine", "compression_layers": 2, "correction": "icepop",
             "correction_kwargs": {"lo": 0.8}}  # fmt: skip
    with engine.begin() as conn:
        for sid, name in ((1, "old"), (2, "local")):
            conn.execute(
                text(
                    "INSERT INTO sweeps (id, name, config_text, created, status) "
                    "VALUES (:id, :name, '', :t, 'completed')"
                ),
                {"id": sid, "name": name, "t": now},
            )
        _old_run(conn, 1, 1, "s0-control", "control", ("mul/tiny/seed0", "none", "none"), control)
        _old_run(conn, 2, 1, "s0-quant_bits2-tis", "treatment",
                 ("mul/tiny/seed0", "quant(bits=2)", "tis"), sweep_run)  # fmt: skip
        _old_run(conn, 3, 2, "mine-0-abcd", "treatment",
                 ("mul-s0-abcd", "quant:bits=2@every2", "icepop"), local)  # fmt: skip
        _old_run(conn, 4, 2, "trl-run", "treatment", ("x", "fp8", "tis"),
                 {"trainer": "trl", "seed": 1})  # fmt: skip
    engine.dispose()

    with open_store(store_url) as st:
        runs = {r.id: r for r in st.runs()}
    ctl, treat, mine, foreign = runs[1], runs[2], runs[3], runs[4]
    assert (ctl.trial_id, ctl.compression, ctl.correction) == ("s0-control", "none", "none")
    assert (treat.trial_id, treat.compression, treat.correction) == (
        "s0-quant_bits2-tis_C2", "quant(bits=2)", "tis(C=2)",
    )  # fmt: skip
    assert treat.config["correction_kwargs"] == {"C": 2.0}
    assert ctl.pair_key == treat.pair_key and ctl.pair_key.startswith("mul/tiny/s0@")
    assert (mine.compression, mine.correction) == ("quant(bits=2)@every2", "icepop(lo=0.8,hi=5)")
    assert mine.trial_id == f"s0-quant_bits2_every2-icepop_lo0.8_hi5@{mine.pair_key[-8:]}"
    assert (foreign.trial_id, foreign.pair_key, foreign.correction) == ("trl-run", "x", "tis")


def test_read_only_open_refuses_an_old_schema(store_url: str) -> None:
    engine = _engine(store_url)
    eng.upgrade(engine, "0001")
    engine.dispose()
    with pytest.raises(StoreError, match=r"older than '0007': run `gapwatch db upgrade"):
        open_store(store_url, read_only=True)


def test_newer_unknown_revision_is_refused(store_url: str) -> None:
    open_store(store_url).close()
    engine = _engine(store_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    with pytest.raises(StoreError, match=r"revision '0099', which this gapwatch does not know"):
        open_store(store_url)


def test_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    for ro in (False, True):
        with pytest.raises(
            StoreError, match=r"holds tables that are not a gapwatch store \(customers\)"
        ):
            open_store(f"sqlite:///{path}", read_only=ro)
    with sqlite3.connect(path) as c:  # untouched
        names = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert names == ["customers"]


def test_corrupt_file_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database at all\n" * 100)
    with pytest.raises(StoreError, match="is not a SQLite database"):
        open_store(f"sqlite:///{junk}")
    # a real SQLite header over garbage pages: SQLite itself reports it
    bad = tmp_path / "bad.db"
    with sqlite3.connect(bad) as c:
        c.execute("CREATE TABLE t (x)")
    data = bytearray(bad.read_bytes())
    data[100:] = b"\xff" * (len(data) - 100)
    bad.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="not a readable SQLite database|not a SQLite database"):
        open_store(str(bad))


def test_missing_directory_and_bad_urls(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"directory .*nope does not exist: create it"):
        open_store(f"sqlite:///{tmp_path / 'nope' / 'g.db'}")
    with pytest.raises(StoreError, match="unsupported store URL scheme 'mysql'"):
        open_store("mysql://u@h/db")
    with pytest.raises(StoreError, match="no gapwatch store at"):
        open_store(str(tmp_path / "missing.db"), read_only=True)
    assert not (tmp_path / "missing.db").exists()


def test_unreachable_postgresql_is_one_clear_line() -> None:
    with pytest.raises(StoreError) as info:
        open_store("postgresql://root@127.0.0.1:1/test")
    msg = str(info.value)
    assert msg.startswith("cannot connect to postgresql+psycopg://root@127.0.0.1:1/test")
    assert "is the server running? check --db / GAPWATCH_DB_URL" in msg and "\n" not in msg


def test_url_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(eng.ENV_VAR, raising=False)
    assert eng.display(eng.resolve_url(None)) == "sqlite:///./gapwatch.db"
    monkeypatch.setenv(eng.ENV_VAR, "postgresql://u:secret@h:5433/d")
    u = eng.resolve_url(None)
    assert u.drivername == "postgresql+psycopg" and "secret" not in eng.display(u)
    assert eng.display(u) == "postgresql+psycopg://u:***@h:5433/d"
    assert eng.resolve_url("x/y.db").database == "x/y.db"


def test_sqlite_pragmas(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    with open_store(url) as st, st.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == eng.BUSY_TIMEOUT_MS
    raw = create_engine(url)
    with raw.connect() as conn:  # WAL persists in the file for every later opener
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    raw.dispose()


def _open_and_write(url: str, trial: str, start: Any) -> None:
    start.wait(30)
    with open_store(url) as st:
        sid = st.ensure_sweep("race", "")
        rid = st.ensure_run(
            sid,
            trial,
            role="control",
            pair_key="p",
            seed=0,
            compression="n",
            correction="n",
            config={},
        )
        st.write_steps(rid, [(1, {"m": 1.0}, {})])


def test_two_processes_creating_one_new_store_at_once(store_url: str) -> None:
    ctx = mp.get_context("fork")
    start = ctx.Barrier(2)
    procs = [ctx.Process(target=_open_and_write, args=(store_url, f"t{i}", start)) for i in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    with open_store(store_url) as st:
        assert st.revision() == "0007"
        assert sorted(r.trial_id for r in st.runs()) == ["t0", "t1"]


def test_in_memory_sqlite_store() -> None:
    with open_store("sqlite://") as st:
        sid = st.ensure_sweep("mem", "")
        assert [s.id for s in st.sweeps()] == [sid] and st.revision() == "0007"


def test_missing_postgres_database_is_named(pg_user: str) -> None:
    user = pg_user
    with pytest.raises(StoreError, match="database 'gapwatch_no_such_db' does not exist"):
        open_store(f"postgresql://{user}@127.0.0.1:5432/gapwatch_no_such_db")


def test_tables_named_like_ours_without_a_revision_are_refused(store_url: str) -> None:
    engine = _engine(store_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE runs (x INTEGER)"))
    engine.dispose()
    with pytest.raises(StoreError, match=r"holds tables that are not a gapwatch store \(runs\)"):
        open_store(store_url)
