"""A metrics log that a trainer is still writing, read as it grows.

``LogFollower(path, fmt)`` turns what has been appended since the last :meth:`poll` into
steps, and copes with what a live file does:

- it may not exist yet (:meth:`exists`; the caller decides how long to wait);
- its last line may be half written: bytes after the last newline wait for the rest
  (:meth:`close` tries them once more at the end, and reports them if they do not parse);
- it may be rotated (a new file under the same name: the old one is read to its end
  first) or truncated in place (read again from its start; steps that go back are
  skipped and reported, as ``orchestrator.watch.logs`` does for any log);
- the trainer may pause: nothing new is not an error.

Formats: every reader of ``orchestrator.readers``, detected from the path and the first
complete lines (a file that holds only noise so far is waited for, up to
``readers.HEAD`` bytes). Line formats are followed as they grow: a line that completes
a step (JSON lines, verl's and transformers' console lines) is a step as soon as it is
complete, and a further line of the step just given adds figures to it; where a step
may span lines (CSV, ``keyvalue``), a step is complete when the next one starts, or when
the file has been quiet for ``settle_s``. Whole-file formats (``trainer_state.json``,
TensorBoard, MLflow, trackio, JSON histories, notebooks) are read again whenever they
change (TRL rewrites ``trainer_state.json`` at each checkpoint save) and only their new
steps, or new figures of the last step, are given.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gapwatch.orchestrator import readers
from gapwatch.orchestrator.watch.logs import (
    MAX_LINE,
    Entry,
    LogError,
    LogReport,
    ReadOptions,
    StepAssembler,
)

FOLLOW_FORMATS = tuple(readers.format_names())
"""``--format`` values: ``auto`` tells by name and content; every reader's name."""


@dataclass(frozen=True)
class Step:
    """A step read from the log; ``addition``: more figures for the step given last."""

    step: int
    metrics: dict[str, float]
    addition: bool = False


def _told_by_path(path: Path) -> bool:
    """Whether the path alone tells the format (a folder, an event file, TRL's state, a
    W&B run file, a SQLite file): such a log is not read as lines."""
    if path.is_dir() or path.name == "trainer_state.json":
        return True
    if path.suffix.lower() in (".ipynb", ".wandb"):
        return True
    if path.name.startswith("events.out.tfevents."):
        return True
    try:
        with path.open("rb") as fh:
            return fh.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


class LogFollower:
    """Read a growing metrics log; see the module docstring."""

    def __init__(
        self,
        path: Path | str,
        fmt: str = "auto",
        *,
        from_start: bool = True,
        settle_s: float = 0.5,
        options: ReadOptions | None = None,
    ) -> None:
        if fmt not in FOLLOW_FORMATS:
            raise LogError(f"unknown log format {fmt!r}; valid: {', '.join(FOLLOW_FORMATS)}")
        self.path = Path(path)
        self.options = options or ReadOptions()
        self.reader: readers.Reader | None = (
            None if fmt == "auto" else readers.get(fmt, self.options)
        )
        self.fmt = fmt if self.reader is None else self.reader.name
        self.from_start = from_start
        self.settle_s = settle_s
        self.report = LogReport(self.path)
        self.half_line: str | None = None
        """A last line that never got its newline and did not parse (set by close)."""
        self.error: LogError | None = None
        """A line that could not be read: the steps before it were given; nothing after."""
        self._fh: Any = None
        self._ino: int | None = None
        self._partial = b""
        self._lineno = 0
        self._last_step: int | None = None
        self._given: set[str] = set()  # names given for the last step
        self._asm = StepAssembler(self.report)
        self._quiet_since = time.monotonic()
        self.grew_at = self._quiet_since
        """When (``time.monotonic``) the log last grew or changed (or following began):
        how a caller tells a trainer that has stopped writing."""
        self._sig: tuple[Any, ...] | None = None
        if self.reader is not None:
            self._use(self.reader)

    def _use(self, reader: readers.Reader) -> None:
        if isinstance(reader, readers.LineReader) and self.from_start and self.path.is_file():
            reader.prepare(self.path, finished=False)
        self.reader, self.fmt = reader, reader.name
        self.report.format = reader.name
        self.report.notes = reader.notes

    @property
    def _whole(self) -> bool:
        return self.reader is not None and self.reader.whole

    # --- the file ---------------------------------------------------------------------

    def exists(self) -> bool:
        return self.path.is_file() or self.path.is_dir()

    def _open(self) -> bool:
        try:
            fh = self.path.open("rb")
        except OSError:
            return False
        st = os.fstat(fh.fileno())
        if self._ino is None and not self.from_start:
            fh.seek(0, os.SEEK_END)
        self._fh, self._ino = fh, st.st_ino
        return True

    def _read_new(self) -> bytes:
        """Bytes appended since the last read (following a rotation or a truncation)."""
        if self._fh is None and not self._open():
            return b""
        data = self._fh.read()
        try:
            st = os.stat(self.path)
        except OSError:
            return data  # gone for now (being rotated): keep what we have
        if st.st_ino != self._ino:  # rotated: the old file is read out, the new one begins
            self._fh.close()
            self._fh = None
            self._ino, self.from_start = None, True
            return data + self._read_new()
        if st.st_size < self._fh.tell():  # truncated in place: read it again from its start
            self._fh.seek(0)
            self._partial = b""
            data += self._fh.read()
        return data

    # --- which reader -----------------------------------------------------------------

    def _detect(self, final: bool = False) -> bool:
        """Pick the reader from the path and what has been read so far (``_partial`` holds
        it until then); False while the start of the file does not tell yet."""
        if self.reader is not None:
            return True
        if _told_by_path(self.path):
            self._use(readers.detect(self.path, self.options))
            return True
        complete = self._partial if final else self._partial[: self._partial.rfind(b"\n") + 1]
        try:
            head = complete[: readers.HEAD].decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.start < min(len(complete), readers.HEAD) - 4:
                raise LogError(f"{self.path} is not UTF-8 text; pass a metrics log") from None
            head = complete[: exc.start].decode("utf-8")
        if not head.strip() and self.path.name != "trainer_state.json" and not final:
            return False
        try:
            self._use(readers.detect(self.path, self.options, head=head))
        except LogError:
            if final or len(complete) >= readers.HEAD:
                raise
            return False
        return True

    # --- lines and steps --------------------------------------------------------------

    def _take(self, entry: Entry, where: str, out: list[Step]) -> None:
        rep = self.report
        rep.non_numeric.update(entry.ignored)
        if self.reader is not None and self.reader.spans_lines:
            done = self._asm.add(entry, where)
            if done is not None:
                out.append(self._step_of(done))
            return
        last = self._last_step
        if last is not None and entry.step < last:
            rep.skipped += 1
            if rep.first_skip is None:
                rep.first_skip = f"{where}: step {entry.step} after step {last}"
            return
        rep.names.update(entry.metrics)
        if last is not None and entry.step == last:
            self._given.update(entry.metrics)
            out.append(Step(entry.step, dict(entry.metrics), addition=True))
            return
        self._last_step = entry.step
        self._given = set(entry.metrics)
        rep.steps += 1
        rep.first_step = entry.step if rep.first_step is None else rep.first_step
        rep.last_step = entry.step
        out.append(Step(entry.step, dict(entry.metrics)))

    def _step_of(self, row: dict[str, Any]) -> Step:
        return Step(int(row["step"]), {k: v for k, v in row.items() if k != "step"})

    def _lines(self, data: bytes, out: list[Step], final: bool = False) -> None:
        """Complete lines to steps, up to a line that cannot be read (``self.error``)."""
        buf = self._partial + data
        self._partial = buf
        try:
            if not self._detect(final or len(buf) > MAX_LINE):
                return
        except LogError as exc:
            self.error = exc
            return
        if self._whole:
            self._partial = b""
            return
        *complete, self._partial = buf.split(b"\n")
        if len(self._partial) > MAX_LINE or any(len(raw) > MAX_LINE for raw in complete):
            self.error = LogError(
                f"{self.path} after line {self._lineno}: a line longer than {MAX_LINE >> 20} MiB; "
                "not a metrics log (one step's figures per line)"
            )
            return
        reader = self.reader
        assert isinstance(reader, readers.LineReader)
        for raw in complete:
            self._lineno += 1
            text = raw.decode("utf-8", errors="replace")
            if not text.strip():
                continue
            try:
                entry = reader.line(text, f"{self.path} line {self._lineno}")
            except LogError as exc:
                self.error = exc
                return
            if entry is not None:
                self._take(entry, f"line {self._lineno}", out)

    def poll(self) -> list[Step]:
        """The steps completed since the last poll (empty while the trainer pauses). After
        a line that cannot be read, ``error`` is set and nothing more is read."""
        if self.error is not None:
            return []
        if self.reader is None and self.exists() and _told_by_path(self.path):
            self._use(readers.detect(self.path, self.options))
        if self._whole:
            return self._poll_whole()
        out: list[Step] = []
        data = self._read_new()
        now = time.monotonic()
        if data:
            self._quiet_since = self.grew_at = now
            self._lines(data, out)
            if self._whole:  # detected from its content just now
                return self._poll_whole()
        elif (
            self.reader is not None
            and self.reader.spans_lines
            and now - self._quiet_since >= self.settle_s
        ):
            done = self._asm.finish()  # a quiet file: the step being read is complete
            if done is not None:
                out.append(self._step_of(done))
        return out

    def close(self) -> list[Step]:
        """The trainer has finished: what is left (a last line without its newline, the
        step being read)."""
        out = self._poll_whole() if self._whole else self.poll()
        if not self._whole and self.error is None and self.reader is None and self._partial.strip():
            self._lines(b"", out, final=True)
            if self._whole:
                out += self._poll_whole()
        if not self._whole and self._partial.strip() and self.error is None:
            text = self._partial.decode("utf-8", errors="replace")
            self._partial = b""
            self._lines(text.encode() + b"\n", out)
            if self.error is not None:  # a line cut off for good: said, not fatal
                self.error, self.half_line = None, text[:80]
        if (
            self.reader is not None
            and self.reader.spans_lines
            and (done := self._asm.finish()) is not None
        ):
            out.append(self._step_of(done))
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        return out

    # --- whole files: trainer_state.json, TensorBoard, MLflow, trackio, ... ------------

    def _poll_whole(self) -> list[Step]:
        reader = self.reader
        assert isinstance(reader, readers.WholeReader)
        if not self.exists():
            return []
        sig = reader.signature(self.path)
        if sig == self._sig:
            return []
        self.grew_at = time.monotonic()
        try:
            entries = reader.entries(self.path)
        except readers.Busy:
            return []  # being rewritten: read it at the next poll
        self._sig = sig
        last, given = self._last_step, set(self._given)
        out: list[Step] = []
        for i, e in enumerate(entries):
            if last is not None and e.step < last:
                continue  # given at an earlier read (or before a resume): not new
            if last is not None and e.step == last:
                new = {k: v for k, v in e.metrics.items() if k not in given}
                if not new:
                    continue
                e = Entry(e.step, new, e.ignored, e.form)
            self._take(e, f"entry {i + 1}", out)
        return out
