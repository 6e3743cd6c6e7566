"""trackio's local store (TRL's ``report_to="trackio"``): one SQLite database per project,
``$TRACKIO_DIR/<project>.db`` (default ``~/.cache/huggingface/trackio``), whose
``metrics`` table holds one row per log call: ``run_name``, ``step`` and the figures as a
JSON object (non-finite values as ``"NaN"``/``"Infinity"``; schema read off trackio
0.43's ``sqlite_storage.py``). Read with Python's ``sqlite3``, read-only.

A database with several runs: the run written last (the others are named in the
notes). The step is the row's ``step``, or transformers' ``train/global_step`` where a
row has one. The path may be the ``.db`` file or the folder holding one project's.

Detected by the SQLite header with a ``metrics`` table, or a folder of ``*.db`` files.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from gapwatch.orchestrator.readers.base import (
    Busy,
    Entry,
    LogError,
    WholeReader,
    files_signature,
    number,
    register,
)
from gapwatch.orchestrator.readers.jsonl import loads

SQLITE_MAGIC = "SQLite format 3\x00"


def database(path: Path) -> Path:
    """The project database at ``path`` (the file, or the only/latest ``*.db`` under it)."""
    if path.is_file():
        return path
    dbs = sorted(path.glob("*.db"), key=lambda p: p.stat().st_mtime)
    if not dbs:
        raise LogError(f"{path}: no trackio database (*.db) in it")
    return dbs[-1]


@register("trackio")
class Trackio(WholeReader):
    describe = "trackio's local SQLite store (<project>.db)"

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        if path.is_dir():
            return any(_has_metrics(p) for p in path.glob("*.db"))
        return head.startswith(SQLITE_MAGIC) and _has_metrics(path)

    def signature(self, path: Path) -> tuple[Any, ...]:
        db = database(path)
        return files_signature(db) + files_signature(db.with_name(db.name + "-wal"))

    def entries(self, path: Path) -> list[Entry]:
        db = database(path)
        try:
            con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=5)
            try:
                rows = con.execute(
                    "SELECT run_name, step, metrics FROM metrics ORDER BY id"
                ).fetchall()
            finally:
                con.close()
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc):
                raise Busy(str(exc)) from None
            raise LogError(f"{db}: not a trackio database ({exc})") from None
        except sqlite3.DatabaseError as exc:
            raise LogError(f"{db}: not a trackio database ({exc})") from None
        runs = list(dict.fromkeys(r[0] for r in rows))
        if not runs:
            return []
        run = rows[-1][0]
        if len(runs) > 1:
            note = f"runs in {db.name}: {', '.join(map(str, runs))}; read the last written, {run}"
            if note not in self.notes:
                self.notes.append(note)
        out = []
        for name, step, blob in rows:
            if name != run:
                continue
            try:
                obj = loads(blob)
            except ValueError:
                continue
            if not isinstance(obj, dict):
                continue
            metrics: dict[str, float] = {}
            ignored: list[str] = []
            for k, v in obj.items():
                x = number(v)
                if x is None:
                    ignored.append(k)
                else:
                    metrics[k] = x
            gs = metrics.pop("train/global_step", None)
            s = int(gs) if gs is not None and gs == gs and gs >= 0 else int(step or 0)
            out.append(Entry(s, metrics, tuple(ignored), "trackio"))
        return out


def _has_metrics(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            if fh.read(16) != SQLITE_MAGIC.encode():
                return False
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1)
        try:
            found = con.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name='metrics'"
            ).fetchone()
        finally:
            con.close()
        return found is not None
    except (OSError, sqlite3.Error):
        return False
