"""Engine from a URL, error translation, and programmatic Alembic migrations.

``resolve_url`` picks the URL (argument, ``$GAPWATCH_DB_URL``, ``sqlite:///./gapwatch.db``),
``make_engine`` builds a configured engine (SQLite: WAL, busy timeout, foreign keys, write
transactions opened with ``BEGIN IMMEDIATE``; PostgreSQL through psycopg), and
``prepare_schema`` checks the stored revision and upgrades it to head. Every failure a user
can fix becomes one ``StoreError`` line that says what to change.

A database without ``alembic_version`` is refused when it already holds a table named
like one of ours (any table at all, for a SQLite file: that file is someone else's);
a PostgreSQL database holding only other applications' tables gets the store beside them.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from .errors import StoreError
from .ingest import PG_STAGING_DDL

DEFAULT_URL = "sqlite:///./gapwatch.db"
ENV_VAR = "GAPWATCH_DB_URL"
BUSY_TIMEOUT_MS = 30_000
MIGRATIONS_DIR = Path(__file__).with_name("migrations")
GAPWATCH_TABLES = frozenset(
    {"sweeps", "runs", "metric_names", "metrics", "distributions", "decisions", "alembic_version"}
)
WRITE = {"gapwatch_write": True}
"""Execution options of a connection that writes: on SQLite it begins ``IMMEDIATE``."""
NEW_FILE_S = 30.0
"""An empty SQLite file younger than this may be a store another process is creating."""
_HOW = "check --db / GAPWATCH_DB_URL"


_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def mask(text: str) -> str:
    """``text`` (a URL that may not even parse) with any password replaced by ``***``."""
    return _PASSWORD.sub(r"\1***@", text)


def resolve_url(url: str | None) -> URL:
    """The store URL to use, normalised: psycopg driver for PostgreSQL, paths as SQLite."""
    raw = url or os.environ.get(ENV_VAR) or DEFAULT_URL
    if "://" not in raw and not raw.startswith("sqlite:"):
        raw = f"sqlite:///{raw}"  # a bare path means a SQLite file
    try:
        u = make_url(raw)
    except ArgumentError:
        raise StoreError(
            f"cannot parse store URL {mask(raw)!r}: use sqlite:///path.db or "
            "postgresql+psycopg://user@host:5432/db"
        ) from None
    except ValueError:  # a port that is not a number
        raise StoreError(
            f"store URL {mask(raw)!r} has a port that is not a number: write host:5432"
        ) from None
    if u.drivername in ("postgresql", "postgres", "postgresql+psycopg2", "postgresql+psycopg"):
        return u.set(drivername="postgresql+psycopg")
    if u.drivername in ("sqlite", "sqlite+pysqlite"):
        return u.set(drivername="sqlite+pysqlite")
    raise StoreError(
        f"unsupported store URL scheme {u.drivername!r}: use sqlite:///path.db or "
        "postgresql+psycopg://user@host:5432/db"
    )


def display(u: URL) -> str:
    """The URL as text with any password masked (SQLite without the driver name)."""
    if u.drivername == "sqlite+pysqlite":
        u = u.set(drivername="sqlite")
    return u.render_as_string(hide_password=True)


def sqlite_path(u: URL) -> Path | None:
    """The SQLite file a URL names, or None for an in-memory database."""
    db = u.database
    if not db or db == ":memory:" or db.startswith("file::memory:"):
        return None
    return Path(db)


def _is_sqlite(path: Path) -> bool:
    """Whether ``path`` is a SQLite database, asked of SQLite (read-only), not read with
    ``open()``: closing any descriptor of a file drops every POSIX lock this process holds
    on it, the shared locks of its open SQLite connections included (SQLite itself keeps
    such descriptors open); another process closing its last connection then takes the
    file for its own, checkpoints and deletes the WAL under them, and their next statement
    fails with "disk I/O error" (seen with a second store opened in one process, then a
    lock holder in another that exited: tests/orchestrator/test_recorder_outage.py)."""
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=0)
    except sqlite3.Error:
        return True  # cannot be opened now: SQLite itself says why, with the same words
    try:
        con.execute("PRAGMA schema_version").fetchone()
    except sqlite3.DatabaseError as exc:
        low = str(exc).lower()
        return not ("not a database" in low or "malformed" in low)
    finally:
        con.close()
    return True


def check_sqlite_file(u: URL, *, read_only: bool) -> None:
    """Refuse, before SQLite sees it, a path in a missing directory or a non-SQLite file."""
    path = sqlite_path(u)
    if path is None:
        return
    if not path.parent.exists():
        raise StoreError(
            f"directory {path.parent} does not exist: create it (mkdir -p {path.parent}) or {_HOW}"
        )
    if not path.exists():
        if read_only:
            raise StoreError(
                f"no gapwatch store at {path}: run `gapwatch db upgrade --db {display(u)}` "
                f"or a sweep first, or {_HOW}"
            )
        return
    if path.is_file() and path.stat().st_size == 0:
        # SQLite creates the file before it writes the first page: a store another process
        # is creating this moment is empty too. An empty file that old is no such store.
        if time.time() - path.stat().st_mtime < NEW_FILE_S:
            if read_only:
                raise StoreError(f"the store at {path} is being created: try again in a moment")
            return
        raise StoreError(
            f"{path} is an empty file (0 bytes), not a gapwatch store: a mistyped --db? "
            "Remove it or point --db at a store (a new path is created)"
        )
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not a store file: {_HOW}")
    if not _is_sqlite(path):
        raise StoreError(
            f"{path} is not a SQLite database (corrupt or another kind of file): "
            f"point --db at a gapwatch store or a new file"
        )


def make_engine(u: URL, *, read_only: bool, busy_timeout_s: float | None = None) -> Engine:
    """A configured engine for a resolved URL (see the module docstring).

    ``busy_timeout_s`` (SQLite): how long a statement waits on another writer's lock
    before it fails "database is locked"; default ``BUSY_TIMEOUT_MS``.
    """
    if u.drivername.startswith("sqlite"):
        ms = BUSY_TIMEOUT_MS if busy_timeout_s is None else max(1, round(busy_timeout_s * 1000))
        return _sqlite_engine(u, read_only=read_only, busy_ms=ms)
    args: dict[str, Any] = {"connect_timeout": 5}
    if read_only:
        # Keep any libpq options the URL carries (e.g. a search_path) and add ours.
        given = u.query.get("options", ())
        given = (given,) if isinstance(given, str) else tuple(given)
        args["options"] = " ".join((*given, "-c default_transaction_read_only=on"))
        u = u.difference_update_query(["options"])
    engine = create_engine(u, connect_args=args, pool_pre_ping=True)
    if not read_only:

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # The staging table of the COPY ingest path, once per connection (not per call).
            with dbapi_conn.cursor() as cur:
                cur.execute(PG_STAGING_DDL)
            dbapi_conn.commit()

    return engine


def _set_wal(cur: Any) -> None:
    """Switch the file to WAL, retrying within the busy timeout.

    SQLite answers "database is locked" at once, without its busy handler, when another
    connection holds a lock while this one changes the journal mode (two processes
    creating one new store); the switch is retried instead of failing the open.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _sqlite_engine(u: URL, *, read_only: bool, busy_ms: int = BUSY_TIMEOUT_MS) -> Engine:
    kwargs: dict[str, Any] = {"connect_args": {"timeout": busy_ms / 1000}}
    if sqlite_path(u) is None:
        kwargs["poolclass"] = StaticPool
        kwargs["connect_args"]["check_same_thread"] = False
    engine = create_engine(u, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # The driver's own transaction handling is off; _on_begin emits BEGIN itself, so
        # DDL is transactional and a writer takes the write lock up front.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {busy_ms}")
            cur.execute("PRAGMA foreign_keys = ON")
            if read_only:
                cur.execute("PRAGMA query_only = ON")
            else:
                _set_wal(cur)
                cur.execute("PRAGMA synchronous = NORMAL")
            cur.execute("PRAGMA cache_size = -65536")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get("gapwatch_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def translate(exc: BaseException, u: URL) -> StoreError:
    """One clear line for a database error, with what to do about it."""
    where = display(u)
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    msg = " ".join(str(orig).split()) or type(orig).__name__
    low = msg.lower()
    if u.drivername.startswith("sqlite"):
        if "file is not a database" in low or "malformed" in low or "not a database" in low:
            return StoreError(
                f"{sqlite_path(u)} is not a readable SQLite database ({msg}): "
                "point --db at a gapwatch store or a new file"
            )
        if "unable to open database" in low:
            return StoreError(f"cannot open the SQLite store {where} ({msg}): {_HOW}")
        if "locked" in low or "busy" in low:
            return StoreError(
                f"store {where} stayed locked by another writer for "
                f"{BUSY_TIMEOUT_MS / 1000:g} s (and retries): retry, or stop the other writer"
            )
        if "readonly" in low or "read-only" in low:
            return StoreError(f"store {where} is read-only here ({msg}): open it for writing")
        return StoreError(f"store {where}: {msg}")
    m = re.search(r'database "([^"]+)" does not exist', msg)
    if m:
        return StoreError(
            f"database {m.group(1)!r} does not exist on {u.host or 'localhost'}: "
            f"create it (createdb {m.group(1)}) or {_HOW}"
        )
    if "password authentication failed" in low or "no password supplied" in low:
        return StoreError(f"PostgreSQL refused the login for {where}: {_HOW}")
    m = re.search(r'role "([^"]+)" does not exist', msg)
    if m:
        return StoreError(
            f"PostgreSQL at {u.host or 'localhost'}:{u.port or 5432} has no role {m.group(1)!r}: "
            f"create it (createuser {m.group(1)}) or connect as another user; {_HOW}"
        )
    if "read-only transaction" in low:
        return StoreError(f"store {where} was opened read-only; this call writes")
    connect_words = (
        "connection refused",
        "could not connect",
        "connection failed",
        "timeout expired",
        "could not translate host",
        "connection is bad",
        "server closed the connection",
        "name or service not known",
    )
    if any(w in low for w in connect_words):
        return StoreError(f"cannot connect to {where}: is the server running? {_HOW}")
    return StoreError(f"store {where}: {msg}")


_GONE_PG = (
    "connection refused", "could not connect", "connection failed", "timeout expired",
    "server closed the connection", "terminating connection", "connection is bad",
    "connection is closed", "the database system is shutting down",
    "the database system is starting up", "the database system is in recovery mode",
    "consuming input failed", "ssl syscall error", "no route to host",
    "network is unreachable", "connection reset", "broken pipe", "connection timed out",
)  # fmt: skip
"""What psycopg says when the server went away or is not (yet) accepting connections."""
_GONE_SQLITE = ("database is locked", "database table is locked", "database is busy",
                "unable to open database file")  # fmt: skip
"""What SQLite says when another process holds the file (or it cannot be opened now)."""


def unreachable(exc: BaseException) -> str | None:
    """Why the store cannot be reached right now (one line), or None for any other error.

    An unreachable store (PostgreSQL stopped, restarting or cut off; a SQLite file
    locked by another writer past the busy timeout) is worth retrying as it is; any
    other error (bad data, a missing table, a read-only store) is not. Takes a
    ``StoreError`` from :func:`db_errors` (its cause is looked at) or the driver's error.
    """
    cause: BaseException | None = exc
    while isinstance(cause, StoreError) and cause.__cause__ is not None:
        cause = cause.__cause__
    if cause is None or isinstance(cause, StoreError):
        return None
    orig = cause.orig if isinstance(cause, DBAPIError) else cause
    text = " ".join(str(orig).split()) or type(orig).__name__
    low = text.lower()
    if isinstance(orig, sqlite3.Error):
        return text if any(w in low for w in _GONE_SQLITE) else None
    if isinstance(cause, DBAPIError) and cause.connection_invalidated:
        return text
    gone = any(w in low for w in _GONE_PG)
    if isinstance(orig, ConnectionError | TimeoutError) or gone:
        return text.split(" Is the server running")[0][:300]
    return None


@contextmanager
def db_errors(u: URL) -> Iterator[None]:
    """Turn any SQLAlchemy/driver error inside the block into one ``StoreError`` line."""
    try:
        yield
    except StoreError:
        raise
    except (SQLAlchemyError, OSError) as exc:
        raise translate(exc, u) from exc


# --- migrations -------------------------------------------------------------------


def _alembic_config(conn: Connection | None = None) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if conn is not None:
        cfg.attributes["connection"] = conn
    return cfg


def known_revisions() -> tuple[list[str], str]:
    """(every revision this gapwatch ships, oldest first; the head revision)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_alembic_config())
    revs = [r.revision for r in script.walk_revisions()][::-1]
    head = script.get_current_head()
    assert head is not None
    return revs, head


def current_revision(conn: Connection) -> str | None:
    """The store's revision (None where the database holds no ``alembic_version``)."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    row = conn.exec_driver_sql("SELECT version_num FROM alembic_version").first()
    return None if row is None else str(row[0])


def upgrade(engine: Engine, target: str = "head") -> None:
    """Bring the schema to ``target`` in one transaction that holds the write lock."""
    from alembic import command

    with engine.connect().execution_options(**WRITE) as conn, conn.begin():
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7294011)")
        command.upgrade(_alembic_config(conn), target)


def prepare_schema(engine: Engine, u: URL, *, read_only: bool) -> str:
    """Check the stored schema and bring it to head (writable) or refuse (read-only).

    Returns the revision the store is at afterwards.
    """
    where = display(u)
    revs, head = known_revisions()
    with engine.connect() as conn:
        current = current_revision(conn)
        tables = set(inspect(conn).get_table_names())
        conn.rollback()
    if current is None:
        foreign = sorted(tables - GAPWATCH_TABLES)
        ours = sorted(tables & GAPWATCH_TABLES)
        if ours or (foreign and engine.dialect.name == "sqlite"):
            shown = ", ".join((ours or foreign)[:5])
            raise StoreError(
                f"{where} holds tables that are not a gapwatch store ({shown}): "
                "use a new file or database for the store"
            )
        if read_only:
            raise StoreError(
                f"no gapwatch store at {where}: run `gapwatch db upgrade --db {where}` "
                f"or a sweep first, or {_HOW}"
            )
    elif current not in revs:
        raise StoreError(
            f"store {where} is at schema revision {current!r}, which this gapwatch does not "
            f"know (its newest is {head!r}): upgrade gapwatch, or use another store"
        )
    if current == head:
        return head
    if read_only:
        raise StoreError(
            f"store {where} is at schema revision {current!r}, older than {head!r}: "
            f"run `gapwatch db upgrade --db {where}`"
        )
    upgrade(engine)
    return head
