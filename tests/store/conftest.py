"""Store fixtures: every store test runs on a temporary SQLite file and on PostgreSQL.

PostgreSQL: the machine's server at 127.0.0.1:5432 (trust auth). The session creates its
own database ``gapwatch_test_<random>`` through a connection to ``test`` and drops it at
the end; each test gets a fresh schema in it (``search_path`` set in the URL). Without a
server the PostgreSQL cases skip, unless ``GAPWATCH_REQUIRE_PG=1`` (CI) makes that a
failure.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from gapwatch.store import Store, open_store

PG_HOST, PG_PORT = "127.0.0.1", 5432


@pytest.fixture(scope="session")
def pg_database(pg_user: str) -> Iterator[tuple[str, str]]:
    """(user, database) of this session's own PostgreSQL database (dropped at the end)."""
    user = pg_user
    name = f"gapwatch_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(
        host=PG_HOST, port=PG_PORT, user=user, dbname="test", autocommit=True
    ) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield user, name
    finally:
        with psycopg.connect(
            host=PG_HOST, port=PG_PORT, user=user, dbname="test", autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """URL of a fresh, not yet created store on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    # asked for here, not as an argument: without a server only the PostgreSQL case skips
    user, db = request.getfixturevalue("pg_database")
    schema = f"t_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(host=PG_HOST, port=PG_PORT, user=user, dbname=db, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield (
            f"postgresql+psycopg://{user}@{PG_HOST}:{PG_PORT}/{db}?options=-csearch_path%3D{schema}"
        )
    finally:
        with psycopg.connect(
            host=PG_HOST, port=PG_PORT, user=user, dbname=db, autocommit=True
        ) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def st(store_url: str) -> Iterator[Store]:
    """An open, empty store at head on each backend."""
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def make_run(st: Store) -> Callable[..., int]:
    """``make_run(trial="t0", sweep="sw", role="control")``: a run to write into."""

    def make(trial: str = "t0", sweep: str = "sw", role: str = "control") -> int:
        sid = st.ensure_sweep(sweep, "steps: 10")
        return st.ensure_run(
            sid,
            trial,
            role=role,
            pair_key="p0",
            seed=0,
            compression="none" if role == "control" else "quant2",
            correction="none",
            config={"steps": 10},
        )

    return make
