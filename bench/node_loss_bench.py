"""A Ray node lost in the middle of a sweep: what moved, what it cost, what was lost.

    .venv/bin/python bench/node_loss_bench.py [--kind builtin command] [--steps 40]
        [--checkpoint-every 4] [--ray-health-check]

For each ``--kind`` this script starts a two-node Ray cluster on this machine (``ray start
--head`` and a second ``ray start --address``, two CPUs each; the helpers of
``tests/orchestrator/procs.py``), runs ``gapwatch sweep --address`` over four one-CPU
trials (a dense control and three ``quant`` treatments of the built-in worker with
``stopping: false``, or four command trials whose trainer writes a step every 0.25 s),
two per node, and once both trials of the second node are under way (a checkpoint
stored, for built-in trials; 5 steps, for command trials) it SIGKILLs that node's
raylet and Ray workers. Measured, from the store (polled every 0.1 s) and the driver's
output:

- trials moved (started again on the head), each run's attempts;
- steps lost (of 1..N, missing at the end) and stored twice (rows of one run, metric and
  step beyond the first), summed over the runs; steps re-run (a moved trial's steps
  between its checkpoint and the kill, trained twice);
- seconds from the kill to the driver's ``retry`` line (Ray noticed the node gone), to
  the moved trial's new attempt in the store, and to its first new step stored (this
  one includes waiting for a free CPU on the head, whose own two trials hold both);
- command trials: seconds until the lost node's trainer processes are gone.

The head notices a dead node after 3 failed 1 s health checks (``FAST_NODE_DEATH``);
``--ray-health-check`` keeps Ray's defaults (5 failures 3 s apart), as a real cluster
would. Takes about 1.5 min per kind on 2 cores. Writes bench/results/node_loss_bench.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
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
from procs import BIN, cmdline, descendants, two_nodes  # noqa: E402
from sqlalchemy import text  # noqa: E402

from gapwatch.store import Store, StoreError, open_store  # noqa: E402

OUT = ROOT / "bench" / "results" / "node_loss_bench.md"
TRAINER = """
import json, sys, time
log, n = sys.argv[1], int(sys.argv[2])
with open(log, "a") as f:
    for s in range(1, n + 1):
        f.write(json.dumps({"step": s, "critic/score/mean": 0.5}) + "\\n")
        f.flush()
        time.sleep(0.25)
"""


@dataclass
class Moved:
    key: str
    at_kill: int
    """Its newest stored step when the node was killed."""
    resume: int
    """The step its new attempt goes on after (its checkpoint's; 0: from step 1)."""
    new_attempt_s: float | None = None
    first_step_s: float | None = None


@dataclass
class Outcome:
    kind: str
    steps: int
    moved: list[Moved]
    attempts: dict[str, int | None]
    lost: int
    twice: int
    detect_s: list[float]
    trainers_gone_s: float | None
    wall_s: float
    status: str
    notes: list[str] = field(default_factory=list)


def _config(kind: str, steps: int, every: int, tmp: Path, marker: str) -> dict[str, Any]:
    common = {"seeds": [0], "steps": steps, "correction": ["none"], "stopping": False,
              "resources": {"cpus": 1}}  # fmt: skip
    if kind == "builtin":
        return {**common, "name": "bench-node-loss", "env": "mul", "tasks_per_step": 2,
                "group_size": 2, "checkpoint_every": every,
                "compression": [{"codec": "quant", "bits": [2, 3, 4]}]}  # fmt: skip
    (tmp / "trainer.py").write_text(TRAINER)
    return {**common, "name": "bench-node-loss-cmd",
            "compression": [{"codec": "fake", "level": [1, 2, 3]}],
            "worker": {"command": ["{python}", "{workdir}/trainer.py", "{trial_dir}/m.jsonl",
                                   str(steps), marker],
                       "log": "{trial_dir}/m.jsonl", "grace": 2}}  # fmt: skip


def stored_twice(st: Store, sweep_id: int | None = None) -> int:
    """Rows of one (run, metric, step) beyond the first, of the sweep ``sweep_id`` (None:
    every sweep); the primary key forbids them: counted, not assumed."""
    where = "" if sweep_id is None else f"WHERE r.sweep_id = {int(sweep_id)} "
    q = "SELECT COALESCE(SUM(n - 1), 0) FROM (SELECT COUNT(*) AS n FROM metrics m JOIN runs r "
    q += f"ON r.id = m.run_id {where}GROUP BY m.run_id, m.name_id, m.step "
    q += "HAVING COUNT(*) > 1) AS dup"
    with st.engine.connect() as conn:
        return int(conn.execute(text(q)).scalar_one())


def one(kind: str, steps: int, every: int, fast: bool) -> Outcome:
    tmp = Path(tempfile.mkdtemp(prefix=f"gw-nodeloss-{kind}-"))
    marker = f"node-loss-bench-{os.getpid()}"
    cfg = _config(kind, steps, every, tmp, marker)
    path = tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(cfg))
    url = f"sqlite:///{tmp}/bench.db"
    said: list[tuple[float, str]] = []
    t_start = time.monotonic()
    with two_nodes(tmp, fast_death=fast) as cl:
        proc = subprocess.Popen(
            [str(BIN / "gapwatch"), "sweep", str(path), "--db", url, "--address", cl.address],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp,
            start_new_session=True, env={**os.environ, "RAY_ADDRESS": ""},
        )  # fmt: skip

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                said.append((time.monotonic(), line.rstrip()))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            st = None
            while True:
                if proc.poll() is not None:
                    raise SystemExit("the sweep ended before the kill:\n" + "\n".join(
                        s for _, s in said[-20:]))  # fmt: skip
                try:
                    st = st or open_store(url, read_only=True)
                    there = cl.runs_on_second(st.runs())
                except StoreError:
                    time.sleep(0.3)
                    continue
                if len(there) == 2 and all(
                    (r.checkpoint_step or 0) >= every if kind == "builtin" else
                    (r.last_step or 0) >= 5 for r in there
                ):  # fmt: skip
                    break
                time.sleep(0.1)
            trainers = [p for p in descendants(cl.nodes[1].pid) if marker in cmdline(p)]
            moved = [
                Moved(r.trial_id, int(r.last_step or 0),
                      int(r.checkpoint_step or 0) if kind == "builtin" else 0)
                for r in there
            ]  # fmt: skip
            t_kill = time.monotonic()
            cl.kill_second_node(keep=marker)
            gone_s = None
            while trainers and time.monotonic() - t_kill < 30:
                if not any(cmdline(p) for p in trainers):
                    gone_s = time.monotonic() - t_kill
                    break
                time.sleep(0.05)
            while proc.poll() is None:
                runs = {r.trial_id: r for r in st.runs()}
                now = time.monotonic() - t_kill
                for m in moved:
                    r = runs[m.key]
                    if m.new_attempt_s is None and (r.attempts or 0) >= 2:
                        m.new_attempt_s = now
                    if (m.new_attempt_s is not None and m.first_step_s is None
                            and (r.last_step or 0) > m.resume):  # fmt: skip
                        m.first_step_s = now
                time.sleep(0.1)
            reader.join(timeout=10)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    wall = time.monotonic() - t_start
    st = open_store(url, read_only=True)
    runs = st.runs()
    lost = 0
    for r in runs:
        have = {h["step"] for h in st.history(r.id)}
        lost += len(set(range(1, steps + 1)) - have)
    sweep = st.sweeps()[0]
    detect = [t - t_kill for t, s in said if s.startswith("retry ") and t >= t_kill]
    notes = [s for _, s in said if s.startswith("retry ")]
    return Outcome(kind, steps, moved, {r.trial_id: r.attempts for r in runs}, lost,
                   stored_twice(st), detect, gone_s, wall, sweep.status, notes)  # fmt: skip


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def report(outs: list[Outcome], fast: bool, cmd: str) -> str:
    health = "3 failed 1 s health checks" if fast else "Ray's default health checks"
    lines = [
        f"## Node loss mid-sweep ({datetime.now(UTC):%Y-%m-%d})",
        "",
        f"Machine: {machine()}. Command: `{cmd}`. Two Ray nodes on this machine, two CPUs "
        f"each, four one-CPU trials (two per node); the second node's raylet and Ray "
        f"workers SIGKILLed once both its trials were under way; dead node noticed after "
        f"{health}.",
        "",
        "| trials | steps | sweep | moved | attempts | steps lost | stored twice | steps re-run "
        "| kill to retry line (s) | kill to new attempt (s) | kill to first new step (s) "
        "| trainers gone (s) | wall (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outs:
        attempts = ", ".join(f"{k}: {v}" for k, v in sorted(o.attempts.items()))
        rerun = sum(m.at_kill - m.resume for m in o.moved)
        lines.append(
            f"| {o.kind} | {o.steps} | {o.status} | {len(o.moved)} | {attempts} | {o.lost} "
            f"| {o.twice} | {rerun} | {', '.join(_fmt(d) for d in o.detect_s) or '-'} "
            f"| {', '.join(_fmt(m.new_attempt_s) for m in o.moved)} "
            f"| {', '.join(_fmt(m.first_step_s) for m in o.moved)} "
            f"| {_fmt(o.trainers_gone_s) if o.kind == 'command' else 'n/a'} | {o.wall_s:.0f} |"
        )
    lines += ["", "The driver said:", ""]
    lines += [f"- `{n}`" for o in outs for n in o.notes]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", nargs="+", choices=["builtin", "command"],
                    default=["builtin", "command"])  # fmt: skip
    ap.add_argument("--steps", type=int, default=40, help="steps per trial")
    ap.add_argument("--checkpoint-every", type=int, default=4)
    ap.add_argument("--ray-health-check", action="store_true",
                    help="keep Ray's default node health checks (slower to notice)")  # fmt: skip
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    outs = []
    for kind in args.kind:
        o = one(kind, args.steps, args.checkpoint_every, not args.ray_health_check)
        outs.append(o)
        print(f"{kind}: moved {len(o.moved)}, lost {o.lost}, stored twice {o.twice}, "
              f"wall {o.wall_s:.0f} s", flush=True)  # fmt: skip
    cmd = "python bench/node_loss_bench.py " + " ".join(sys.argv[1:])
    text_ = report(outs, not args.ray_health_check, cmd.strip())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text_)
    print(text_)


if __name__ == "__main__":
    main()
