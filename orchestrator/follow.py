"""A metrics log that a trainer is still writing, read as it grows.

``LogFollower(path, fmt)`` turns what has been appended since the last :meth:`poll` into
steps, and copes with what a live file does:

- it may not exist yet (:meth:`exists`; the caller decides how long to wait);
- its last line may be half written: bytes after the last newline wait for the rest
  (:meth:`close` tries them once more at the end, and reports them if they do not parse);
- it may be rotated (a new file under the same name: the old one is read to its end
  first) or truncated in place (read again from its start; steps that go back are
  skipped and reported, as ``orchestrator.logs`` does for any log);
- the trainer may pause: nothing new is not an error.

Formats: JSON lines (flat or verl's ``{"step", "data"}``): each line is a step as soon
as it is complete; a further line of the step just given adds figures to it. CSV
``step,name,value``: a step is complete when the next one starts, or when the file has
been quiet for ``settle_s``. TRL's ``trainer_state.json`` (``trl``): the whole file is
re-read when it changes (TRL rewrites it at each checkpoint save) and the new entries of
its ``log_history`` become steps.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.logs import (
    MAX_LINE,
    Entry,
    LogError,
    LogReport,
    StepAssembler,
    detect_format,
    parse_line,
)

FOLLOW_FORMATS = ("auto", "jsonl", "verl", "csv", "trl")
"""``--format`` values: ``auto`` tells by name and content (``trainer_state.json`` is TRL's)."""


@dataclass(frozen=True)
class Step:
    """A step read from the log; ``addition``: more figures for the step given last."""

    step: int
    metrics: dict[str, float]
    addition: bool = False


class LogFollower:
    """Read a growing metrics log; see the module docstring."""

    def __init__(
        self, path: Path | str, fmt: str = "auto", *, from_start: bool = True, settle_s: float = 0.5
    ) -> None:
        if fmt not in FOLLOW_FORMATS:
            raise LogError(f"unknown log format {fmt!r}; valid: {', '.join(FOLLOW_FORMATS)}")
        self.path = Path(path)
        self.fmt = "trl" if fmt == "auto" and self.path.name == "trainer_state.json" else fmt
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
        self._csv = StepAssembler(self.report)
        self._quiet_since = time.monotonic()
        self._trl_sig: tuple[int, float] | None = None
        self._seen = 0  # log_history entries read at the last TRL read

    # --- the file ---------------------------------------------------------------------

    def exists(self) -> bool:
        return self.path.is_file()

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

    # --- lines and steps --------------------------------------------------------------

    def _format_of(self, line: str) -> str:
        if self.fmt in ("auto",):
            self.fmt = "csv" if detect_format(self.path, line) == "csv" else "jsonl"
        return "csv" if self.fmt == "csv" else "jsonl"

    def _take(self, entry: Entry, where: str, out: list[Step]) -> None:
        rep = self.report
        rep.non_numeric.update(entry.ignored)
        if self.fmt == "csv":
            done = self._csv.add(entry, where)
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
            out.append(Step(entry.step, dict(entry.metrics), addition=True))
            return
        self._last_step = entry.step
        rep.steps += 1
        rep.first_step = entry.step if rep.first_step is None else rep.first_step
        rep.last_step = entry.step
        out.append(Step(entry.step, dict(entry.metrics)))

    def _step_of(self, row: dict[str, Any]) -> Step:
        return Step(int(row["step"]), {k: v for k, v in row.items() if k != "step"})

    def _lines(self, data: bytes, out: list[Step]) -> None:
        """Complete lines to steps, up to a line that cannot be read (``self.error``)."""
        buf = self._partial + data
        *complete, self._partial = buf.split(b"\n")
        if len(self._partial) > MAX_LINE or any(len(raw) > MAX_LINE for raw in complete):
            self.error = LogError(
                f"{self.path} after line {self._lineno}: a line longer than {MAX_LINE >> 20} MiB; "
                "not a metrics log (one step's figures per line)"
            )
            return
        for raw in complete:
            self._lineno += 1
            text = raw.decode("utf-8", errors="replace")
            if not text.strip():
                continue
            try:
                entry = parse_line(text, self._format_of(text), f"{self.path} line {self._lineno}")
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
        if self.fmt == "trl":
            return self._poll_trl()
        out: list[Step] = []
        data = self._read_new()
        now = time.monotonic()
        if data:
            self._quiet_since = now
            self._lines(data, out)
        elif self.fmt == "csv" and now - self._quiet_since >= self.settle_s:
            done = self._csv.finish()  # a quiet file: the CSV step being read is complete
            if done is not None:
                out.append(self._step_of(done))
        return out

    def close(self) -> list[Step]:
        """The trainer has finished: what is left (a last line without its newline, the
        CSV step being read)."""
        out = [] if self.fmt == "trl" else self.poll()
        if self.fmt != "trl" and self._partial.strip() and self.error is None:
            text = self._partial.decode("utf-8", errors="replace")
            self._partial = b""
            self._lines(text.encode() + b"\n", out)
            if self.error is not None:  # a line cut off for good: said, not fatal
                self.error, self.half_line = None, text[:80]
        if self.fmt == "csv" and (done := self._csv.finish()) is not None:
            out.append(self._step_of(done))
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        return out

    # --- TRL's trainer_state.json -----------------------------------------------------

    def _poll_trl(self) -> list[Step]:
        try:
            st = os.stat(self.path)
        except OSError:
            return []
        sig = (st.st_size, st.st_mtime)
        if sig == self._trl_sig:
            return []
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return []  # being rewritten: read it at the next poll
        self._trl_sig = sig
        history = doc.get("log_history") if isinstance(doc, dict) else None
        if not isinstance(history, list):
            raise LogError(f"{self.path}: no log_history list; is it TRL's trainer_state.json?")
        out: list[Step] = []
        for i, item in enumerate(history):
            if not isinstance(item, dict) or "step" not in item:
                continue
            if self._last_step is not None and item["step"] < self._last_step:
                continue  # given at an earlier read (or before a resume): not new
            line = json.dumps(item)
            entry = parse_line(line, "jsonl", f"{self.path} log_history[{i}]")
            if entry is None:
                continue
            if self._last_step is not None and entry.step == self._last_step and i < self._seen:
                continue
            self._take(entry, f"log_history[{i}]", out)
        self._seen = len(history)
        return out
