"""A tolerant reader for hand-written trainers: ``name: value`` or ``name=value`` pairs on
a line (``step=12 loss=0.31 reward: 0.5``, ``| kl: np.float64(0.02) |``), colour codes
stripped, array scalars unwrapped (``np.float64(0.3)``, ``tensor(0.3)``). Lines without
pairs, or mostly other text (sample dumps, prompts, warnings), are skipped.

The step is a named field (``--step-field``; default: the first of ``step``,
``global_step``, ``iteration``, ``iter`` on the line), or the first group of a user's
regular expression (``--step-pattern 'Step (\\d+)'``). A step seen on a line holds for
the pairs of the lines after it, until the next one (a step printed as a header above
its figures). Pairs before any step are dropped.

Detected when lines of the file's start hold pairs with a step field (or a
``--step-field`` / ``--step-pattern`` is given).
"""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.readers.base import Entry, LineReader, number, parse_step, register, strip_ansi

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


def pairs(text: str) -> list[tuple[str, float]]:
    """The ``name: value`` / ``name=value`` pairs with numeric values on a line (none
    on a line that is mostly other text)."""
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
        self.dropped = 0

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        hits = 0
        for ln in head.splitlines():
            found = dict(pairs(strip_ansi(ln)))
            if len(found) >= 2 and any(f in found for f in STEP_FIELDS):
                hits += 1
        return hits >= 1

    def line(self, text: str, where: str) -> Entry | None:
        text = strip_ansi(text)
        if self.pattern is not None and (m := self.pattern.search(text)) is not None:
            self.step = parse_step(m.group(1), where)
        found = pairs(text)
        if not found:
            return None
        metrics = dict(found)
        if self.pattern is None:
            key = next((f for f in self.fields if f in metrics), None)
            if key is not None:
                self.step = parse_step(metrics.pop(key), where)
        for f in STEP_FIELDS:
            metrics.pop(f, None)
        if self.step is None:
            self.dropped += 1
            return None
        return Entry(self.step, metrics, (), "keyvalue")
