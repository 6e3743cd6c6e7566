"""verl's console output: ``step:12 - actor/entropy:0.21 - critic/score/mean:-0.68 - ...``
per step (verl's ``console`` logger), wherever it sits on the line: after a timestamp, a
Ray prefix ``(TaskRunner pid=123)``, colour codes.

A tracker's copy of the console (W&B's ``output.log``) may cut long lines short. The
figures before the cut are complete and kept; the pair the cut falls in is dropped: a
pair without a value, or with a value that is not a number, always; and the last pair of
every line as long as the longest line when several lines share that length (a tenth of
them, or two at a multiple of 1024 characters: the mark of a cut at a fixed width;
checked when a whole file is read).

Detected by a line holding ``step:N - name:value``.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from gapwatch.orchestrator.readers.base import (
    MAX_LINE,
    Entry,
    LineReader,
    number,
    parse_step,
    register,
    strip_ansi,
)

_STEP = re.compile(r"(?:^|[\s>)\]|])step:\s*(\d+)\s+-\s+\S+:")
"""``step:N - key:`` at the start of the line or after a prefix."""


def _is_verl(text: str) -> bool:
    return _STEP.search(text) is not None or text.startswith("step:")


@register("verl_console")
class VerlConsole(LineReader):
    describe = "verl's console output (step:N - name:value - ...), cut lines handled"

    def __init__(self, *a: object, **k: object) -> None:
        super().__init__(*a, **k)  # type: ignore[arg-type]
        self.cut_width: int | None = None
        self.cut_lines = 0

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        return any(_STEP.search(strip_ansi(ln)) for ln in head.splitlines())

    def prepare(self, path: Path, finished: bool = True) -> None:
        lengths: Counter[int] = Counter()
        try:
            with path.open(encoding="utf-8", errors="replace", newline="") as fh:
                for line in iter(lambda: fh.readline(MAX_LINE + 1), ""):
                    text = line.rstrip("\r\n")
                    if _STEP.search(strip_ansi(text)):
                        lengths[len(text)] += 1
        except OSError:
            return
        if not lengths:
            return
        widest = max(lengths)
        total = sum(lengths.values())
        shared = lengths[widest]
        # the longest length, shared: by a tenth of the lines, or by two at a round width
        # (W&B's output.log cuts at 4096); natural lines of ~100 figures rarely tie for it
        if widest >= 80 and shared >= 2 and (shared >= total // 10 or widest % 1024 == 0):
            self.cut_width = widest

    def line(self, text: str, where: str) -> Entry | None:
        raw = text.rstrip("\r\n")
        text = strip_ansi(raw)
        m = _STEP.search(text)
        if m is None:
            return None
        step = parse_step(m.group(1), where)
        pairs = text[m.end(1) :].split(" - ")[1:]
        cut = self.cut_width is not None and len(raw) >= self.cut_width
        if cut and pairs:
            pairs.pop()
            self.cut_lines += 1
            if self.cut_lines == 1:
                self.notes.append(
                    f"lines cut at {self.cut_width} characters: each one's last figure dropped"
                )
        metrics: dict[str, float] = {}
        ignored: list[str] = []
        for i, pair in enumerate(pairs):
            key, sep, value = pair.strip().rpartition(":")
            if not sep or not key:
                continue  # cut inside the name (the last pair), or not a pair
            x = number(value)
            if x is None:
                if i < len(pairs) - 1 and value.strip():
                    ignored.append(key)
                continue
            metrics[key] = x
        return Entry(step, metrics, tuple(ignored), "verl_console")
