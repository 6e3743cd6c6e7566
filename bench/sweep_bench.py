"""Benchmark: the quickstart sweep with the stop rules, and again with no stopping.

Reports, each measured here, nothing typed in:
- wall time of each sweep (Ray start-up included) and the trial-steps each used (the
  compute the rules saved);
- per treatment: its fate and collapse onset by ``bench/ground_truth.py``'s definition
  (collapsed: mean score over the last 5 steps below 0.05; onset: the first step from
  which the score stays below 0.05), read from the no-stopping sweep, which runs every
  trial to the end (trials are deterministic per seed on CPU, so the stopped sweep's
  history matches it up to its stop), and the step it was stopped; requirement: a
  treatment that collapses is stopped no later than 2 steps after its onset;
- whether any dense control was stopped (requirement: none).

Writes bench/results/sweep_bench.md. Rerun: ``.venv/bin/python bench/sweep_bench.py``
(``--set steps=5`` etc. for a quick look; figures are then not the quickstart's).
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _machine import machine as machine_line  # noqa: E402  (bench/ is on sys.path as a script)
from ground_truth import COLLAPSED_BELOW, fate  # noqa: E402

from gapwatch.correction import names  # noqa: E402
from gapwatch.orchestrator.sweep.config import load_sweep_config  # noqa: E402
from gapwatch.orchestrator.sweep.driver import SweepOutcome, execute_sweep  # noqa: E402
from gapwatch.store import open_store  # noqa: E402

MAX_LAG = 2
"""A collapsing treatment must be stopped no later than this many steps after its
collapse onset (issue 5)."""


def machine() -> str:
    return f"{machine_line()}, Python {platform.python_version()}"


def run(
    config: Path, overrides: list[str], *, stopping: bool, work: Path
) -> tuple[Any, Any, SweepOutcome]:
    tag = "rules" if stopping else "nostop"
    sweep = load_sweep_config(
        config, [*overrides, f"stopping={'true' if stopping else 'false'}", f"name=bench-{tag}"]
    )
    cfg = sweep.config
    url = f"sqlite:///{work}/{tag}.db"
    print(
        f"[sweep_bench] running {cfg.name}: {len(cfg.seeds)} seeds, {sweep.steps} steps",
        flush=True,
    )
    out = execute_sweep(
        sweep, db_url=url, address=None, resume=False, storage=work / f"ray-{tag}", live=False
    )
    print(
        f"[sweep_bench] {cfg.name}: {out.status} in {out.wall_s:.0f} s, "
        f"trial-steps {out.trial_steps_used}/{out.trial_steps_budget}",
        flush=True,
    )
    return sweep, open_store(url), out


def scores(st: Any, run_id: int) -> dict[int, float]:
    return {
        int(h["step"]): float(h[names.SCORE_MEAN])
        for h in st.history(run_id)
        if h.get(names.SCORE_MEAN) is not None
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=ROOT / "examples" / "quickstart.yaml")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sweep_bench.md")
    ap.add_argument("--keep", type=Path, help="copy the with-rules store (SQLite) here, e.g. "
                    "for bench/collapse_figure.py and the UI screenshot")  # fmt: skip
    args = ap.parse_args()
    command = "  ".join(["python bench/sweep_bench.py", *(f"--set {o}" for o in args.overrides)])
    if args.config != ap.get_default("config"):
        command += f" --config {args.config}"

    with tempfile.TemporaryDirectory(prefix="gw-sweep-bench-") as tmp:
        work = Path(tmp)
        sweep, st_rules, out_rules = run(args.config, args.overrides, stopping=True, work=work)
        _, st_free, out_free = run(args.config, args.overrides, stopping=False, work=work)

        if args.keep:  # SQLite's backup copies what the write-ahead log still holds too
            import sqlite3

            with sqlite3.connect(work / "rules.db") as src, sqlite3.connect(args.keep) as dst:
                src.backup(dst)
        free_runs = {r.trial_id: r for r in st_free.runs()}
        rows: list[dict[str, Any]] = []
        for r in st_rules.runs():
            free = free_runs.get(r.trial_id)
            sc = scores(st_free, free.id) if free is not None else {}
            f = fate([sc[s] for s in sorted(sc)]) if sc else None
            rows.append(
                {
                    "trial": r.trial_id,
                    "role": r.role,
                    "status": r.status,
                    "stop": f"{r.stop_rule} @ {r.stop_step}" if r.stop_rule else "",
                    "stop_step": r.stop_step,
                    "onset": f["onset"] if f else None,
                    "fate": f["fate"] if f else "?",
                    "collapsed": f is not None and f["fate"] == "collapsed",
                    "last5": f["last5"] if f else None,
                    "steps": r.last_step or 0,
                }
            )

    controls_stopped = [x for x in rows if x["role"] == "control" and x["status"] == "stopped"]
    treat = [x for x in rows if x["role"] == "treatment"]
    late: list[str] = []
    false_stops = [x["trial"] for x in treat if not x["collapsed"] and x["status"] == "stopped"]
    for x in treat:
        if not x["collapsed"]:
            x["ok"] = "n/a (did not collapse)" + (
                ": FALSE STOP" if x["status"] == "stopped" else ""
            )
            continue
        on, ss = x["onset"], x["stop_step"]
        good = ss is not None and on is not None and ss <= on + MAX_LAG
        x["ok"] = "yes" if good else "NO" if ss is None else f"late by {ss - on - MAX_LAG}"
        if not good:
            late.append(x["trial"])
    cfg = sweep.config
    saved = out_free.trial_steps_used - out_rules.trial_steps_used
    frac = saved / out_free.trial_steps_used if out_free.trial_steps_used else 0.0

    lines = [
        f"## Sweep: {'quickstart' if args.config == ap.get_default('config') else args.config.name}"
        " with stop rules vs no stopping (bench/sweep_bench.py)",
        "",
        f"- machine: {machine()}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- command: `{command}`",
        f"- sweep: {len(cfg.seeds)} seeds x (1 control + {len(treat) // max(1, len(cfg.seeds))} "
        f"treatments), {sweep.steps} steps, {cfg.resources.cpus:g} CPU per trial",
        "",
        "| figure | measured | target |",
        "|---|---|---|",
        f"| wall time, with rules | {out_rules.wall_s:.0f} s | quickstart < 600 s |",
        f"| wall time, no stopping | {out_free.wall_s:.0f} s | - |",
        f"| trial-steps used, with rules | {out_rules.trial_steps_used} | - |",
        f"| trial-steps used, no stopping | {out_free.trial_steps_used} | - |",
        f"| trial-steps saved | {saved} ({frac:.0%}) | - |",
        f"| controls stopped | {len(controls_stopped)} | 0 |",
        f"| treatments stopped that did not collapse | {len(false_stops)} | 0 |",
        f"| collapsing treatments not stopped within {MAX_LAG} steps of onset "
        f"| {len(late)} of {sum(1 for x in treat if x['collapsed'])} | 0 |",
        "",
        "Fate and onset come from the no-stopping sweep (every trial runs all steps): "
        f"collapsed = mean score over the last 5 steps < {COLLAPSED_BELOW}; onset = the "
        f"first step from which the score stays below {COLLAPSED_BELOW}.",
        "",
        "| trial | role | status (with rules) | stop | fate (last-5 mean) | onset "
        "| stopped in time |",
        "|---|---|---|---|---|---|---|",
    ]
    for x in rows:
        last_txt = "" if x["last5"] is None else f"{x['last5']:+.3f}"
        lines.append(
            f"| {x['trial']} | {x['role']} | {x['status']} | {x['stop']} | "
            f"{x['fate']} ({last_txt}) | {x['onset'] or '-'} | {x.get('ok', '-')} |"
        )
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    print(f"[sweep_bench] wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
