"""A sweep left overnight, played fast: a trial process, the worker node and the driver
SIGKILLed and PostgreSQL stopped for 30 s, each at a random time; nothing may be lost.

    .venv/bin/python bench/chaos_bench.py [--seeds 5] [--first-seed 0] [--steps 40]
        [--outage 30]

Each sweep runs on a two-node Ray cluster on this machine (``ray start --head`` and a
second ``ray start --address``, two CPUs each; ``tests/orchestrator/procs.py``), its store a
private PostgreSQL server (``tests/orchestrator/pg_server.py``), its Tune storage one folder
both nodes reach. The sweep is 8 trials of the quick preset (2 seeds x a dense control and
top-k 5% under none, tis and icepop; the default rules on; a checkpoint every 4 steps),
``--steps`` steps each.

First an undisturbed sweep of the same config gives the reference: per trial its status,
stop rule and step, and the steps it stored. Then, per chaos seed (a ``random.Random`` of
that seed draws everything below), four events in a drawn order, each a drawn 2-8 s after
the previous one has been absorbed (a new step stored since it ended; the first after
the sweep's first stored step):

- ``trial``: SIGKILL the Ray worker process of a drawn running trial;
- ``node``: SIGKILL the second node's raylet and Ray workers (the rest of the sweep runs
  on the head);
- ``driver``: SIGKILL the ``gapwatch sweep`` driver process, then ``gapwatch sweep
  --resume`` from the same folder;
- ``postgres``: stop the store's server (``pg_ctl stop -m fast``) for ``--outage`` s.

An event whose moment comes after the sweep has finished is reported as not fired.
Measured per seed, against the reference:

- steps lost: steps of the reference (up to its stop step; all of them for a completed
  trial) that the chaos sweep did not store;
- stored twice: rows of one (run, metric, step) beyond the first, plus runs beyond the
  first of one trial in the sweep;
- wrong statuses: trials whose final (status, stop rule, stop step) differs from the
  reference's (the built-in worker is deterministic per seed, from a checkpoint too), a
  sweep not ``completed``, and any run left ``running``;
- the sweep's wall time (driver start to last driver's end, the resume included) against
  the reference's.

Takes about 4 min per seed on 2 cores. Writes bench/results/chaos_bench.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "orchestrator"))

from _machine import machine  # noqa: E402
from node_loss_bench import stored_twice  # noqa: E402
from pg_server import PrivatePostgres  # noqa: E402
from procs import BIN, Cluster, descendants, two_nodes  # noqa: E402
from sqlalchemy.exc import SQLAlchemyError  # noqa: E402

from gapwatch.store import Store, StoreError, open_store  # noqa: E402

OUT = ROOT / "bench" / "results" / "chaos_bench.md"
EVENTS = ("trial", "node", "driver", "postgres")


def config(name: str, steps: int, storage: Path) -> dict[str, Any]:
    """The sweep: 2 seeds x (dense control + top-k 5% under none, tis, icepop) = 8 trials."""
    return {
        "name": name, "env": "mul", "model": "tiny", "steps": steps, "seeds": [0, 1],
        "compression": [{"codec": "topk", "keep": 0.05}],
        "correction": ["none", "tis", "icepop"], "rules": {},
        "checkpoint_every": 4, "storage_path": str(storage),
        "resources": {"cpus": 1, "gpus": 0},
    }  # fmt: skip


@dataclass
class Fired:
    event: str
    at_s: float | None
    """Seconds after the sweep's start (None: not fired, the sweep had finished)."""
    what: str


@dataclass
class Outcome:
    seed: int | None
    """None: the undisturbed reference."""
    fired: list[Fired] = field(default_factory=list)
    lost: int = 0
    twice: int = 0
    wrong: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    sweep_status: str = ""
    runs: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, set[int]] = field(default_factory=dict)


class Sweep:
    """The sweep's driver(s): the first, then each ``--resume``; output appended to one
    file in the sweep's folder."""

    def __init__(self, cfg_path: Path, url: str, address: str, cwd: Path) -> None:
        self.args = [str(BIN / "gapwatch"), "sweep", str(cfg_path), "--db", url,
                     "--address", address]  # fmt: skip
        self.cwd, self.log = cwd, cwd / "driver.log"
        self.proc = self._start([])
        self.drivers = 1

    def _start(self, extra: list[str]) -> subprocess.Popen[bytes]:
        with self.log.open("a") as out:
            return subprocess.Popen(
                [*self.args, *extra], stdout=out, stderr=subprocess.STDOUT, cwd=self.cwd,
                start_new_session=True, env={**os.environ, "RAY_ADDRESS": ""},
            )  # fmt: skip

    def kill_and_resume(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # it may have just finished
            os.kill(self.proc.pid, signal.SIGKILL)  # the driver only
        self.proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):  # whatever it started in its group
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc = self._start(["--resume"])
        self.drivers += 1

    def done(self) -> bool:
        return self.proc.poll() is not None


class Chaos:
    """Fires the seed's four events in their drawn order while the sweep runs."""

    def __init__(
        self, seed: int, sweep: Sweep, name: str, url: str, cl: Cluster, pg: PrivatePostgres,
        outage_s: float, t0: float,
    ) -> None:  # fmt: skip
        self.rng = random.Random(seed)
        self.order = list(EVENTS)
        self.rng.shuffle(self.order)
        self.gaps = [self.rng.uniform(2, 8) for _ in self.order]
        self.sweep, self.name, self.url, self.cl, self.pg = sweep, name, url, cl, pg
        self.outage_s, self.t0 = outage_s, t0
        self.fired: list[Fired] = []
        self.error: BaseException | None = None
        self.sweep_id: int | None = None
        """The sweep's id in the store, once its driver has recorded it."""

    def _runs(self, st: Store) -> list[Any] | None:
        """The sweep's runs ([] before it is recorded); None while the store cannot be
        read (the server is down this moment)."""
        try:
            if self.sweep_id is None:
                found = [s.id for s in st.sweeps() if s.name == self.name]
                if not found:
                    return []
                self.sweep_id = found[0]
            return st.runs(sweep_id=self.sweep_id)
        except (StoreError, SQLAlchemyError):
            return None

    def _newest_step_total(self, st: Store) -> int | None:
        """The sum of the sweep's runs' newest steps (grows with any new step); None while
        the store cannot be read."""
        runs = self._runs(st)
        return None if runs is None else sum(int(r.last_step or 0) for r in runs)

    def _absorbed(self, st: Store, after: int) -> bool:
        """Wait until a step beyond ``after`` (a total of newest steps) is stored; False if
        the sweep ended first."""
        while not self.sweep.done():
            now = self._newest_step_total(st)
            if now is not None and now > after:
                return True
            time.sleep(0.3)
        return False

    def _fire(self, event: str, st: Store) -> str:
        if event == "trial":
            running = [
                r for r in self._runs(st) or []
                if r.status == "running" and isinstance(r.config.get("placement"), dict)
            ]  # fmt: skip
            alive = [r for r in running if Path(f"/proc/{r.config['placement']['pid']}").exists()]
            if not alive:
                return "no trial running"
            r = self.rng.choice(sorted(alive, key=lambda r: r.trial_id))
            pid = int(r.config["placement"]["pid"])
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            node = "second" if pid in set(descendants(self.cl.nodes[1].pid)) else "head"
            return f"{r.trial_id} (pid {pid}, {node} node) at its step {r.last_step or 0}"
        if event == "node":
            there = [r.trial_id for r in self.cl.runs_on_second(self._runs(st) or [])]
            n = len(self.cl.kill_second_node())
            return f"{n} processes, trials {', '.join(sorted(there)) or 'none'}"
        if event == "driver":
            self.sweep.kill_and_resume()
            return f"driver {self.sweep.drivers - 1} killed, --resume started"
        self.pg.stop()
        time.sleep(self.outage_s)
        self.pg.start()
        return f"down {self.outage_s:g} s"

    def run(self) -> None:
        try:
            st = open_store(self.url, read_only=True)
            if not self._absorbed(st, 0):
                raise RuntimeError("the sweep ended before its first step")
            for event, gap in zip(self.order, self.gaps, strict=True):
                t_fire = time.monotonic() + gap
                while time.monotonic() < t_fire and not self.sweep.done():
                    time.sleep(0.1)
                if self.sweep.done():
                    self.fired.append(Fired(event, None, "not fired: the sweep had finished"))
                    continue
                at = time.monotonic() - self.t0
                what = self._fire(event, st)
                self.fired.append(Fired(event, at, what))
                total = None
                while total is None and not self.sweep.done():
                    total = self._newest_step_total(st)
                    time.sleep(0.3)
                self._absorbed(st, total or 0)
        except BaseException as exc:  # reported by the main thread
            self.error = exc


def run_sweep(
    seed: int | None, steps: int, pg: PrivatePostgres, outage_s: float
) -> tuple[Outcome, str]:
    name = "chaos-reference" if seed is None else f"chaos-s{seed}"
    tmp = Path(tempfile.mkdtemp(prefix=f"gw-{name}-"))
    (tmp / "storage").mkdir()
    cfg_path = tmp / "sweep.yaml"
    cfg_path.write_text(yaml.safe_dump(config(name, steps, tmp / "storage")))
    out = Outcome(seed)
    with two_nodes(tmp) as cl:
        t0 = time.monotonic()
        sweep = Sweep(cfg_path, pg.url, cl.address, tmp)
        chaos = None
        if seed is not None:
            chaos = Chaos(seed, sweep, name, pg.url, cl, pg, outage_s, t0)
            thread = threading.Thread(target=chaos.run, daemon=True)
            thread.start()
        try:
            while True:  # the last driver's end (a resumed one replaces a killed one)
                proc = sweep.proc
                proc.wait(timeout=1800)
                if proc is sweep.proc and (chaos is None or not thread.is_alive()):
                    break
                time.sleep(0.2)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(sweep.proc.pid, signal.SIGKILL)
        out.wall_s = time.monotonic() - t0
        if chaos is not None:
            thread.join(timeout=120)
            out.fired = chaos.fired
            if chaos.error is not None:
                raise SystemExit(f"{name}: the chaos thread failed: {chaos.error!r}")
        if sweep.proc.returncode != 0:
            out.wrong.append(f"last driver exited {sweep.proc.returncode}")
    st = open_store(pg.url, read_only=True)
    sw = [s for s in st.sweeps() if s.name == name][0]
    out.sweep_status = sw.status
    runs = st.runs(sweep_id=sw.id)
    by_trial: dict[str, list[Any]] = {}
    for r in runs:
        by_trial.setdefault(r.trial_id, []).append(r)
    out.twice = sum(len(v) - 1 for v in by_trial.values()) + stored_twice(st, sw.id)
    for key, rs in by_trial.items():
        out.runs[key] = rs[0]
        out.steps[key] = {int(h["step"]) for r in rs for h in st.history(r.id)}
    return out, (tmp / "driver.log").read_text()


def judge(out: Outcome, ref: Outcome, steps: int) -> None:
    """Fill ``out``'s steps lost and wrong statuses against the reference."""
    if out.sweep_status != "completed":
        out.wrong.append(f"sweep {out.sweep_status}")
    for key, r0 in sorted(ref.runs.items()):
        r = out.runs.get(key)
        end = int(r0.stop_step) if r0.status == "stopped" and r0.stop_step else steps
        want = {s for s in ref.steps[key] if s <= end}
        if r is None:
            out.lost += len(want)
            out.wrong.append(f"{key}: no run")
            continue
        out.lost += len(want - out.steps[key])
        got, was = (r.status, r.stop_rule, r.stop_step), (r0.status, r0.stop_rule, r0.stop_step)
        if got != was:
            out.wrong.append(f"{key}: {got} (undisturbed: {was})")


def report(ref: Outcome, outs: list[Outcome], cmd: str, steps: int, outage_s: float) -> str:
    stopped = sum(r.status == "stopped" for r in ref.runs.values())
    lines = [
        f"## A sweep under chaos ({datetime.now(UTC):%Y-%m-%d})",
        "",
        f"Machine: {machine()}. Command: `{cmd}`. Two Ray nodes on this machine (two CPUs "
        f"each), a private PostgreSQL store, 8 one-CPU trials of the quick preset for "
        f"{steps} steps (2 seeds x dense + top-k 5% under none, tis, icepop; default rules; "
        f"a checkpoint every 4 steps). Per seed: a trial process, the second node and the "
        f"driver SIGKILLed (then `--resume`), PostgreSQL stopped {outage_s:g} s, in a drawn "
        f"order, each 2-8 s after the previous one was absorbed. Undisturbed reference: "
        f"{ref.wall_s:.0f} s, sweep {ref.sweep_status}, {stopped} of {len(ref.runs)} trials "
        f"stopped by a rule, {sum(len(s) for s in ref.steps.values())} steps stored.",
        "",
        "| seed | events (s after start: what) | steps lost | stored twice | wrong statuses "
        "| wall (s) | vs undisturbed |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in outs:
        ev = "; ".join(
            f"{f.event} {'-' if f.at_s is None else f'{f.at_s:.0f}'}: {f.what}" for f in o.fired
        )
        wrong = len(o.wrong)
        lines.append(
            f"| {o.seed} | {ev} | {o.lost} | {o.twice} | {wrong} | {o.wall_s:.0f} "
            f"| {o.wall_s / ref.wall_s:.2f}x |"
        )
    said = [f"- seed {o.seed}: {w}" for o in outs for w in o.wrong]
    if said:
        lines += ["", "Wrong statuses:", "", *said]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5, help="chaos seeds to run")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=40, help="steps per trial")
    ap.add_argument("--outage", type=float, default=30.0, help="seconds PostgreSQL is down")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if why := PrivatePostgres.available():
        raise SystemExit(f"chaos_bench needs a private PostgreSQL server: {why}")
    with PrivatePostgres() as pg:
        ref, _ = run_sweep(None, args.steps, pg, args.outage)
        print(f"reference: {ref.wall_s:.0f} s, {ref.sweep_status}", flush=True)
        outs = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            o, log = run_sweep(seed, args.steps, pg, args.outage)
            judge(o, ref, args.steps)
            outs.append(o)
            print(f"seed {seed}: lost {o.lost}, twice {o.twice}, wrong {len(o.wrong)}, "
                  f"wall {o.wall_s:.0f} s; " + "; ".join(
                      f"{f.event}@{f.at_s}: {f.what}" for f in o.fired), flush=True)  # fmt: skip
            if o.wrong:
                print("\n".join(o.wrong) + "\n" + log[-3000:], flush=True)
    cmd = ("python bench/chaos_bench.py " + " ".join(sys.argv[1:])).strip()
    text_ = report(ref, outs, cmd, args.steps, args.outage)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text_)
    print(text_)


if __name__ == "__main__":
    main()
