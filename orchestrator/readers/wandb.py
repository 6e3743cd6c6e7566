"""Weights & Biases run files (TRL/transformers ``report_to="wandb"``, verl's ``wandb``
logger, any ``wandb.log``): the ``run-<id>.wandb`` file W&B writes into every run's
folder, ``wandb/run-<date>_<time>-<id>/`` (``offline-run-...`` offline), online or
offline, read with no account and no network.

The file is W&B's transaction log: a 7-byte header (``:W&B``, magic ``0xBEE1``, format
version 0), then LevelDB's log format (32 KiB blocks of chunks, each a CRC-32, a length,
a type: full, or first/middle/last of a record cut across blocks; a block's last < 7
bytes are zeros). Each record is a ``wandb.proto.wandb_internal_pb2.Record`` protobuf,
decoded with the ``wandb`` package's own classes. The framing is read here: the wandb
package no longer ships a Python reader of it (``wandb.sdk.internal.datastore`` is gone
by wandb 0.31; its Go core reads the file). The layout was read off that datastore and
the core's ``leveldb/record.go``.

History records are the rows. The step is the run's step metric where it set one for
every key (``wandb.define_metric("*", step_metric=...)``) under a name a step goes by
(``readers.base.STEP_ALIASES``: transformers' and TRL's ``train/global_step``,
Lightning's ``trainer/global_step``; W&B's ``_step`` counts their log calls, profiling
ones included), taken out of the figures as any log's step field is; else W&B's
``_step`` (verl logs with ``step=``; W&B's CSV and JSON exports use it too), and a
logged ``train/global_step`` or ``epoch`` stays a figure. A key is the logged name
(``train/reward``, ``critic/score/mean``; a nested dict's keys joined with ``.``);
numbers are kept (``NaN`` too), other values (text, booleans, media, histograms) left
out and named, W&B's own ``_runtime``, ``_timestamp`` and other ``_`` keys dropped.

A run still being written: recent wandb flushes the file every 15 s by default
(``x_transaction_log_flush_interval``), so a follower sees steps in bursts. A record
cut at the end of the file is waited for: read when the rest is there (the reader keeps
its place, so a growing file is read from where it left off). A corrupt chunk is said
in the notes and skipped to the next block, as W&B's own reader does; what is readable
around it is kept.

The path may be the ``.wandb`` file, its run folder, or a ``wandb/`` folder of runs (its
newest run, by start time in the folder's name, named in the notes). Detected by the
``.wandb`` name or the ``:W&B`` header, or a folder holding such a file (or runs that do).
"""

from __future__ import annotations

import math
import os
import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gapwatch.orchestrator.readers.base import (
    MAX_STEP,
    STEP_ALIASES,
    Entry,
    LogError,
    WholeReader,
    files_signature,
    register,
)
from gapwatch.orchestrator.readers.jsonl import loads

INSTALL = "pip install wandb"
SUFFIX = ".wandb"
IDENT = b":W&B"
MAGIC = IDENT + struct.pack("<H", 0xBEE1)
"""The file's first 6 bytes: ident and magic (the 7th is the format version)."""
VERSION = 0
HEAD_LEN = 7
"""Bytes of the file header, and of each chunk's header (checksum, length, type)."""
BLOCK = 32 << 10
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
_CRC_SEED = {t: zlib.crc32(bytes((t,))) for t in (FULL, FIRST, MIDDLE, LAST)}
"""A chunk's CRC-32 covers its type byte, then its payload."""
_RUN_DIR = re.compile(r"^(?:offline-)?run-(\d{8}_\d{6})-")


def _record_class() -> Any:
    try:
        # the module re-exports one of v5/v6/v7 by protobuf's version: mypy sees none
        from wandb.proto.wandb_internal_pb2 import Record  # type: ignore[attr-defined]
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "wandb":
            raise LogError(f"reading W&B run files needs the wandb package: {INSTALL}") from None
        raise LogError(f"the wandb package cannot be imported ({exc}); {INSTALL} -U") from None
    except ImportError as exc:  # wandb's protobufs refuse the installed protobuf
        msg = " ".join(str(exc).split())[:160]
        raise LogError(f"the wandb package cannot be imported ({msg}); {INSTALL} -U") from None
    return Record


def _has_magic(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _run_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob(f"*{SUFFIX}") if p.is_file())


def _runs(folder: Path) -> list[Path]:
    """The run folders of a ``wandb/`` folder (``latest-run``, a link, left out)."""
    return [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and _run_files(p)]


def _started(run: Path) -> tuple[str, float]:
    """Sort key of a run folder: its start time from its name, then its file's mtime."""
    m = _RUN_DIR.match(run.name)
    try:
        mtime = max(f.stat().st_mtime for f in _run_files(run))
    except (OSError, ValueError):
        mtime = 0.0
    return (m.group(1) if m else "", mtime)


class _Scan:
    """The whole records of a run file from ``offset`` to ``size``: iterate it for
    ``(start, payload)``; ``offset`` is kept at the start of the first record not given
    (a record the file holds only part of is given at a later scan), ``problems`` says
    what was skipped as corrupt."""

    def __init__(self, fh: Any, offset: int, size: int) -> None:
        self.fh, self.offset, self.size = fh, offset, size
        self.problems: list[str] = []

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        pos = start = self.offset  # the next chunk; the record being assembled
        parts: list[bytes] = []
        block_at, block = -1, b""
        while pos < self.size:
            base = pos - pos % BLOCK
            if base != block_at:
                self.fh.seek(base)
                # no further than the size taken: bytes written since may be half written
                block_at, block = base, self.fh.read(min(BLOCK, self.size - base))
            i = pos - base
            if BLOCK - i < HEAD_LEN:  # a block's zero trailer
                pos = base + BLOCK
                if not parts:
                    start = self.offset = pos
                continue
            if i + HEAD_LEN > len(block):
                return  # a chunk header not all written yet
            crc, length, kind = struct.unpack_from("<IHB", block, i)
            end = i + HEAD_LEN + length
            payload = block[i + HEAD_LEN : end]
            why = None
            if crc == 0 and length == 0 and kind == 0:
                why = ""  # a zeroed (preallocated) block: skipped without a word, as W&B does
            elif end > BLOCK:
                why = f"a chunk at byte {pos} runs past its block"
            elif end > len(block):
                return  # a chunk not all written yet
            elif kind not in _CRC_SEED:
                why = f"a chunk at byte {pos} has unknown type {kind}"
            elif zlib.crc32(payload, _CRC_SEED[kind]) != crc:
                if base + end == self.size:
                    return  # the file's last chunk: a write caught half done, maybe
                why = f"a chunk at byte {pos} fails its checksum"
            if why is not None:  # go on at the next block, as LevelDB's readers recover
                if why:
                    self.problems.append(why)
                pos = start = self.offset = base + BLOCK
                parts = []
                continue
            chunk_at, pos = pos, base + end
            if kind in (FULL, FIRST):
                if parts:
                    self.problems.append(f"a record at byte {start} lacks its last part")
                parts, start = [payload], chunk_at
            elif parts:
                parts.append(payload)
            else:  # the rest of a record whose start was skipped
                start = self.offset = pos
                continue
            if kind in (FULL, LAST):
                record_at, start = start, pos
                self.offset = pos
                yield record_at, b"".join(parts)
                parts = []


def _value(item: Any) -> float | None:
    """A history item's value if it is a number (typed, or W&B's JSON text)."""
    try:
        kind = item.WhichOneof("value")
    except ValueError:  # an older wandb's HistoryItem: JSON text only
        kind = None
    if kind in ("number", "integer"):
        return float(getattr(item, kind))
    if kind == "json":
        raw = item.json
    elif kind is None:
        raw = item.value_json
    else:  # boolean, text, none
        return None
    try:
        v = loads(raw)
        return float(v) if type(v) in (int, float) else None
    except (ValueError, OverflowError):
        return None


def _step_of(value: float | None) -> int | None:
    """A whole, non-negative step from a figure (None: not one)."""
    if value is None or not math.isfinite(value) or not 0 <= value <= MAX_STEP:
        return None
    if value != int(value):
        return None
    return int(value)


@dataclass
class _Place:
    """How far a run file has been read: a growing file is read on from there."""

    file: Path
    ident: tuple[int, int]
    """The file's device and inode (another file under the name is read from its start)."""
    size: int = 0
    offset: int = HEAD_LEN
    """Where the first record not yet read whole starts."""
    entries: list[Entry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    step_metric: str | None = None
    """The run's step metric for every key (``define_metric("*", step_metric=...)``)."""
    last_step: int | None = None
    """The step metric's last whole value (rows without it take it: W&B's step_sync)."""
    stepless: int = 0
    """Rows before the step metric's first value (left out)."""
    unusable: str | None = None
    """A step metric that is not a step's name (``epoch``): steps are W&B's ``_step``."""

    def define(self, metric: Any) -> None:
        """A metric record: note a step metric set for every key."""
        if metric.glob_name != "*" or metric.step_metric in ("", "_step"):
            return
        if metric.step_metric in STEP_ALIASES:
            self.step_metric = metric.step_metric
        else:  # an epoch's fraction, a token count: not a step
            self.unusable = metric.step_metric

    def take(self, history: Any) -> None:
        """A history record: its row, as an entry."""
        w_step = int(history.step.num) if history.HasField("step") else None
        by = self.step_metric
        metrics: dict[str, float] = {}
        ignored: list[str] = []
        for item in history.item:
            key = item.key or ".".join(item.nested_key)
            value = _value(item)
            if key == "_step":
                w_step = _step_of(value) if value is not None else w_step
            elif key.startswith("_"):
                continue  # W&B's own: _runtime, _timestamp, _wandb...
            elif value is None:
                ignored.append(key)
            else:
                metrics[key] = value
        step = w_step
        if by is not None:
            own = _step_of(metrics.pop(by)) if by in metrics else None
            step = self.last_step = own if own is not None else self.last_step
            if step is None:
                self.stepless += 1
                return
        if step is not None:
            self.entries.append(Entry(step, metrics, tuple(ignored), "wandb"))


@register("wandb")
class Wandb(WholeReader):
    describe = "W&B run files (run-<id>.wandb), a run folder or a wandb/ folder of runs"

    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        self._place: _Place | None = None

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        if path.is_dir():
            try:
                return bool(_run_files(path)) or bool(_runs(path))
            except OSError:
                return False
        if path.name.endswith(SUFFIX):
            return True
        return head.startswith(IDENT.decode()) and _has_magic(path)

    def run_file(self, path: Path) -> Path:
        """The run file at ``path``: the file, the one in a run folder, or the newest run's
        in a ``wandb/`` folder (said in the notes)."""
        if not path.is_dir():
            return path
        files = _run_files(path)
        if not files:
            runs = _runs(path)
            if not runs:
                raise LogError(
                    f"{path}: no W&B run in it (a run folder holds run-<id>{SUFFIX}; a wandb/ "
                    "folder holds run folders)"
                )
            run = max(runs, key=_started)
            many = f"{len(runs)} W&B runs under {path}: read the newest"
            self._note(f"{many}, {run.name}" if len(runs) > 1 else f"read {path}'s run {run.name}")
            files = _run_files(run)
        if len(files) > 1:
            newest = max(files, key=lambda p: p.stat().st_mtime)
            self._note(f"{len(files)} {SUFFIX} files in {newest.parent}: read {newest.name}")
            return newest
        return files[0]

    def signature(self, path: Path) -> tuple[Any, ...]:
        try:
            return files_signature(self.run_file(path))
        except (LogError, OSError):
            return ()

    def entries(self, path: Path) -> list[Entry]:
        record_cls = _record_class()
        file = self.run_file(path)
        try:
            with file.open("rb") as fh:
                st = os.fstat(fh.fileno())
                place = self._place
                ident = (st.st_dev, st.st_ino)
                if (
                    place is None
                    or place.file != file
                    or place.ident != ident
                    or st.st_size < place.size
                ):  # another file, or this one rewritten: from its start
                    place = self._place = _Place(file, ident)
                header = fh.read(HEAD_LEN)
                if len(header) < HEAD_LEN:
                    return []  # being created: its header is not all there yet
                _check_header(file, header)
                scan = _Scan(fh, place.offset, st.st_size)
                for start, payload in scan:
                    try:
                        rec = record_cls.FromString(payload)
                    except Exception:  # noqa: BLE001 - protobuf's DecodeError: that record only
                        scan.problems.append(f"the record at byte {start} does not decode")
                        continue
                    kind = rec.WhichOneof("record_type")
                    if kind == "history":
                        place.take(rec.history)
                    elif kind == "metric":
                        place.define(rec.metric)
                place.offset, place.size = scan.offset, st.st_size
                place.problems += scan.problems
        except OSError as exc:
            raise LogError(f"{file} cannot be read ({exc.strerror})") from None
        self._note_state(place)
        return list(place.entries)

    def _note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def _note_state(self, place: _Place) -> None:
        """Notes on skipped and pending bytes, kept current in place (a follower shares
        the list)."""
        name = place.file.name
        self.notes[:] = [n for n in self.notes if not n.startswith(f"{name}: ")]
        if place.step_metric is not None:
            self.notes.append(
                f"{name}: steps: the run's step metric {place.step_metric!r} "
                "(wandb.define_metric), not W&B's _step"
            )
        if place.unusable is not None:
            self.notes.append(
                f"{name}: steps: W&B's _step (the run's step metric {place.unusable!r} is "
                "not a step's name)"
            )
        if place.stepless:
            self.notes.append(
                f"{name}: left out {place.stepless} row(s) logged before the first "
                f"{place.step_metric!r}"
            )
        if place.problems:
            self.notes.append(
                f"{name}: skipped {len(place.problems)} corrupt part(s) and read on (first: "
                f"{place.problems[0]})"
            )
        if (left := place.size - place.offset) > 0:
            self.notes.append(
                f"{name}: ends in a partly written record ({left} bytes): read up to the last "
                "whole one (the run is still being written, or was cut off)"
            )


def _check_header(file: Path, header: bytes) -> None:
    if header[: len(MAGIC)] != MAGIC:
        raise LogError(
            f"{file} is not a W&B run file (it does not open with W&B's ':W&B' header); "
            f"pass a run's run-<id>{SUFFIX} file or its folder"
        )
    if header[6] != VERSION:
        raise LogError(
            f"{file}: W&B run file format version {header[6]}; this reader reads version "
            f"{VERSION} (a newer wandb wrote it: export the run's history as CSV)"
        )
