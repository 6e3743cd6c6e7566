"""Ground truth for the stop rules: a grid of runs carried to the end, with no stopping.

    .venv/bin/python bench/ground_truth.py --gzip     # the full grid (hours on 2 shared cores)
    .venv/bin/python bench/ground_truth.py --quick    # a small grid, minutes
    .venv/bin/python bench/ground_truth.py --gzip --grid drift   # with the drift figures
    .venv/bin/python bench/ground_truth.py --gzip --grid long    # the long preset

Runs one dense control per seed and (seed x codec strength x correction) treatments of
the quick preset directly through ``workers.train`` in a pool of ``--workers`` processes
(1 torch thread each, as a sweep's trials; no Ray), every run to its last step. Writes
into ``--out``:

- ``<run>.jsonl`` (``.jsonl.gz`` with ``--gzip``): the run's full history, one
  ``{"step": n, "<metric>": value, ...}`` line per step, values to 6 significant digits,
  the form ``gapwatch replay`` reads (``gunzip -k`` first where gzipped);
- ``index.json``: the grid's settings, the machine and the command, and per run its seed,
  role, codec + kwargs, correction + kwargs, file, wall time and computed fate.

A run whose file exists is not run again, so an interrupted grid resumes where it
stopped (delete the folder to start over). Then prints and writes a markdown report
(``--md``): per control, the learning criteria of issue 12 (mean score over the last 10
steps >= 2x the mean over steps 1-3 and >= 0.3, never below zero two steps running); per
(codec strength, correction), each seed's fate (``fate``: collapsed, learns or stalls)
with the collapse onset. Results are deterministic per seed for a thread count.

Leaves out: stop rules (``gapwatch replay`` applies them to these files), Ray, the store.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import math
import multiprocessing as mp
import shlex
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _machine import machine  # noqa: E402  (bench/ is on sys.path as a script)

from gapwatch.correction import names as N  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SCORE = N.SCORE_MEAN

COLLAPSED_BELOW = 0.05
"""A run has collapsed when its mean score over its last 5 steps is below this; its onset
is the first step from which the score stays below it to the end. On the quick preset a
collapsed policy neither calls the tool nor solves tasks, and scores between -0.1 (every
action unparseable) and about +0.01 (parseable wrong guesses, score 0, with a few
unparseable ones): below zero on most steps but not all, so "below zero" alone would call
a dead run at +0.006 healthy. The initial policy scores about 0.15-0.2 and the dense
control 0.4-0.6, far above."""

# --- the grids ---------------------------------------------------------------------------
CORRECTIONS: list[tuple[str, dict[str, Any]]] = [
    ("none", {}),
    ("tis", {"C": 2.0}),
    ("tis", {"C": 10.0}),
    ("icepop", {"lo": 0.5, "hi": 5.0}),
    ("icepop", {"lo": 0.8, "hi": 1.25}),
    ("seq_tis", {"C": 2.0}),
    ("seq_mis", {"C": 2.0, "lo": 0.5, "hi": 2.0}),
    ("geo_rs", {"lo": 0.999, "hi": 1.001}),
    ("geo_rs", {"lo": 0.9, "hi": 1.1}),
    ("k3_rs", {"hi": 0.01}),
    ("k3_rs", {"hi": 0.1}),
]
"""Each correction of the full grid with its thresholds: the published defaults, and a
second setting where a threshold decides what passes (looser caps and bands, a tighter
IcePop band)."""

STRENGTHS: list[tuple[str, dict[str, Any]]] = [
    ("topk", {"keep": 0.5}),
    ("topk", {"keep": 0.2}),
    ("topk", {"keep": 0.05}),
]
"""Codec strengths of the full grid, mild to the quick preset's collapsing codec (step-1
gap about 0.014, 0.12 and 0.68 against 0.0003 dense; see ``workers.config.QUICK_CODEC``)."""


@dataclass(frozen=True)
class Grid:
    """What to run: controls on ``control_seeds``, treatments on ``seeds``."""

    control_seeds: list[int]
    seeds: list[int]
    strengths: list[tuple[str, dict[str, Any]]]
    corrections: list[tuple[str, dict[str, Any]]]
    steps: int
    common: dict[str, Any] = field(default_factory=dict)
    """RunConfig fields set for every run on top of the quick preset."""


FULL = Grid(list(range(8)), [0, 1, 2, 3], STRENGTHS, CORRECTIONS, 30)
QUICK = Grid([0, 1], [0, 1], [STRENGTHS[0], STRENGTHS[-1]], [CORRECTIONS[0], CORRECTIONS[1]], 6)
DRIFT = Grid(
    [0, 1, 2, 3],
    [0, 1, 2, 3],
    STRENGTHS,
    [CORRECTIONS[0], CORRECTIONS[1], CORRECTIONS[4]],
    30,
)
"""The full grid's design with fewer corrections (none, TIS C=2 and the tight IcePop band,
the winner at top-k 50%), recorded after the drift figures were added (``ref_drift`` and
``ppo`` tails and ESS per slice), for the lead-time bench's question: do they lead?"""
LONG = Grid(list(range(8)), list(range(8)), STRENGTHS, [CORRECTIONS[0]], 30, {"preset": "long"})
"""The ``long`` preset (``add_chain``, 8-12 tool calls an episode): 8 dense controls and,
per seed, the three codec strengths uncorrected."""
GRIDS: dict[str, Grid] = {"full": FULL, "quick": QUICK, "drift": DRIFT, "long": LONG}


@dataclass(frozen=True)
class Spec:
    """One run of the grid."""

    run: str
    """File stem and id, e.g. ``s0-control``, ``s1-topk_keep0.2-tis_C2``."""
    seed: int
    role: str
    codec: str
    codec_kwargs: dict[str, Any]
    correction: str
    correction_kwargs: dict[str, Any]

    def config(self, grid: Grid) -> dict[str, Any]:
        """The ``RunConfig.from_dict`` input of this run."""
        return {
            **grid.common,
            "name": self.run,
            "seed": self.seed,
            "steps": grid.steps,
            "num_threads": 1,
            "compression": self.codec,
            "compression_kwargs": dict(self.codec_kwargs),
            "correction": self.correction,
            "correction_kwargs": dict(self.correction_kwargs),
        }


def label(name: str, kwargs: dict[str, Any]) -> str:
    """``topk_keep0.2``, ``tis_C2``, ``none``: a codec or correction with its arguments."""
    return "_".join([name, *(f"{k}{v:g}" for k, v in sorted(kwargs.items()))])


def specs(grid: Grid) -> list[Spec]:
    """Controls first, then treatments seed by seed (a partial grid is still balanced)."""
    out = [Spec(f"s{s}-control", s, "control", "none", {}, "none", {}) for s in grid.control_seeds]
    for s in grid.seeds:
        for codec, ckw in grid.strengths:
            for corr, kw in grid.corrections:
                run = f"s{s}-{label(codec, ckw)}-{label(corr, kw)}"
                out.append(Spec(run, s, "treatment", codec, ckw, corr, kw))
    return out


# --- running -----------------------------------------------------------------------------
def history_file(out: Path, run: str) -> Path | None:
    """The run's finished history file, plain or gzipped (None if there is none)."""
    for name in (f"{run}.jsonl", f"{run}.jsonl.gz"):
        if (out / name).exists():
            return out / name
    return None


def read_history(path: Path | None) -> list[dict[str, Any]]:
    """The rows of a history file (none if there is no file)."""
    if path is None:
        return []
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def compact(v: float) -> float | None:
    """6 significant digits (the file stays replayable and a fifth smaller); NaN/inf as null."""
    return float(f"{v:.6g}") if math.isfinite(v) else None


def run_one(spec: Spec, grid: Grid, out: Path, gz: bool) -> tuple[str, float]:
    """Train one run to its last step, writing each step's metrics as it comes."""
    from gapwatch.workers import RunConfig, train

    cfg = RunConfig.from_dict(spec.config(grid))
    t0 = time.perf_counter()
    tmp = out / f"{spec.run}.partial"
    with tmp.open("w") as f:
        for res in train(cfg):
            row = {"step": res.step, **{k: compact(v) for k, v in res.metrics.items()}}
            f.write(json.dumps(row) + "\n")
            f.flush()
    if gz:
        (out / f"{spec.run}.jsonl.gz").write_bytes(gzip.compress(tmp.read_bytes(), mtime=0))
        tmp.unlink()
    else:
        tmp.rename(out / f"{spec.run}.jsonl")
    return spec.run, time.perf_counter() - t0


def run_grid(grid: Grid, out: Path, workers: int, gz: bool) -> dict[str, float]:
    """Run every spec that has no history file yet; returns wall seconds per run."""
    import torch

    from gapwatch.workers import RunConfig
    from gapwatch.workers.model import ensure_warm_start

    out.mkdir(parents=True, exist_ok=True)
    todo = [s for s in specs(grid) if history_file(out, s.run) is None]
    done = len(specs(grid)) - len(todo)
    print(f"[ground_truth] {done} runs done, {len(todo)} to run", flush=True)
    if not todo:
        return {}
    torch.set_num_threads(1)  # as every run (and a sweep's trials) would build it
    ensure_warm_start(RunConfig.from_dict(todo[0].config(grid)))  # built once, before the pool
    walls: dict[str, float] = {}
    # spawn: every run starts from a fresh interpreter (no torch state forked from here)
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        futs = {pool.submit(run_one, s, grid, out, gz): s for s in todo}
        for i, fut in enumerate(as_completed(futs), 1):
            run, wall = fut.result()
            walls[run] = wall
            score = read_history(history_file(out, run))[-1][SCORE]
            print(
                f"[ground_truth] {i}/{len(todo)} {run}: {wall:.0f} s, last score {score:+.3f}",
                flush=True,
            )
    return walls


# --- analysis ----------------------------------------------------------------------------
def scores(rows: list[dict[str, Any]]) -> list[float]:
    return [float(r[SCORE]) for r in rows]


def learning(s: list[float]) -> dict[str, Any]:
    """Issue 12's control criteria: last-10 mean >= 2x the steps 1-3 mean and >= 0.3, and
    never below zero two steps running."""
    first3, last10 = statistics.mean(s[:3]), statistics.mean(s[-10:])
    twice_below = any(a < 0 and b < 0 for a, b in zip(s, s[1:], strict=False))
    ratio = last10 / first3 if first3 > 0 else math.inf
    ok = last10 >= 2 * first3 and last10 >= 0.3 and not twice_below
    return {
        "first3": first3,
        "last10": last10,
        "ratio": ratio,
        "twice_below": twice_below,
        "min": min(s),
        "learns": ok,
    }


def fate(s: list[float]) -> dict[str, Any]:
    """``collapsed`` (last-5 mean < ``COLLAPSED_BELOW``), else ``learns`` (``learning``'s
    criteria) or ``stalls``; ``onset``: first step from which the score stays below
    ``COLLAPSED_BELOW`` (None if the last step is at or above it); ``below_zero``: first
    step from which it stays below zero."""

    def stays_below(level: float) -> int | None:
        onset = None
        for i in range(len(s), 0, -1):
            if s[i - 1] >= level:
                break
            onset = i
        return onset

    last5 = statistics.mean(s[-5:])
    learn = learning(s)
    name = "collapsed" if last5 < COLLAPSED_BELOW else "learns" if learn["learns"] else "stalls"
    return {
        "fate": name,
        "last5": last5,
        "last10": learn["last10"],
        "first3": learn["first3"],
        "onset": stays_below(COLLAPSED_BELOW),
        "below_zero": stays_below(0.0),
    }


def report(grid: Grid, out: Path, command: str, wall_s: float | None) -> str:
    """The markdown report over every finished history in ``out``."""
    index = out / "index.json"
    r_wall = {
        r["run"]: float(r["wall_s"])
        for r in (json.loads(index.read_text())["runs"] if index.exists() else [])
        if r.get("wall_s")
    }
    all_specs = specs(grid)
    hist = {s.run: read_history(history_file(out, s.run)) for s in all_specs}
    done = {s.run for s in all_specs if len(hist[s.run]) >= grid.steps}
    lines = [
        "## Ground truth: every run to the end, no stopping (bench/ground_truth.py)"
        + ("" if out.name in ("grid", "quick") else f": {out.name} grid"),
        "",
        f"- machine: {machine()}",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- command: `{command}`" + (f" ({wall_s / 60:.0f} min wall)" if wall_s else ""),
        f"- run time: {sum(r_wall.values()) / 60:.0f} min summed over runs "
        f"(the slowest {max(r_wall.values()):.0f} s)"
        if r_wall
        else "- run time: not recorded",
        f"- grid: {grid.common.get('preset', 'quick')} preset"
        f"{' + ' + json.dumps(extra) if (extra := _overrides(grid)) else ''}, "
        f"{grid.steps} steps, 1 torch thread per run; controls on seeds "
        f"{grid.control_seeds}, treatments on seeds {grid.seeds}; {len(done)} of "
        f"{len(all_specs)} runs finished; histories and `index.json` in `{_rel(out)}`",
        "",
        "### Dense control: does it learn?",
        "",
        "Criteria (issue 12): mean score over the last 10 steps >= 2x its mean over steps 1-3 "
        "and >= 0.3, and never below zero two steps running.",
        "",
        "| run | steps 1-3 mean | last-10 mean | ratio | min score "
        "| below zero 2 steps running | meets all | tool calls, steps 1-3 -> last 10 "
        "| post-tool share of tokens |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    controls = [s for s in all_specs if s.role == "control" and s.run in done]
    n_ok = 0
    for s in controls:
        c = learning(scores(hist[s.run]))
        n_ok += c["learns"]
        lines.append(
            f"| {s.run} | {c['first3']:+.3f} | {c['last10']:+.3f} | {c['ratio']:.2f} | "
            f"{c['min']:+.3f} | {'yes' if c['twice_below'] else 'no'} | "
            f"{'yes' if c['learns'] else 'NO'} | {_early_late(hist[s.run], N.TOOL_CALLS, '.1f')} "
            f"| {_early_late(hist[s.run], N.POST_TOOL_TOKEN_FRAC, '.0%')} |"
        )
    lines += [
        "",
        f"Controls meeting every criterion: {n_ok} of {len(controls)} (target: "
        f"{math.ceil(0.75 * len(controls))} of {len(controls)}).",
        "",
    ]

    ctrl = [statistics.mean(scores(hist[s.run])[-10:]) for s in controls if s.seed in grid.seeds]
    ctrl_txt = f"{statistics.mean(ctrl):+.3f}" if ctrl else "n/a"
    lines += [
        "### Compressed runs: fate per codec strength and correction",
        "",
        f"Collapsed: mean score over the last 5 steps < {COLLAPSED_BELOW} (a collapsed policy "
        "neither calls the tool nor solves tasks; it scores -0.1 to +0.01). Learns: not "
        "collapsed and meets the control's criteria. Stalls: neither. Per cell: "
        "collapsed / learns / stalls seeds, the collapse onsets (first step from which the "
        f"score stays below {COLLAPSED_BELOW}), and the mean last-10 score over seeds. The "
        f"paired controls' mean last-10 score: {ctrl_txt}.",
        "",
    ]
    strengths = [label(c, kw) for c, kw in grid.strengths]
    step1_gap = {st: _step1_gap(all_specs, hist, done, st) for st in strengths}
    lines += [
        "| correction | "
        + " | ".join(f"{st} (step-1 gap {step1_gap[st]})" for st in strengths)
        + " |",
        "|---|" + "---|" * len(strengths),
    ]
    majority: dict[str, dict[str, list[str]]] = {
        st: {"collapsed": [], "learns": [], "healthy": []} for st in strengths
    }
    board: dict[str, list[tuple[str, list[float], dict[str, int]]]] = {st: [] for st in strengths}
    for corr, kw in grid.corrections:
        cl = label(corr, kw)
        cells = []
        for st in strengths:
            runs = [
                s
                for s in all_specs
                if s.role == "treatment"
                and s.run in done
                and label(s.codec, s.codec_kwargs) == st
                and label(s.correction, s.correction_kwargs) == cl
            ]
            if not runs:
                cells.append("-")
                continue
            fates = [fate(scores(hist[s.run])) for s in runs]
            count = {
                k: sum(f["fate"] == k for f in fates) for k in ("collapsed", "learns", "stalls")
            }
            onsets = ",".join(str(f["onset"]) for f in fates if f["fate"] == "collapsed")
            l10 = statistics.mean(f["last10"] for f in fates)
            board[st].append((cl, [f["last10"] for f in fates], count))
            cells.append(
                f"{count['collapsed']}/{count['learns']}/{count['stalls']}"
                + (f" @{onsets}" if onsets else "")
                + f"; {l10:+.2f}"
            )
            need = math.ceil(0.75 * len(runs))  # 3 of 4 seeds, 2 of 2
            if count["collapsed"] >= need:
                majority[st]["collapsed"].append(cl)
            if len(runs) - count["collapsed"] >= need:
                majority[st]["healthy"].append(cl)
            if count["learns"] >= need:
                majority[st]["learns"].append(cl)
        lines.append(f"| {cl} | {' | '.join(cells)} |")
    lines += [
        "",
        "Per strength, corrections by their fate on at least 3 of 4 seeds (75%; a strength "
        "separates the corrections when some stay healthy and others collapse):",
        "",
    ]
    for st, m in majority.items():
        sep = "**separates**" if m["healthy"] and m["collapsed"] else "does not separate"
        lines.append(
            f"- `{st}`: {sep}. Healthy: {', '.join(m['healthy']) or 'none'} "
            f"(of which learn: {', '.join(m['learns']) or 'none'}). "
            f"Collapsed: {', '.join(m['collapsed']) or 'none'}."
        )
        if sep == "**separates**":
            ctrl_fates = [fate(scores(hist[c.run])) for c in controls if c.seed in grid.seeds]
            lines += ["", *leaderboard(st, board[st], ctrl_fates), ""]
    return "\n".join(lines) + "\n"


def leaderboard(
    st: str, rows: list[tuple[str, list[float], dict[str, int]]], controls: list[dict[str, Any]]
) -> list[str]:
    """The corrections at one strength by mean last-10 score, with the range over seeds
    (the dense controls first): what ``examples/sweep-corrections.yaml`` asks."""
    out = [
        f"Leaderboard at `{st}` (mean score over the last 10 steps; range over seeds):",
        "",
        "| correction | last-10 score, mean | min - max over seeds | collapsed / learns / stalls |",
        "|---|---|---|---|",
    ]
    if controls:
        l10 = [f["last10"] for f in controls]
        n = {k: sum(f["fate"] == k for f in controls) for k in ("collapsed", "learns", "stalls")}
        out.append(
            f"| dense control | {statistics.mean(l10):+.2f} | {min(l10):+.2f} - {max(l10):+.2f} "
            f"| {n['collapsed']} / {n['learns']} / {n['stalls']} |"
        )
    for cl, l10, c in sorted(rows, key=lambda r: -statistics.mean(r[1])):
        out.append(
            f"| {cl} | {statistics.mean(l10):+.2f} | {min(l10):+.2f} - {max(l10):+.2f} | "
            f"{c['collapsed']} / {c['learns']} / {c['stalls']} |"
        )
    return out


def _overrides(grid: Grid) -> dict[str, Any]:
    return {k: v for k, v in grid.common.items() if k != "preset"}


def _early_late(rows: list[dict[str, Any]], name: str, fmt: str) -> str:
    """``a -> b``: a figure's mean over steps 1-3 and over the last 10 (``-`` if unlogged)."""
    vals = [float(r[name]) for r in rows if r.get(name) is not None]
    if len(vals) < 10:
        return "-"
    return f"{statistics.mean(vals[:3]):{fmt}} -> {statistics.mean(vals[-10:]):{fmt}}"


def _step1_gap(
    all_specs: list[Spec], hist: dict[str, list[dict[str, Any]]], done: set[str], st: str
) -> str:
    """Median step-1 ``training/rollout_probs_diff_mean`` of a strength's finished runs."""
    gaps = [
        float(hist[s.run][0][N.PROBS_DIFF_MEAN])
        for s in all_specs
        if s.run in done and s.role == "treatment" and label(s.codec, s.codec_kwargs) == st
    ]
    return f"{statistics.median(gaps):.3f}" if gaps else "n/a"


def _rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def write_index(grid: Grid, out: Path, command: str, walls: dict[str, float]) -> None:
    """``index.json``: the grid's settings and one entry per finished run (wall times are
    kept across resumes)."""
    path = out / "index.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    prev = {r["run"]: r.get("wall_s") for r in old.get("runs", [])}
    runs = []
    for s in specs(grid):
        file = history_file(out, s.run)
        if file is None:
            continue
        d: dict[str, Any] = asdict(s)
        d["file"] = file.name
        d["wall_s"] = round(walls[s.run], 1) if s.run in walls else prev.get(s.run)
        f = fate(scores(read_history(file)))
        d.update({k: round(v, 4) if isinstance(v, float) else v for k, v in f.items()})
        runs.append(d)
    index = {
        "preset": grid.common.get("preset", "quick"),
        "steps": grid.steps,
        "common": grid.common,
        "threads_per_run": 1,
        "collapsed_below": COLLAPSED_BELOW,
        "machine": machine(),
        "command": command,
        "runs": runs,
    }
    path.write_text(json.dumps(index, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--grid",
        choices=sorted(GRIDS),
        default="full",
        help="full (the rules' ground truth), quick (2 seeds, 2 strengths, 2 corrections, 6 "
        "steps), drift (with the drift figures, 3 corrections) or long (the long preset)",
    )
    ap.add_argument("--quick", action="store_true", help="the same as --grid quick")
    ap.add_argument(
        "--out",
        type=Path,
        help="results folder (default bench/results/ground_truth/{grid,quick,drift,long})",
    )
    ap.add_argument(
        "--md",
        type=Path,
        help="report (default bench/results/ground_truth[-GRID].md; quick: OUT/ground_truth.md)",
    )
    ap.add_argument("--workers", type=int, default=2, help="processes, 1 torch thread each")
    ap.add_argument("--gzip", action="store_true", help="write histories as .jsonl.gz")
    ap.add_argument("--report-only", action="store_true", help="no runs: report what OUT holds")
    args = ap.parse_args()
    name = "quick" if args.quick else args.grid
    grid = GRIDS[name]
    out = args.out or RESULTS / "ground_truth" / ("grid" if name == "full" else name)
    md = args.md or (
        out / "ground_truth.md"
        if name == "quick"
        else RESULTS / ("ground_truth.md" if name == "full" else f"ground_truth-{name}.md")
    )
    command = " ".join([".venv/bin/python bench/ground_truth.py", *map(shlex.quote, sys.argv[1:])])

    t0 = time.perf_counter()
    walls = {} if args.report_only else run_grid(grid, out, args.workers, args.gzip)
    wall_s = time.perf_counter() - t0 if walls else None
    ran_by = command
    if args.report_only and (out / "index.json").exists():  # the grid's own command stays
        ran_by = json.loads((out / "index.json").read_text()).get("command", command)
    write_index(grid, out, ran_by, walls)
    text = report(grid, out, ran_by, wall_s)
    if ran_by != command:
        text = text.replace(f"- command: `{ran_by}`", f"- command: `{ran_by}`; report: `{command}`")
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text)
    print(text)
    print(f"[ground_truth] wrote {md} and {out / 'index.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
