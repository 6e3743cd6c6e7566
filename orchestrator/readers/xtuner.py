"""XTuner's RL trainer console log: one step per rollout, its figures spread over several
blocks of lines, as XTuner's ``RLTrainer`` and its ``TrainingWorker`` print them
(InternLM/xtuner, ``xtuner/v1/train/rl_trainer.py`` and ``xtuner/v1/rl/base/worker.py``
at commit 2b6bb99d, 2026-02-04; the later ``Train step N`` titles too). Per rollout N:

- a title, ``Rollout N/M`` or ``Rollout N data statistics:`` (``Train step N ...`` in
  later versions), over ``- name : value`` lines (``rewards/mean``, ``response_len/mean``;
  under ``... finished and timing listed:`` the seconds of each phase, read as
  ``time/<phase>``; under ``... throughput statistics:`` as ``throughput/<name>``);
- the worker's ``Rollout N: avg entropy: 0.45, avg rollout entropy: 0.44`` (and
  ``Rollout N: avg KL divergence: 0.001`` with a reference model): ``name: value`` pairs;
- pretty-printed JSON objects under ``rollout mismatch metrics:`` and ``rollout
  importance sampling metrics:`` (``mismatch/mismatch_kl``, ``mismatch/mismatch_k3_kl``,
  ``mismatch/rollout_is_eff_sample_size`` ...), each merged into the step;
- the inner optimizer steps, ``Rank0 Rollout N Step M: reduced_llm_loss=0.01,
  max_ratio=1.3, grad_norm=0.4, ...`` (every rank prints its own): summarised into the
  rollout's step under their own names, a name holding ``max`` by its largest value, one
  holding ``min`` by its smallest, any other by its mean (XTuner's own tracker logs the
  mean, ``step_avg_<name>``).

Lines may carry loguru's ``[XTuner][RANK 0][time][INFO][TrainingWorker]`` prefix, Ray's
``(TrainingWorker pid=123)`` prefix and colour codes; everything else (warnings, the
evaluation's ``scores {...}``, progress bars) is noise. The rollout index is the step. A
JSON block that does not parse fails in one line naming where it began; one the file
ends inside is left out (a trainer still printing it). Ray gathers the worker's lines
from another process, so a worker's line may reach the file after the next rollout's
title: such a line comes out of step order and is skipped and counted, as any reader's.

Detected by XTuner's prefix or its mismatch block beside a ``Rollout N`` title.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from gapwatch.orchestrator.readers.base import (
    Entry,
    LineReader,
    LogError,
    number,
    parse_step,
    register,
    strip_ansi,
)

_PREFIX = re.compile(r"^\s*(?:\([^)]*pid=\d+[^)]*\)\s*)?(?:\[[^\]]*\])*\s*")
"""Ray's ``(Actor pid=N)`` and loguru's ``[XTuner][RANK 0][time][LEVEL][module]``."""
_TITLE = re.compile(
    r"^(?:Rollout|Train step)\s+(\d+)(?:\s*/\s*\d+)?"
    r"(?:\s+(start|finished and timing listed|data statistics|throughput statistics"
    r"|training finished and timing listed))?\s*:?\s*$"
)
_WORKER = re.compile(r"^Rollout\s+(\d+)\s*:\s*(.*)$")
_INNER = re.compile(r"^(?:Rank\s*\d+\s+)?Rollout\s+(\d+)\s+Step\s+(\d+)\s*:\s*(.*)$")
_BLOCK_TITLE = re.compile(r"^rollout (mismatch|importance sampling) metrics:\s*$")
_ITEM = re.compile(r"^-\s+(.+?)\s*:\s*(\S+?)s?\s*$")
_PAIR = re.compile(r"^\s*([A-Za-z][\w /.-]*?)\s*[:=]?\s+(\S+)\s*$")
_KV = re.compile(r"^\s*([\w/.@-]+)\s*=\s*(\S+)\s*$")
SECTIONS = {"finished and timing listed": "time/", "training finished and timing listed": "time/",
            "throughput statistics": "throughput/"}  # fmt: skip
"""A title's section -> the prefix its ``- name : value`` lines are read under."""
MAX_BLOCK_LINES = 2000
"""The most lines a JSON block is gathered over before it is given up."""


def _bare(text: str) -> str:
    return _PREFIX.sub("", strip_ansi(text.rstrip("\r\n")), count=1)


@register("xtuner")
class XTunerConsole(LineReader):
    describe = "XTuner's RL console log (Rollout N blocks, mismatch JSON, inner step lines)"
    spans_lines = True

    def __init__(self, *a: object, **k: object) -> None:
        super().__init__(*a, **k)  # type: ignore[arg-type]
        self._reset()

    def _reset(self) -> None:
        self.step: int | None = None
        self.section = ""
        self.block: list[str] | None = None
        self.block_at = ""
        self.inner_step: int | None = None
        self.inner: dict[str, list[float]] = {}

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        lines = [_bare(ln) for ln in head.splitlines()]
        titled = any(_TITLE.match(ln) or _WORKER.match(ln) or _INNER.match(ln) for ln in lines)
        if not titled:
            return False
        return "[XTuner]" in head or any(_BLOCK_TITLE.match(ln) for ln in lines)

    def prepare(self, path: Path, finished: bool = True) -> None:
        self._reset()

    def line(self, text: str, where: str) -> Entry | None:
        body = _bare(text)
        if self.block is not None:
            return self._in_block(body.strip(), where)
        if _BLOCK_TITLE.match(body.strip()):
            self.block, self.block_at = [], where
            return None
        m = _INNER.match(body)
        if m is not None:
            return self._inner(parse_step(m.group(1), where), m.group(3))
        m = _TITLE.match(body)
        if m is not None:
            self._at(parse_step(m.group(1), where))
            self.section = SECTIONS.get(m.group(2) or "", "")
            return None
        m = _WORKER.match(body)
        if m is not None:
            self._at(parse_step(m.group(1), where))
            self.section = ""
            return self._pairs(m.group(2))
        m = _ITEM.match(body.strip())
        if m is not None and self.step is not None:
            x = number(m.group(2))
            if x is None:
                return None
            return Entry(self.step, {self.section + m.group(1).strip(): x}, (), self.name)
        return None

    def _at(self, step: int) -> None:
        if step != self.step:
            self.step, self.inner_step, self.inner = step, None, {}

    def _pairs(self, rest: str) -> Entry | None:
        """``avg entropy: 0.45, avg rollout entropy: 0.44`` (or an older ``logprobs diff
        min 0.1, max 0.2``: a bare ``max`` takes the words before the first figure)."""
        assert self.step is not None
        metrics: dict[str, float] = {}
        stem = ""
        for piece in rest.split(","):
            m = _PAIR.match(piece)
            if m is None:
                continue
            name, x = m.group(1).strip(), number(m.group(2))
            if x is None:
                continue
            words = name.split()
            if len(words) == 1 and stem and words[0] in ("min", "max", "mean", "std"):
                name = f"{stem} {words[0]}"
            elif len(words) > 1 and words[-1] in ("min", "max", "mean", "std"):
                stem = " ".join(words[:-1])
            metrics[name] = x
        return Entry(self.step, metrics, (), self.name) if metrics else None

    def _inner(self, step: int, rest: str) -> Entry | None:
        """One inner optimizer step's ``name=value`` figures, folded into the rollout's
        summary; the summary so far is the entry (the step keeps its latest)."""
        self._at(step)
        for piece in rest.split(","):
            m = _KV.match(piece)
            if m is None:
                continue
            x = number(m.group(2))
            if x is not None:
                self.inner.setdefault(m.group(1), []).append(x)
        summary: dict[str, float] = {}
        for name, vals in self.inner.items():
            finite = [v for v in vals if math.isfinite(v)]
            if len(finite) < len(vals):
                summary[name] = next(v for v in vals if not math.isfinite(v))  # NaN shows
            elif "max" in name:
                summary[name] = max(vals)
            elif "min" in name:
                summary[name] = min(vals)
            else:
                summary[name] = sum(vals) / len(vals)
        return Entry(step, summary, (), self.name) if summary else None

    def _in_block(self, body: str, where: str) -> Entry | None:
        assert self.block is not None
        self.block.append(body)
        text = "\n".join(self.block)
        if not text.strip():
            return None
        if not text.lstrip().startswith("{") or len(self.block) > MAX_BLOCK_LINES:
            at, self.block = self.block_at, None
            raise LogError(f"{at}: a metrics block that is not a JSON object (XTuner log)")
        if text.count("{") > text.count("}"):
            return None
        at, self.block = self.block_at, None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LogError(
                f"{at}: the JSON block under it does not parse ({exc.msg}, its line "
                f"{exc.lineno}); XTuner prints it with json.dumps"
            ) from None
        if not isinstance(obj, dict) or self.step is None:
            return None
        metrics = {k: x for k, v in obj.items() if (x := number(v)) is not None}
        ignored = tuple(k for k, v in obj.items() if number(v) is None)
        return Entry(self.step, metrics, ignored, self.name)
