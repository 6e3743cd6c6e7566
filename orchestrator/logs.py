"""Metrics logs written elsewhere, read as a stream of steps (what replay and watch read).

Formats, told apart by content (a ``.csv`` suffix forces CSV):

- JSON lines, one step per line: ``{"step": N, "<metric>": value, ...}``;
- verl's file logger (``trainer.logger=[..., "file"]``, which appends
  ``{"step": N, "data": {...}}`` per step; other top-level keys such as
  ``elapsed_seconds`` are ignored);
- CSV with columns ``step,name,value`` (a header row is optional), a step's rows together.

**Order.** A log is read as a trainer writes it: in step order, never held whole.
Consecutive lines of the same step are one step (a figure given twice keeps the later
value). A line whose step is below the step being read, or repeats a step already
finished, is skipped, counted, and reported with its first example (a trainer resumed
from an earlier checkpoint writes such lines; the first values are kept).

Non-numeric values (verl's logger writes whatever it cannot serialise as a string) and
nulls are left out and their names reported; ``NaN`` is kept. A line that is not valid
raises :class:`LogError` naming the file and the line number.

Call :func:`open_log` (a :class:`LogStream`: iterate it for rows; its ``report`` says
what was read and skipped), :func:`read_log` (a small log, whole), or, line by line,
:func:`parse_line` with a :class:`StepAssembler` (``gapwatch watch`` does so on a file
that is still being written).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "FORMATS",
    "LogError",
    "LogReport",
    "LogStream",
    "MetricsLog",
    "StepAssembler",
    "detect_format",
    "open_log",
    "parse_line",
    "read_log",
]

FLAT_EXAMPLE = '{"step": 1, "critic/score/mean": 0.5}'
MAX_LINE = 1 << 20
"""Longest line read (1 MiB): a step's figures fit many times over; a longer line is not a
metrics log (or is a runaway write), and reading it whole would hold it in memory."""
MAX_STEP = 1_000_000_000
"""Largest step number taken (steps are whole numbers from 0)."""
FORMATS = ("jsonl", "verl", "csv")
"""The log formats by name (``verl`` lines are JSON too; a file may mix both)."""

Row = dict[str, Any]


class LogError(ValueError):
    """A metrics log that cannot be read, with where and how to fix it."""


@dataclass(frozen=True)
class Entry:
    """What one line says: a step and some of its figures."""

    step: int
    metrics: dict[str, float]
    ignored: tuple[str, ...] = ()
    """Names whose values were not numbers."""
    form: str = "jsonl"
    """``jsonl``, ``verl`` or ``csv``: the form of this line."""


def _step(raw: Any, where: str) -> int:
    if isinstance(raw, str):
        try:
            raw = float(raw.strip())
        except ValueError:
            raise LogError(f"{where}: step {raw!r} is not a number") from None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise LogError(f'{where}: needs an integer "step" (got {raw!r})')
    if not math.isfinite(raw) or raw != int(raw):
        raise LogError(f"{where}: step {raw!r} is not an integer")
    if not 0 <= raw <= MAX_STEP:
        raise LogError(f"{where}: step {raw!r} is out of range; steps run from 0 to {MAX_STEP:,}")
    return int(raw)


def _loads(text: str) -> Any:
    """orjson (several times faster: replay reads every line); Python's json for what
    orjson refuses but Python writes, the ``NaN`` / ``Infinity`` tokens."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _json_entry(text: str, where: str) -> Entry:
    try:
        obj = _loads(text)
    except json.JSONDecodeError as e:
        raise LogError(
            f"{where}: not valid JSON ({e.msg} at column {e.colno}); each line must be "
            f"one JSON object like {FLAT_EXAMPLE}"
        ) from None
    if not isinstance(obj, dict):
        raise LogError(f"{where}: expected a JSON object like {FLAT_EXAMPLE}, got {text[:40]}")
    if "step" not in obj:
        raise LogError(f'{where}: no "step" key; each line needs one, like {FLAT_EXAMPLE}')
    step = _step(obj["step"], where)
    verl = isinstance(obj.get("data"), dict)
    raw = obj["data"] if verl else obj
    # json gives floats, ints, bools, None, str, lists, dicts: keep the numbers (not bools)
    metrics = {k: v for k, v in raw.items() if type(v) is float and k != "step"}
    if len(metrics) < len(raw) - (0 if verl else 1):
        for k, v in raw.items():
            if type(v) is int and k != "step":
                metrics[k] = float(v)
        ignored = tuple(k for k in raw if k not in metrics and (verl or k != "step"))
    else:
        ignored = ()
    return Entry(step, metrics, ignored, "verl" if verl else "jsonl")


def _csv_entry(text: str, where: str) -> Entry | None:
    try:
        cells = [c.strip() for c in next(csv.reader([text]), [])]
    except csv.Error as exc:
        raise LogError(f"{where}: not a CSV row step,name,value ({exc})") from None
    if not cells or all(not c for c in cells):
        return None
    if [c.lower() for c in cells] == ["step", "name", "value"]:
        return None  # the header
    if cells[0].lower() == "step":  # a wide CSV's header (one column per metric)
        raise LogError(
            f"{where}: a CSV log has one metric per row under the header step,name,value; "
            f"this header is {','.join(cells)[:60]} (a column per metric: write it as JSONL)"
        )
    if len(cells) != 3:
        raise LogError(
            f"{where}: expected 3 columns step,name,value, got {len(cells)} ({','.join(cells)[:60]})"
        )
    step = _step(cells[0], where)
    name, value = cells[1], cells[2]
    if not name:
        raise LogError(f"{where}: empty metric name")
    if not value:
        return Entry(step, {}, (name,), "csv")
    try:
        v = float(value)
    except ValueError:
        raise LogError(f"{where}: value {value!r} of {name!r} is not a number") from None
    return Entry(step, {name: v}, (), "csv")


def parse_line(text: str, fmt: str, where: str) -> Entry | None:
    """One line of a log in format ``fmt`` (``csv``, or JSON for the others); None for a
    blank line or a CSV header."""
    text = text.strip()
    if not text:
        return None
    if fmt == "csv":
        return _csv_entry(text, where)
    return _json_entry(text, where)


def detect_format(path: Path, head: str) -> str:
    """``csv`` or ``jsonl`` (JSON lines, verl's form included) from the file's name and
    its first non-blank line."""
    if path.suffix.lower() == ".csv":
        return "csv"
    if head.lstrip().startswith("{"):
        return "jsonl"
    if head.count(",") == 2:
        return "csv"
    raise LogError(
        f"cannot tell the format of {path}: expected JSON lines ({FLAT_EXAMPLE}) "
        "or CSV with columns step,name,value"
    )


@dataclass
class LogReport:
    """What reading a log found, besides its steps."""

    path: Path
    format: str = "jsonl"
    """``jsonl``, ``verl`` (file-logger form on every line) or ``csv``."""
    steps: int = 0
    first_step: int | None = None
    last_step: int | None = None
    names: set[str] = field(default_factory=set)
    """Every metric name with at least one numeric value (and ``step``)."""
    non_numeric: set[str] = field(default_factory=set)
    """Names seen with a value that was not a number."""
    skipped: int = 0
    """Lines skipped because their step was out of order or repeated."""
    first_skip: str | None = None
    """The first such line, as ``line 12: step 5 after step 7``."""

    @property
    def ignored(self) -> set[str]:
        """Names whose values were never numbers (left out entirely)."""
        return self.non_numeric - self.names - {"step"}

    def skipped_text(self) -> str | None:
        """One sentence about skipped lines, or None."""
        if not self.skipped:
            return None
        return (
            f"{self.skipped} line(s) out of step order skipped (first: {self.first_skip}); "
            "a log is read in step order, as a trainer writes it"
        )


class StepAssembler:
    """Lines (as :class:`Entry`) in, whole steps out, in step order.

    ``add`` returns the step that a new step's first line completes (None otherwise);
    ``finish`` returns the step being read. Out-of-order lines are counted in ``report``.
    """

    def __init__(self, report: LogReport) -> None:
        self.report = report
        self.current: Row | None = None
        self._forms: set[str] = set()

    def add(self, entry: Entry, where: str) -> Row | None:
        rep = self.report
        self._forms.add(entry.form)
        rep.non_numeric.update(entry.ignored)
        cur = self.current
        if cur is not None and entry.step == cur["step"]:
            cur.update(entry.metrics)
            return None
        last = cur["step"] if cur is not None else rep.last_step
        if last is not None and entry.step <= last:
            rep.skipped += 1
            if rep.first_skip is None:
                rep.first_skip = f"{where}: step {entry.step} after step {last}"
            return None
        done = self.finish()
        self.current = {"step": entry.step, **entry.metrics}
        return done

    def finish(self) -> Row | None:
        """The step being read, as complete as it is (None if there is none)."""
        done, self.current = self.current, None
        if done is None:
            return None
        rep = self.report
        rep.steps += 1
        rep.first_step = done["step"] if rep.first_step is None else rep.first_step
        rep.last_step = done["step"]
        rep.names.update(done)
        rep.format = (
            "verl" if self._forms == {"verl"} else "csv" if "csv" in self._forms else "jsonl"
        )
        return done


class LogStream:
    """A complete log, read line by line: iterate it (once) for its steps, in order."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise LogError(f"log file {self.path} does not exist")
        if not self.path.is_file():
            raise LogError(f"{self.path} is not a file; pass a .jsonl or .csv metrics log")
        head = ""
        try:
            with self.path.open(encoding="utf-8") as fh:
                head = next((ln for ln in fh if ln.strip()), "")
        except UnicodeDecodeError:
            raise LogError(
                f"{self.path} is not UTF-8 text; pass a .jsonl or .csv metrics log"
            ) from None
        if not head:
            raise LogError(f"{self.path} is empty; it needs one line per step")
        self.fmt = detect_format(self.path, head)
        self.report = LogReport(self.path, format=self.fmt)

    def __iter__(self) -> Iterator[Row]:
        asm = StepAssembler(self.report)
        try:
            with self.path.open(encoding="utf-8", newline="") as fh:
                for i, line in enumerate(iter(lambda: fh.readline(MAX_LINE + 1), ""), start=1):
                    if len(line) > MAX_LINE:
                        raise LogError(
                            f"{self.path} line {i} is longer than {MAX_LINE >> 20} MiB: not a "
                            "metrics log line (one step's figures per line)"
                        )
                    entry = parse_line(line, self.fmt, f"{self.path} line {i}")
                    if entry is not None and (done := asm.add(entry, f"line {i}")) is not None:
                        yield done
        except UnicodeDecodeError:
            raise LogError(
                f"{self.path} is not UTF-8 text; pass a .jsonl or .csv metrics log"
            ) from None
        if (done := asm.finish()) is not None:
            yield done
        if not self.report.steps:
            raise LogError(f"{self.path} holds no steps")


def open_log(path: Path | str) -> LogStream:
    """A log to stream (checks that it exists, is text, and has a known format)."""
    return LogStream(path)


@dataclass
class MetricsLog:
    """One run's metrics as read from a (small) log, whole."""

    path: Path
    format: str
    rows: list[Row]
    """The history: ``{"step": n, name: value, ...}`` per step, in step order."""
    ignored: set[str] = field(default_factory=set)
    """Names whose values were never numbers (left out)."""
    report: LogReport | None = None

    @property
    def names(self) -> set[str]:
        """Every metric name with at least one numeric value."""
        return {k for r in self.rows for k in r if k != "step"}


def read_log(path: Path | str) -> MetricsLog:
    """Read a whole log into memory (for small logs; replay and watch stream instead)."""
    stream = open_log(path)
    rows = list(stream)
    rep = stream.report
    return MetricsLog(
        path=stream.path, format=rep.format, rows=rows, ignored=rep.ignored, report=rep
    )


class NameMapper:
    """Adds gapwatch's names to rows of a log written by another trainer
    (``correction.name_maps``): the source is told from the first row's names, unless
    given, and kept for the rest of the log."""

    def __init__(self, source: str = "auto") -> None:
        from correction import name_maps

        if source != "auto" and source not in name_maps.SOURCES:
            raise LogError(
                f"unknown metric names {source!r}; valid: auto, {', '.join(name_maps.SOURCES)}"
            )
        self.source: str | None = None if source == "auto" else source
        self.used: dict[str, str] = {}
        """Foreign name -> gapwatch name, for every mapping applied."""

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        from correction import name_maps

        if self.source is None:
            self.source = name_maps.detect(row)
        table = name_maps.MAPS[self.source]  # type: ignore[index]
        for name in row:
            m = table.get(name)
            if m is not None and name not in self.used and m.name not in row:
                self.used[name] = m.name
        return name_maps.mapped(row, self.source)  # type: ignore[arg-type]

    def describe(self) -> str | None:
        """``TRL's names, mapped: reward -> critic/score/mean, ...`` (None: nothing mapped)."""
        if not self.used:
            return None
        pairs = ", ".join(f"{a} -> {b}" for a, b in self.used.items())
        return f"{self.source} names, mapped: {pairs}"
