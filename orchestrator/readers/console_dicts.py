"""transformers / TRL console output: the dicts ``Trainer.log`` prints, one per logging
event (``{'loss': '0.1', 'reward': 0.52, 'epoch': '0.03'}``: numbers, or numbers as
text, as recent transformers print them), among progress bars, warnings and anything
else a run prints.

Each printed dict (a line holding ``{'...': ...}`` that ``ast.literal_eval`` reads) is an
entry; every other line is noise, skipped. A dict pretty-printed over several lines
(``pprint``: Oat's learner prints its ``logs_dict`` so, one key a line, the last line
ending in ``}``) is joined and read as one, up to ``MAX_DICT_LINES`` lines. The trainer's
summary at the end (``train_runtime``, ``train_loss``) is not a step. Evaluation dicts
(``eval_*`` names only) join the step before them.

The dicts carry no step; it is taken, in this order of preference, from:

1. a ``step`` / ``global_step`` in the dict (Oat's ``misc/global_step``);
2. ``--logging-steps K`` (the trainer's ``logging_steps``): the n-th dict is step n*K;
3. a whole file read at once (``replay``): the epoch fraction with the total steps of
   the training bar (``| 0/1875 [``): the last dict's epoch over the run's epochs (the
   closing summary's ``epoch``, else the whole epochs begun) times the total is the
   step of the last dict; that over the number of dicts is the logging interval K, and
   the n-th dict is step n*K (epochs are printed rounded, so they place the last dict,
   not each one);
4. the training progress bar's count (`` 2%|2  | 12/500 [``) printed before the dict:
   transformers advances its bar to the trainer's global step before it prints the
   step's dict (bars with a description, ``Loading ...: 50%|``, are other bars), where the
   bar is live when the first dict comes (not yet at its total);
5. the epoch fraction over the first dict's (1, 2, ...):
   dicts log at a constant interval, so their epochs grow by a constant, whatever the
   bar printed elsewhere (a trainer whose stdout is buffered prints its dicts after its
   bar has finished: the bar's count would put every dict at the last step);
6. the dict's row number (1, 2, ...): exact only for ``logging_steps=1``.

One source is chosen at the first dict and kept for the file, and said.

The bar's count is right when stdout and stderr reach the file as they are written; a
trainer whose stdout is buffered prints its dicts in bursts, late, which is why a whole
file prefers the epoch.

``notes`` says which was used.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

from gapwatch.orchestrator.readers.base import (
    MAX_LINE,
    Entry,
    LineReader,
    number,
    register,
    strip_ansi,
)

_DICT = re.compile(r"\{\s*'[^']+'\s*:")
_BAR = re.compile(r"^\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)\s*\[")
"""transformers' training bar: no description before its percentage (the bars of
loading, mapping and saving have one: ``Loading checkpoint shards: 50%|...``)."""
SUMMARY = frozenset({"train_runtime", "train_samples_per_second", "train_steps_per_second"})
MAX_DICT_LINES = 2000
"""The most lines a pretty-printed dict is gathered over before it is given up as noise."""
STEP_KEYS = ("step", "global_step", "misc/global_step")
_BLOCK = re.compile(r"\{\s*'[^']+'\s*:[^{}]*\}", re.DOTALL)


def find_dict(text: str) -> dict[str, object] | None:
    """The printed dict in a console line (None: there is none)."""
    m = _DICT.search(text)
    if m is None:
        return None
    end = text.rfind("}")
    if end < m.start():
        return None
    try:
        obj = ast.literal_eval(text[m.start() : end + 1])
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if not isinstance(obj, dict) or not all(isinstance(k, str) for k in obj):
        return None
    return obj


@register("console_dicts")
class ConsoleDicts(LineReader):
    describe = "transformers/TRL console output (the printed {'loss': ...} dicts)"

    def __init__(self, *a: object, **k: object) -> None:
        super().__init__(*a, **k)  # type: ignore[arg-type]
        self.rows = 0
        self.bar: int | None = None
        self.last_step: int | None = None
        self.how: str | None = None
        self.every: int | None = None
        """The logging interval found by :meth:`prepare` (epoch and bar total)."""
        self.bar_total: int | None = None
        self.source: str | None = None
        """The step source chosen at the first dict (kept for the file)."""
        self.first_epoch: float | None = None
        self.pending: list[str] | None = None
        """The lines so far of a dict pretty-printed over several lines."""

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        # a printed dict holding a figure (a dict of paths or names is a log message),
        # on one line or pretty-printed over several
        head = strip_ansi(head)
        one_line = (find_dict(ln) for ln in head.splitlines())
        blocks = (find_dict(m.group(0)) for m in _BLOCK.finditer(head))
        return any(
            d is not None and any(number(v) is not None for v in d.values())
            for d in (*one_line, *blocks)
        )

    summary_epoch: float | None = None

    def prepare(self, path: Path, finished: bool = True) -> None:
        """Find the logging interval from the epochs and the bar's total (see above); in
        a file that may still grow, only once the trainer's closing summary is there (the
        run's epochs are known then)."""
        if self.options.logging_steps is not None:
            return
        scout = ConsoleDicts(self.options)
        epochs: list[float] = []
        try:
            with path.open(encoding="utf-8", errors="replace", newline="") as fh:
                for line in iter(lambda: fh.readline(MAX_LINE + 1), ""):
                    e = scout.line(line, "")
                    if (
                        e is not None
                        and "epoch" in e.metrics
                        and not all(k.startswith("eval_") or k == "epoch" for k in e.metrics)
                    ):
                        epochs.append(e.metrics["epoch"])
        except OSError:
            return
        if scout.how is not None and "'step'" in scout.how or not epochs or not scout.bar_total:
            return
        last = max(epochs)
        if not finished and scout.summary_epoch is None:
            return
        runs_epochs = scout.summary_epoch or math.ceil(last)
        if not runs_epochs or last <= 0 or len(epochs) != scout.rows:
            return
        last_step = last / runs_epochs * scout.bar_total
        self.every = max(1, round(last_step / scout.rows))
        self.bar_total = scout.bar_total

    def _say(self, how: str) -> None:
        if self.how != how:
            self.how = how
            self.notes.append(f"steps: {how}")

    def line(self, text: str, where: str) -> Entry | None:
        text = strip_ansi(text)
        obj = None
        if self.pending is not None:  # inside a pretty-printed dict
            self.pending.append(text.strip())
            if not text.rstrip().endswith("}"):
                if len(self.pending) > MAX_DICT_LINES:
                    self.pending = None
                return None
            obj, self.pending = find_dict(" ".join(self.pending)), None
        else:
            for part in text.split("\r"):
                if (bar := _BAR.match(part)) is not None:
                    self.bar, self.bar_total = int(bar.group(1)), int(bar.group(2))
                if (found := find_dict(part)) is not None:
                    obj = found
                elif (m := _DICT.search(part)) is not None and "}" not in part[m.start() :]:
                    self.pending = [part[m.start() :].strip()]  # a dict's first line
        if obj is None:
            return None
        if SUMMARY & set(obj):
            self.summary_epoch = number(obj.get("epoch"))
            return None
        metrics: dict[str, float] = {}
        ignored: list[str] = []
        for k, v in obj.items():
            x = number(v)
            if x is None:
                ignored.append(k)
            else:
                metrics[k] = x
        if not metrics:
            return None
        if (
            all(k.startswith("eval_") or k == "epoch" for k in metrics)
            and self.last_step is not None
        ):
            return Entry(self.last_step, metrics, tuple(ignored), "console_dicts")
        self.rows += 1
        step = self._step(metrics)
        self.last_step = step
        return Entry(step, metrics, tuple(ignored), "console_dicts")

    def _step(self, metrics: dict[str, float]) -> int:
        for key in STEP_KEYS:
            v = metrics.get(key)
            if v is not None and v == v and 0 <= v == int(v):
                self._say(f"the dicts' {key!r}")
                return int(v)
        if self.options.logging_steps is not None:
            self._say(f"row number x --logging-steps {self.options.logging_steps}")
            return self.rows * self.options.logging_steps
        if self.every is not None:
            self._say(
                f"row number x {self.every}, the logging interval found from the epoch "
                f"fraction and the progress bar's total of {self.bar_total} steps"
            )
            return self.rows * self.every
        if self.source is None:  # the first dict: choose one source for the file
            live = self.bar is not None and (self.bar_total is None or self.bar < self.bar_total)
            epoch = metrics.get("epoch")
            if live:
                self.source = "bar"
            elif epoch is not None and epoch > 0:
                self.source, self.first_epoch = "epoch", epoch
            else:
                self.source = "row"
        if self.source == "bar" and self.bar is not None:
            self._say("the progress bar's count before each dict")
            if self.last_step is None or self.bar > self.last_step:
                return self.bar
        elif self.source == "epoch" and self.first_epoch and metrics.get("epoch"):
            self._say(
                "the epoch fraction over the first dict's (1, 2, ...; the progress bar was "
                "not live when the dicts were printed): give --logging-steps K if the trainer "
                "logged every K steps"
            )
            step = round(metrics["epoch"] / self.first_epoch)
            if self.last_step is None or step > self.last_step:
                return step
        elif self.source == "row":
            self._say(
                "the row number (1, 2, ...): give --logging-steps K if the trainer logged "
                "every K steps"
            )
        # the chosen source says nothing new for this dict: the next step after the last
        return self.rows if self.last_step is None else max(self.rows, self.last_step + 1)
