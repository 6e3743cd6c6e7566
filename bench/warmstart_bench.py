"""The warm start's knife edge, and what the quality gate does about it.

    .venv/bin/python bench/warmstart_bench.py [--threads 1,2,4] [--gate-threads 1]

The quick preset's supervised warm start built from scratch under 1, 2 and 4 torch threads
(each a different floating-point summation order, a proxy for another CPU), with the gate
off: its final loss and its held-out figures (``workers.probe``: 256 episodes at
temperature 1: success, tool called, result copied after a call). Then the same builds
with the gate on (the defaults ``warm_start_min_success`` / ``warm_start_min_copied``):
whether training on rescues a build below it, or the build fails in one line. Each build
runs in its own process, one at a time, into a temporary cache. Writes
bench/results/warmstart_bench.md; the floors' docstrings in ``workers/config.py`` quote it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _machine import machine  # noqa: E402

OUT = ROOT / "bench" / "results" / "warmstart_bench.md"
CHILD = """
import json, sys, torch
torch.set_num_threads(int(sys.argv[1]))
from gapwatch.workers import RunConfig, envs, samplers
from gapwatch.workers import model as M
from gapwatch.workers.probe import measure
over = {} if sys.argv[2] == "gate" else {"warm_start_min_success": None, "warm_start_min_copied": None}
cfg = RunConfig.preset("quick", **over)
try:
    model, tok, info = M._build_warm_start(cfg)
except M.WarmStartError as exc:
    print("RESULT " + json.dumps({"error": str(exc)}))
    raise SystemExit(0)
s = samplers.make("torch", model, tok, device="cpu", dtype="float32", seed=0, stops=envs.STOP_STRINGS)
q = measure(envs.get(cfg.env), s, tok, episodes=256, max_interactions=cfg.max_interactions,
            token_budget=cfg.token_budget, temperature=cfg.temperature)
print("RESULT " + json.dumps({"loss": info["final_loss"], "rounds": info.get("extra_rounds", 0), **q.to_dict()}))
"""


def build(threads: int, mode: str) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(threads), mode],
            cwd=ROOT, capture_output=True, text=True,
            env={**os.environ, "GAPWATCH_CACHE": cache},
        )  # fmt: skip
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
        if out.returncode != 0 or not line:
            raise SystemExit(f"build failed ({threads} threads, {mode}): {out.stderr[-2000:]}")
        return {**json.loads(line[0][7:]), "wall": time.perf_counter() - t0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2,4")
    ap.add_argument(
        "--gate-threads", default="1",
        help="thread counts to rebuild with the gate on (a build that passes it on the first "
        "measurement is the same bytes as without it, so only those below it need rebuilding)",
    )  # fmt: skip
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    gate_threads = [int(t) for t in args.gate_threads.split(",") if t]
    rows = []
    for mode, ts in (("raw", threads), ("gate", gate_threads)):
        for t in ts:
            r = build(t, mode)
            print(f"[warmstart] {t} threads, {mode}: {r}", flush=True)
            rows.append((mode, t, r))
    lines = [
        "## Warm start: 1, 2, 4 torch threads, gate off and on",
        "",
        f"- machine: {machine()}",
        f"- date: {dt.date.today().isoformat()}",
        f"- command: `python bench/warmstart_bench.py --threads {args.threads} --gate-threads "
        f"{args.gate_threads}`",
        "- config: the quick preset (600 supervised steps, 70% guess demonstrations); figures on"
        " 256 held-out episodes at temperature 1 (`workers.probe`)",
        "",
        "| gate | threads | final loss | extra rounds | success | tool called | result copied | build s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, t, r in rows:
        if "error" in r:
            lines.append(f"| {mode} | {t} | - | - | failed: {r['error']} | | | {r['wall']:.0f} |")
            continue
        lines.append(
            f"| {mode} | {t} | {r['loss']:.3f} | {r['rounds']} | {r['success']:.1%} | "
            f"{r['tool_calls']:.1%} | {r['copied']:.1%} | {r['wall']:.0f} |"
        )
    lines.append("")
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
