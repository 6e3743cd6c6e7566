"""A tolerant reader for hand-written trainers: ``name: value`` or ``name=value`` pairs on
a line (``step=12 loss=0.31 reward: 0.5``, ``| kl: np.float64(0.02) |``), colour codes
stripped, array scalars unwrapped (``np.float64(0.3)``, ``tensor(0.3)``). Lines without
pairs, or mostly other text (sample dumps, prompts, warnings), are skipped.

The step is a named field (``--step-field``; default: the first of ``step``,
``global_step``, ``iteration``, ``iter`` on the line, else a line that opens with
``Step 12:`` / ``Iteration 12 |`` / ``[step 12]``, else a progress counter such as
``(12/9751)``, the one with the largest total), or the first group of a user's regular
expression (``--step-pattern 'Step (\\d+)'``). A step printed alone (``step: 3``, or
a line the pattern matches) holds for the pairs of the lines right after it, until a line
of other text or the next step (a step printed as a header above its figures); a step
printed among figures holds for its own line only, so pairs in text printed between
steps (sample dumps: ``x = 3``) are not taken. Pairs before any step are dropped.

A table printed per step (the Tinker cookbook's console log: a ``Step 12`` title line,
then ``│ optim/entropy │ 0.189538 │`` rows in box-drawing characters) is read the same
way: the title is a step alone on its line, each row a pair, the box's borders and header
neither.

Detected when a line of the file's start holds two pairs and a step field or a
counter, or the start holds a ``Step N`` title and rows of a table (or a
``--step-field`` / ``--step-pattern`` is given).
"""

from __future__ import annotations

import re
from pathlib import Path

from gapwatch.orchestrator.readers.base import (
    Entry,
    LineReader,
    number,
    parse_step,
    register,
    strip_ansi,
)

STEP_FIELDS = ("step", "global_step", "iteration", "iter")
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|NaN|inf|Inf|Infinity)"
_PAIR = re.compile(
    r"(?<![\w./-])([A-Za-z_][\w./@-]*(?:\[[\w./-]+\])?)\s*[:=]\s*"
    r"((?:np\.\w+|numpy\.\w+|tensor|torch\.tensor)\(\s*(?:"
    + _NUM
    + r")[^)]*\)|'(?:"
    + _NUM
    + r")'|\"(?:"
    + _NUM
    + r")\"|(?:"
    + _NUM
    + r"))(?![\w.])"
)


COVER = 0.3
"""Share of a line's non-blank characters its pairs must cover (a line of prose with a
stray ``A: 4`` in it, a sample dump, is not a line of figures)."""


_SEGMENTS = re.compile(r",\s+|\s+\|\s+|\t")
_SEGMENT = re.compile(r"^\s*([A-Za-z_][\w./@-]*(?: [A-Za-z_][\w./@-]*){0,4})\s*[:=]\s*(\S+)\s*$")
_COUNTER = re.compile(r"[\[(]\s*(\d+)\s*/\s*(\d+)\s*[\])]")
_LEADING = re.compile(
    r"^\W{0,3}(?:global[ _])?(?:step|iteration|iter|update)\s*#?\s*(\d+)\s*(?:[:|\]),-]|$)", re.I
)
"""A line that opens with its step: ``Step 12: reward=...``, ``[step 12] loss=...``,
``Iteration 12 | ...`` (a hand-written loop's ``print(f"Step {i}: ...")``)."""


_BOX_ROW = re.compile(
    r"^\s*[\u2502\u2503|]\s*([A-Za-z_][\w./@-]*)\s*[\u2502\u2503|]\s*("
    + _NUM
    + r")\s*[\u2502\u2503|]\s*$"
)
"""A row of a table of figures: ``│ optim/entropy │ 0.189538 │`` (or ``|`` bars)."""
_TITLE = re.compile(r"^\s*Step\s+(\d+)\s*$")
"""A table's title, its step alone on a line: ``          Step 12          ``."""
_DRAWING = re.compile("[\u2500-\u257f]")
"""Box-drawing characters: a table's borders and header neither hold nor end figures."""


def box_row(text: str) -> list[tuple[str, float]]:
    """The one pair of a table row (:data:`_BOX_ROW`), or none."""
    m = _BOX_ROW.match(text)
    x = None if m is None else number(m.group(2))
    return [] if m is None or x is None else [(m.group(1), x)]


def leading(text: str) -> int | None:
    """The step a line opens with (:data:`_LEADING`), or None."""
    m = _LEADING.match(text)
    return int(m.group(1)) if m else None


def counter(text: str) -> int | None:
    """The step of a progress counter on a line, ``(12/9751)`` or ``[12/500]``: of
    several (``Epoch:[1/1](12/9751)``), the one with the largest total."""
    found = [(int(total), int(n)) for n, total in _COUNTER.findall(text) if int(total) > 1]
    return max(found)[1] if found else None


def pairs(text: str) -> list[tuple[str, float]]:
    """The ``name: value`` / ``name=value`` pairs with numeric values on a line (none
    on a line that is mostly other text). Pairs separated by commas, bars or tabs may
    have names of several words (``Avg Response Len: 271.38``)."""
    split = [m for seg in _SEGMENTS.split(text) if (m := _SEGMENT.match(seg))]
    worded = [(m.group(1), x) for m in split if (x := number(m.group(2).strip("'\""))) is not None]
    if len(worded) >= 2 and any(" " in n for n, _ in worded):
        return worded
    out = []
    covered = 0
    for m in _PAIR.finditer(text):
        x = number(m.group(2).strip("'\""))
        if x is not None:
            out.append((m.group(1), x))
            covered += sum(not c.isspace() for c in m.group(0))
    solid = sum(not c.isspace() for c in text)
    if out and covered < COVER * solid and not any(n in STEP_FIELDS for n, _ in out):
        return []
    return out


@register("keyvalue")
class KeyValue(LineReader):
    describe = "name: value / name=value pairs per line (hand-written trainers)"
    spans_lines = True

    def __init__(self, *a: object, **k: object) -> None:
        super().__init__(*a, **k)  # type: ignore[arg-type]
        o = self.options
        self.pattern = re.compile(o.step_pattern) if o.step_pattern else None
        self.fields = (o.step_field,) if o.step_field else STEP_FIELDS
        self.step: int | None = None
        self.sticky = False
        """The last step was given alone on its line: it holds for the lines after it."""
        self.dropped = 0

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        lines = [strip_ansi(ln) for ln in head.splitlines()]
        titled = any(_TITLE.match(t) for t in lines)
        if titled and sum(bool(box_row(t)) for t in lines) >= 2:
            return True
        for text in lines:
            found = dict(pairs(text))
            if len(found) >= 2 and (
                any(f in found for f in STEP_FIELDS)
                or counter(text) is not None
                or leading(text) is not None
            ):
                return True
        return False

    def line(self, text: str, where: str) -> Entry | None:
        text = strip_ansi(text)
        if self.pattern is not None and (m := self.pattern.search(text)) is not None:
            self.step = parse_step(m.group(1), where)
        elif self.options.step_field is None and (t := _TITLE.match(text)) is not None:
            self.step, self.sticky = int(t.group(1)), True  # a table's title heads its rows
            if not self.notes:
                self.notes.append("steps: the 'Step N' title above each table of figures")
            return None
        found = pairs(text) or box_row(text)
        if not found:
            if text.strip() and not _DRAWING.search(text):
                self.sticky = False  # a line of other text ends a step's block of figures
            return None
        metrics = dict(found)
        if self.pattern is None:
            key = next((f for f in self.fields if f in metrics), None)
            if key is not None:
                self.step = parse_step(metrics.pop(key), where)
            elif self.options.step_field is None and (n := leading(text)) is not None:
                self.step = n
                if not self.notes:
                    self.notes.append("steps: the 'Step N' each line opens with")
            elif self.options.step_field is None and (n := counter(text)) is not None:
                self.step = n
                if not self.notes:
                    self.notes.append("steps: the n/N progress counter on each line")
            elif not self.sticky:
                return None  # figures without a step, after a line that held its own
            # a step alone on its line heads the lines after it; one among figures does not
            self.sticky = key is not None and len(metrics) == 0 or self.sticky and key is None
        for f in STEP_FIELDS:
            metrics.pop(f, None)
        if self.step is None:
            self.dropped += 1
            return None
        return Entry(self.step, metrics, (), "keyvalue")
