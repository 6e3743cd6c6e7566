"""Metrics logs written elsewhere, read as a stream of steps (what replay and watch read).

The formats are ``orchestrator.readers``' (JSON lines and verl's file logger, CSV long
or wide, TRL's ``trainer_state.json``, console output of transformers/TRL and verl,
TensorBoard, MLflow, trackio, JSON histories, notebooks, ``name: value`` lines), detected
from the path (``readers.detect``) unless ``--format NAME`` forces one.

**Order.** A log is read as a trainer writes it: in step order, never held whole (a
file read whole by its reader, a TensorBoard log say, is read whole there and streamed
from here). Consecutive entries of the same step are one step (a figure given twice
keeps the later value). An entry whose step is below the step being read, or repeats a
step already finished, is skipped, counted, and reported with its first example (a
trainer resumed from an earlier checkpoint writes such lines; the first values are kept).

Non-numeric values (verl's logger writes whatever it cannot serialise as a string) and
nulls are left out and their names reported; ``NaN`` is kept. A line that is not valid
raises :class:`LogError` naming the file and the line number.

Call :func:`open_log` (a :class:`LogStream`: iterate it for rows; its ``report`` says
what was read and skipped), :func:`read_log` (a small log, whole), or, entry by entry,
a reader with a :class:`StepAssembler` (``gapwatch watch`` does so on a file that is
still being written). :class:`NameMapper` adds gapwatch's names to another trainer's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gapwatch.correction import names as N
from gapwatch.orchestrator import readers
from gapwatch.orchestrator.readers import MAX_LINE, MAX_STEP, Entry, LogError, ReadOptions
from gapwatch.orchestrator.readers.jsonl import FLAT_EXAMPLE

if TYPE_CHECKING:
    from gapwatch.correction.name_maps import Source

__all__ = [
    "FLAT_EXAMPLE",
    "FORMATS",
    "MAX_LINE",
    "MAX_STEP",
    "Entry",
    "LogError",
    "LogReport",
    "LogStream",
    "MetricsLog",
    "NameMapper",
    "ReadOptions",
    "StepAssembler",
    "detect_format",
    "load_name_map",
    "open_log",
    "parse_line",
    "read_log",
]

FORMATS = tuple(readers.format_names())
"""``--format`` values: ``auto``, every reader's name, and the older ``verl``/``trl``."""

Row = dict[str, Any]


def parse_line(text: str, fmt: str, where: str) -> Entry | None:
    """One line of a JSON-lines (``jsonl``/``verl``) or CSV (``csv``) log; None for a
    blank line or a header. (Other formats: a reader from ``orchestrator.readers``.)"""
    reader = readers.get("csv" if fmt == "csv" else "jsonl")
    assert isinstance(reader, readers.LineReader)
    return reader.line(text, where)


def detect_format(path: Path, head: str) -> str:
    """The format name of ``path`` whose start reads ``head`` (LogError: none fits)."""
    return readers.detect(path, head=head).name


@dataclass
class LogReport:
    """What reading a log found, besides its steps."""

    path: Path
    format: str = "jsonl"
    """The reader's name (``orchestrator.readers``); ``verl`` for JSON lines in verl's
    file-logger form on every line."""
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
    notes: list[str] = field(default_factory=list)
    """What the reader says about how it read the log (how steps were inferred)."""

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
        forms = self._forms
        if forms == {"verl"} or forms <= {"verl", "jsonl"}:
            rep.format = "verl" if forms == {"verl"} else "jsonl"
        elif len(forms) == 1:
            rep.format = next(iter(forms))
        return done


class LogStream:
    """A complete log, read entry by entry: iterate it (once) for its steps, in order."""

    def __init__(
        self, path: Path | str, fmt: str = "auto", options: ReadOptions | None = None
    ) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise LogError(f"log file {self.path} does not exist")
        if fmt == "auto":
            self.reader = readers.detect(self.path, options)
        else:
            self.reader = readers.get(fmt, options)
            if self.path.is_dir() and not self.reader.whole:
                raise LogError(f"{self.path} is a folder; a {fmt} log is a file")
        self.fmt = self.reader.name
        self.report = LogReport(self.path, format=self.fmt)

    def _entries(self) -> Iterator[tuple[Entry, str]]:
        reader = self.reader
        if isinstance(reader, readers.WholeReader):
            try:
                got = reader.entries(self.path)
            except readers.Busy as exc:
                raise LogError(
                    f"{self.path}: not a complete {self.fmt} file ({' '.join(str(exc).split())[:80]}); "
                    "if it is being written, try again"
                ) from None
            for i, e in enumerate(got):
                yield e, f"entry {i + 1}"
            return
        assert isinstance(reader, readers.LineReader)
        if self.path.is_dir():
            raise LogError(f"{self.path} is not a file; pass a metrics log")
        reader.prepare(self.path)
        try:
            with self.path.open(encoding="utf-8", newline="") as fh:
                for i, line in enumerate(iter(lambda: fh.readline(MAX_LINE + 1), ""), start=1):
                    if len(line) > MAX_LINE:
                        raise LogError(
                            f"{self.path} line {i} is longer than {MAX_LINE >> 20} MiB: not a "
                            "metrics log line (one step's figures per line)"
                        )
                    entry = reader.line(line, f"{self.path} line {i}")
                    if entry is not None:
                        yield entry, f"line {i}"
        except UnicodeDecodeError:
            raise LogError(f"{self.path} is not UTF-8 text; pass a metrics log") from None

    def __iter__(self) -> Iterator[Row]:
        asm = StepAssembler(self.report)
        for entry, where in self._entries():
            if (done := asm.add(entry, where)) is not None:
                yield done
        if (done := asm.finish()) is not None:
            yield done
        self.report.notes = list(self.reader.notes)
        if not self.report.steps:
            raise LogError(f"{self.path} holds no steps ({self.fmt} format)")


def open_log(path: Path | str, fmt: str = "auto", options: ReadOptions | None = None) -> LogStream:
    """A log to stream (checks that it exists and has a known format; ``fmt`` forces one)."""
    return LogStream(path, fmt, options)


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


def read_log(path: Path | str, fmt: str = "auto", options: ReadOptions | None = None) -> MetricsLog:
    """Read a whole log into memory (for small logs; replay and watch stream instead)."""
    stream = open_log(path, fmt, options)
    rows = list(stream)
    rep = stream.report
    return MetricsLog(
        path=stream.path, format=rep.format, rows=rows, ignored=rep.ignored, report=rep
    )


def gapwatch_names() -> set[str]:
    """Every metric name gapwatch knows (``correction.names.all_names``: its constants, and
    the per-slice, per-quantile, per-ratio and per-turn names built from them)."""
    from gapwatch.correction import names as N

    return set(N.all_names())


def load_name_map(path: Path | str) -> dict[str, str]:
    """A user's name map, ``{their_name: gapwatch_name}`` in YAML, checked: every target
    must be one of gapwatch's names (``correction.names``)."""
    path = Path(path)
    if not path.is_file():
        raise LogError(f"name map {path} does not exist")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise LogError(
            f"name map {path} is not valid YAML: {' '.join(str(exc).split())[:120]}"
        ) from None
    if not isinstance(doc, dict) or not doc:
        raise LogError(
            f"name map {path} must map your names to gapwatch's: {{reward: critic/score/mean}}"
        )
    valid = gapwatch_names()
    out: dict[str, str] = {}
    for theirs, ours in doc.items():
        if not isinstance(theirs, str) or not isinstance(ours, str):
            raise LogError(f"name map {path}: {theirs!r}: {ours!r} is not a name: name pair")
        if ours not in valid:
            from gapwatch.correction import names as N

            listed = sorted(
                v for k, v in vars(N).items() if k.isupper() and isinstance(v, str) and "/" in v
            )
            raise LogError(
                f"name map {path}: unknown gapwatch name {ours!r} (for {theirs!r}); valid: "
                + ", ".join(listed)
            )
        out[theirs] = ours
    return out


TRAIN_PREFIX = "train/"
"""transformers' reporters (TensorBoard, W&B, trackio) write ``train/loss`` for the
``loss`` a trainer logged; the maps look names up without it."""


class NameMapper:
    """Adds gapwatch's names to rows of a log written by another trainer
    (``correction.name_maps``): the source is told from the first row with a trainer's
    own names, unless given, and kept for the rest of the log. ``source`` may also be a user's YAML name
    map (:func:`load_name_map`), applied before the built-in maps."""

    def __init__(self, source: str = "auto") -> None:
        from gapwatch.correction import name_maps

        self.user: dict[str, str] = {}
        if source not in ("auto", *name_maps.SOURCES) and (
            source.endswith((".yaml", ".yml")) or Path(source).is_file()
        ):
            self.user = load_name_map(source)
            source = "auto"
        if source != "auto" and source not in name_maps.SOURCES:
            raise LogError(
                f"unknown metric names {source!r}; valid: auto, {', '.join(name_maps.SOURCES)}, "
                "or a YAML name map file"
            )
        self.source: str | None = None if source == "auto" else source
        self._auto = source == "auto"
        self.used: dict[str, str] = {}
        """Foreign name (or a derived figure's formula) -> gapwatch name, for every
        mapping applied."""
        self.inputs: set[str] = set()
        """The foreign names read into derived figures (``correction.name_maps.DERIVED``)."""
        self.matched: dict[str, str] = {}
        """Foreign name -> how it matched a name its source writes, where not as written
        (an exporter's prefix, another separator: ``correction.name_maps.resolve``)."""

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        from gapwatch.correction import name_maps

        out = dict(row)
        for theirs, ours in self.user.items():
            if theirs in row and ours not in row:
                out[ours] = row[theirs]
                self.used.setdefault(theirs, ours)
        if self.source is None or (self._auto and self.source == "gapwatch"):
            # told from the first row with a trainer's marks (a first row of timings has none)
            self.source = name_maps.detect(out)
        source: Source = self.source  # type: ignore[assignment]
        # the maps' view: each name as the source writes it (an exporter's prefix taken
        # off, its separators read as the source's: name_maps.resolve); eval/ last, only
        # for a figure the row has nowhere else
        view: dict[str, Any] = {}
        original: dict[str, str] = {}
        late: list[str] = []
        for k, v in out.items():
            m = name_maps.resolve(k, source)
            if m is None:
                if k.startswith(name_maps.EVAL_PREFIX):
                    late.append(k)
                view.setdefault(k, v)
                original.setdefault(k, k)
                continue
            if m.how != "exact":
                if m.name in out:
                    continue  # the row has the figure as written: keep that one
                self.matched.setdefault(k, m.how)
            if m.name not in view or m.how == "exact":
                view[m.name], original[m.name] = v, k
        for k in late:
            m = name_maps.resolve(k, source, eval_prefix=True)
            if m is not None and m.name not in view:
                view[m.name], original[m.name] = out[k], k
                self.matched.setdefault(k, m.how)
        for name, v in view.items():
            if name in N.all_names() and name != original[name]:
                out.setdefault(name, v)  # gapwatch's own name, written another way
                self.used.setdefault(original[name], name)
                continue
            m2 = name_maps.lookup(source, name)
            if m2 is not None and m2.name not in out:
                out[m2.name] = v
                self.used.setdefault(original[name], m2.name)
        for d, v, keys in name_maps.derive(view, source):
            if d.name not in out:
                out[d.name] = v
                self.used.setdefault(d.formula, d.name)
                self.inputs.update(original.get(k, k) for k in keys)
        return out

    def describe(self) -> str | None:
        """``trl names, mapped: reward -> critic/score/mean, ...`` (None: nothing mapped)."""
        if not self.used:
            return None
        pairs = ", ".join(f"{a} -> {b}" for a, b in self.used.items())
        who = "your map's and " + str(self.source) if self.user else str(self.source)
        return f"{who} names, mapped: {pairs}"
