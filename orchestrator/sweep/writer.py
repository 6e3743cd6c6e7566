"""The Recorder's writers: how a sweep's store writes leave the driver's result path.

The Recorder (``orchestrator.sweep.recorder``) turns each Tune event into an ``Op`` (a plain
JSON-able list: a step's figures, a decision, a trial's restart, status, checkpoint or
placement) and hands it to a writer. Two writers, one interface (``put``, ``sync``,
``close``, ``reachable``):

- :class:`ThreadWriter` (the default): one thread takes the ops in the order they came,
  groups consecutive steps and decisions into one ``Store.write_batch`` transaction and
  applies the others between them, so the driver's cost per result is an append to a
  queue. It survives **store outages**: a write that fails because the store cannot be
  reached (``store.engine.unreachable``: PostgreSQL stopped or restarting, a SQLite file
  locked by another writer) is retried as it is, with exponential backoff, while new ops
  wait in a bounded queue; past ``bound`` ops they go to a JSON-lines spill file, replayed
  in order when the store is back. Every write is an upsert keyed by (run, name, step),
  (run, step, rule) or the run's row, so a batch retried after a commit whose answer was
  lost writes nothing twice. It says one line when the store goes, one if it spills
  (where), one when the backlog is written (how many results came late). While the store
  is up and the queue is full, ``put`` waits for room (backpressure on the trials).
- :class:`InlineWriter`: the synchronous path gapwatch had before (buffer, then write on
  the driver's thread every ``flush_every`` ops or ``flush_seconds``); an error raises
  there. Kept for comparison (``bench/pipeline_bench.py --writer inline``).

A spill file left by a driver that ended while the store was down is replayed first by
the next writer of the same sweep (``gapwatch sweep --resume``).

Not here: what each op means to the store (the Recorder's ``apply``), the SQL (``store``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from gapwatch.store import Store, StoreError
from gapwatch.store.engine import unreachable

Op = list[Any]
"""``[seq, kind, trial key, *args]``: one write, JSON-able (so it can be spilled)."""
BATCHED = ("step", "decision")
"""Op kinds that go into one ``write_batch`` transaction together."""
Apply = Callable[[Store, list[Op]], None]
"""Writes ops to a store in one go: a run of ``BATCHED`` ops, or one other op."""
Say = Callable[[str], None]

SPILL_DIR = Path(".gapwatch") / "spill"
"""Where spill files go (relative to the working directory, beside Tune's results)."""


class Writer(Protocol):
    @property
    def seq(self) -> int: ...
    def on_commit(self, fn: Callable[[list[Op]], None]) -> None: ...
    def put(self, kind: str, key: str, *args: Any) -> int: ...
    def sync(self, timeout_s: float | None = None, *, while_reachable: bool = False) -> bool: ...
    def tick(self) -> None: ...
    def close(self, timeout_s: float) -> None: ...
    def reachable(self) -> bool: ...
    def check(self) -> None: ...


def groups(ops: list[Op]) -> Iterable[list[Op]]:
    """``ops`` cut into what one transaction writes: runs of batched ops, single others."""
    run: list[Op] = []
    for op in ops:
        if op[1] in BATCHED:
            run.append(op)
            continue
        if run:
            yield run
            run = []
        yield [op]
    if run:
        yield run


class InlineWriter:
    """The synchronous path: ops buffered and written on the caller's thread."""

    def __init__(
        self, open_store: Callable[[], Store], apply: Apply, *, flush_every: int = 200,
        flush_seconds: float = 1.0,
    ) -> None:  # fmt: skip
        self._open = open_store
        self._apply = apply
        self.flush_every = flush_every
        self.flush_seconds = flush_seconds
        self._ops: list[Op] = []
        self._seq = 0
        self._last = time.monotonic()
        self._store: Store | None = None
        self._on_commit: list[Callable[[list[Op]], None]] = []

    @property
    def seq(self) -> int:
        """The newest op's sequence number."""
        return self._seq

    def on_commit(self, fn: Callable[[list[Op]], None]) -> None:
        self._on_commit.append(fn)

    def put(self, kind: str, key: str, *args: Any) -> int:
        self._seq += 1
        self._ops.append([self._seq, kind, key, *args])
        if kind not in BATCHED:
            self.sync()  # a restart, a status, a checkpoint: written at once, as before
        return self._seq

    def tick(self) -> None:
        if len(self._ops) >= self.flush_every or (
            self._ops and time.monotonic() - self._last >= self.flush_seconds
        ):
            self.sync()

    def sync(self, timeout_s: float | None = None, *, while_reachable: bool = False) -> bool:
        ops, self._ops = self._ops, []
        self._last = time.monotonic()
        if self._store is None:
            self._store = self._open()
        for g in groups(ops):
            self._apply(self._store, g)
            for fn in self._on_commit:
                fn(g)
        return True

    def close(self, timeout_s: float) -> None:
        self.sync()

    def reachable(self) -> bool:
        return True

    def check(self) -> None:
        return None


@dataclass
class Outage:
    """One time the store could not be reached, while it lasts."""

    since: float
    why: str
    late: int = 0
    """Results (step ops) written since it began."""
    spilled: int = 0
    """Ops that went through the spill file."""
    back_at: float | None = None
    """When a write first succeeded again."""
    mark: int = 0
    """The newest op queued when the store came back: written, the outage is over."""


@dataclass
class Counts:
    """What a writer did (for tests and the benchmark)."""

    results: int = 0
    """Step ops committed (each exactly once)."""
    ops: int = 0
    batches: int = 0
    outages: int = 0
    late: int = 0
    spilled: int = 0
    lines: list[str] = field(default_factory=list)
    """Every line it said, in order."""


def parse(lines: list[str]) -> list[Op]:
    return [json.loads(line) for line in lines]


class Spill:
    """The JSON-lines file ops go to past the queue's bound, read back in order."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._out = path.open("a", encoding="utf-8")
        self._in = path.open("r", encoding="utf-8")
        self.written = 0
        self.read = 0
        self.last_seq = 0
        """The newest op's sequence number in a leftover file (ops are in order)."""

    @classmethod
    def leftover(cls, path: Path) -> Spill | None:
        """The spill an earlier driver left at ``path`` (None: none, or empty)."""
        if not path.is_file() or path.stat().st_size == 0:
            return None
        data = path.read_bytes()
        cut = data.rfind(b"\n") + 1
        if cut < len(data):  # a line cut by a crash: dropped, so appends start clean
            with path.open("r+b") as fh:
                fh.truncate(cut)
        if cut == 0:
            path.unlink()
            return None
        sp = cls(path)
        lines = data[:cut].splitlines()
        sp.written = len(lines)
        last = lines[-1].decode()
        sp.last_seq = int(json.loads(last)[0])
        return sp

    def append(self, ops: Iterable[Op]) -> None:
        for op in ops:
            # json, not orjson: a NaN or inf figure must come back as itself, not null
            self._out.write(json.dumps(op, default=str) + "\n")
            self.written += 1
        self._out.flush()

    def take(self, n: int) -> list[str]:
        """The next ``n`` lines (at most), unparsed: parse them with :func:`parse`
        outside the writer's lock."""
        out: list[str] = []
        while len(out) < n:
            line = self._in.readline()
            if not line:
                break
            out.append(line)
        self.read += len(out)
        return out

    def rest(self) -> list[Op]:
        return parse(self.take(self.written - self.read))

    def close(self) -> None:
        self._out.close()
        self._in.close()

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class ThreadWriter:
    """Store writes on one thread, ordered, batched, outage-proof (module docstring)."""

    def __init__(
        self,
        open_store: Callable[[], Store],
        apply: Apply,
        *,
        spill_path: Path,
        say: Say,
        bound: int = 20_000,
        flush_every: int = 200,
        flush_seconds: float = 1.0,
        max_batch: int = 5_000,
        backoff_s: float = 0.5,
        backoff_max_s: float = 8.0,
    ) -> None:
        self._open = open_store
        self._apply = apply
        self.spill_path = spill_path
        self._say = say
        self.bound = bound
        self.flush_every = flush_every
        self.flush_seconds = flush_seconds
        self.max_batch = max_batch
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.counts = Counts()
        self._cond = threading.Condition()
        self._mem: deque[Op] = deque()
        self._spill = Spill.leftover(spill_path)
        if self._spill is not None:
            self._line(
                f"store: {self._spill.written} writes an earlier driver left in "
                f"{spill_path} are written first"
            )
        self._seq = 0 if self._spill is None else self._spill.last_seq
        self._done = 0
        """The newest op committed (ops commit in order)."""
        self._oldest_at: float | None = None
        self._urgent = False
        """An op that is not batched is queued: write without waiting for more."""
        self._outage: Outage | None = None
        self._error: BaseException | None = None
        self._closing = False
        self._deadline: float | None = None
        self._wanted = 0
        """Ops up to this one are waited for (``sync``): write them without delay."""
        self._store: Store | None = None
        self._on_commit: list[Callable[[list[Op]], None]] = []
        self._thread = threading.Thread(
            target=self._loop, name="gapwatch-store-writer", daemon=True
        )
        self._thread.start()

    def on_commit(self, fn: Callable[[list[Op]], None]) -> None:
        """Call ``fn(ops)`` on the writer thread after each commit."""
        self._on_commit.append(fn)

    @property
    def seq(self) -> int:
        """The newest op's sequence number."""
        return self._seq

    # --- the driver's side
    def put(self, kind: str, key: str, *args: Any) -> int:
        """Queue one op; its sequence number. Waits only while the store is up and the
        queue full (backpressure); past the bound in an outage, the op is spilled."""
        with self._cond:
            self._raise()
            self._seq += 1
            op: Op = [self._seq, kind, key, *args]
            while self._spill is None and len(self._mem) >= self.bound:
                if self._outage is not None or self._closing:
                    self._spill = Spill(self.spill_path)
                    self._line(
                        f"store still unreachable: {len(self._mem)} writes held in memory "
                        f"(the bound); the rest go to {self.spill_path} until it is back"
                    )
                    break
                self._cond.wait(0.5)  # the store is up but behind: the driver waits
                self._raise()
            if self._spill is not None:
                self._spill.append([op])
                self.counts.spilled += 1
                if self._outage is not None:
                    self._outage.spilled += 1
            else:
                self._mem.append(op)
                if self._oldest_at is None:
                    self._oldest_at = time.monotonic()
            if kind not in BATCHED:
                # a restart, a status, a checkpoint: written at once, not batched; so the
                # store's newest checkpoint lags Tune's by a commit, not a flush interval
                # (Tune deletes the one before it, which a --resume would need)
                self._urgent = True
            if self._urgent or len(self._mem) >= self.flush_every:
                self._cond.notify_all()
            return self._seq

    def tick(self) -> None:
        self.check()

    def sync(self, timeout_s: float | None = None, *, while_reachable: bool = False) -> bool:
        """Wait until every op queued so far is written; False if ``timeout_s`` ran out
        (or, ``while_reachable``, once the store is not reachable)."""
        end = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            target = self._seq
            self._wanted = max(self._wanted, target)
            self._cond.notify_all()
            while self._done < target and self._error is None and self._thread.is_alive():
                if while_reachable and not self.reachable():
                    return False
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(0.5 if left is None else min(left, 0.5))
            self._raise()
            return self._done >= target

    def reachable(self) -> bool:
        """Whether what was queued is being written as it comes (no outage, no spill)."""
        return self._outage is None and self._spill is None and self._error is None

    def check(self) -> None:
        """Raise the writer's error, if a write failed for a reason retrying cannot fix."""
        with self._cond:
            self._raise()

    def close(self, timeout_s: float) -> None:
        """Write what is queued, waiting up to ``timeout_s`` for an unreachable store;
        what is still unwritten then stays in the spill file, said in one line."""
        with self._cond:
            self._closing = True
            self._deadline = time.monotonic() + timeout_s
            self._wanted = self._seq
            self._cond.notify_all()
        self._thread.join()
        if self._store is not None:
            self._store.close()
        self.check()

    def _raise(self) -> None:
        if self._error is not None:
            err = self._error
            raise StoreError(f"the store writer stopped: {err}") from err

    def _line(self, text: str) -> None:
        self.counts.lines.append(text)
        self._say(text)

    # --- the writer thread
    def _take(self) -> list[Op] | list[str] | None:
        """The next ops to write, in order, or spilled lines to parse (None: closed and
        nothing left)."""
        with self._cond:
            while True:
                if self._mem:
                    due = (
                        self._closing
                        or self._urgent
                        or len(self._mem) >= self.flush_every
                        or self._wanted >= self._mem[0][0]
                        or self._outage is not None
                    )
                    wait = 0.0
                    if not due and self._oldest_at is not None:
                        wait = self._oldest_at + self.flush_seconds - time.monotonic()
                    if due or wait <= 0:
                        n = min(len(self._mem), self.max_batch)
                        ops = [self._mem.popleft() for _ in range(n)]
                        self._urgent = False
                        self._oldest_at = time.monotonic() if self._mem else None
                        self._cond.notify_all()  # room in the queue
                        return ops
                    self._cond.wait(wait)
                    continue
                if self._spill is not None:
                    lines = self._spill.take(min(self.max_batch, 1000))
                    if lines:
                        return lines
                    self._spill.remove()  # read to its end: new ops queue in memory again
                    self._spill = None
                    line = self._over_locked()
                    if line is not None:
                        self._line(line)
                    continue
                if self._closing:
                    return None
                self._cond.wait(1.0)

    def _loop(self) -> None:
        while True:
            taken = self._take()
            if taken is None:
                return
            spilled = bool(taken) and isinstance(taken[0], str)
            ops = parse(cast(list[str], taken)) if spilled else cast(list[Op], taken)
            try:
                for g in groups(ops):
                    self._write(g)
            except _GiveUp:
                self._keep(ops)
                return
            except BaseException as exc:  # noqa: BLE001 - handed to the driver's next call
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()
                self._say(f"store write failed (not retried): {exc}")
                return

    def _write(self, g: list[Op]) -> None:
        """Write one group, retrying while the store cannot be reached."""
        delay = self.backoff_s
        while True:
            tried = time.monotonic()
            try:
                if self._store is None:
                    self._store = self._open()
                self._apply(self._store, g)
                break
            except Exception as exc:
                why = unreachable(exc)
                if why is None:
                    raise
                self._down(why, tried)
                with self._cond:
                    if self._closing and self._deadline is not None:
                        if time.monotonic() >= self._deadline:
                            raise _GiveUp from None
                        delay = min(delay, max(0.05, self._deadline - time.monotonic()))
                    self._cond.wait(delay)  # woken early by close()
                delay = min(delay * 2, self.backoff_max_s)
        self._committed(g)

    def _down(self, why: str, tried: float) -> None:
        """The store could not be reached by the attempt made at ``tried`` (the outage's
        start: a lock is waited on for a while before it fails)."""
        with self._cond:
            if self._outage is not None and self._outage.back_at is None:
                return
            if self._outage is None:
                self._outage = Outage(tried, why)
                self.counts.outages += 1
                self._cond.notify_all()  # a driver waiting for room may spill now
                first = True
            else:
                self._outage.back_at = None  # went again before the backlog was written
                first = False
        if first:
            self._line(f"store unreachable: {why}; buffering results, retrying")

    def _committed(self, g: list[Op]) -> None:
        results = sum(1 for op in g if op[1] == "step")
        with self._cond:
            self._done = int(g[-1][0])
            self.counts.results += results
            self.counts.ops += len(g)
            self.counts.batches += 1
            o = self._outage
            if o is not None:
                o.late += results
                if o.back_at is None:
                    o.back_at = time.monotonic()
                    o.mark = self._seq
            line = self._over_locked()
            self._cond.notify_all()
        for fn in self._on_commit:
            fn(g)
        if line is not None:
            self._line(line)

    def _over_locked(self) -> str | None:
        """End the outage once its backlog is written (memory and spill); its line."""
        o = self._outage
        if o is None or o.back_at is None or self._done < o.mark or self._spill is not None:
            return None
        self._outage = None
        self.counts.late += o.late
        spilled = f", {o.spilled} of them through {self.spill_path}" if o.spilled else ""
        return (
            f"store back after {o.back_at - o.since:.0f} s: {o.late} results written late{spilled}"
        )

    def _keep(self, inflight: list[Op]) -> None:
        """Closing with the store still down: every unwritten op goes to the spill file,
        in order (the one in flight, the queue, what was spilled before), said once."""
        with self._cond:
            done = self._done
            rest = [op for op in inflight if op[0] > done] + list(self._mem)
            self._mem.clear()
            later = self._spill.rest() if self._spill is not None else []
            if self._spill is not None:
                self._spill.remove()
            tmp = self.spill_path.with_suffix(".tmp")
            tmp.unlink(missing_ok=True)
            sp = Spill(tmp)
            sp.append(rest + later)
            sp.close()
            os.replace(tmp, self.spill_path)
            self._spill = None
            self._cond.notify_all()
        n = sum(1 for op in rest + later if op[1] == "step")
        self._line(
            f"store still unreachable at the end: {n} results ({len(rest) + len(later)} "
            f"writes) kept in {self.spill_path}; they are written first when this sweep "
            "is resumed (gapwatch sweep ... --resume)"
        )


class _GiveUp(Exception):
    """Closing, and the store stayed unreachable past the deadline."""
