"""Rebuild a preset's shipped warm start (``workers/assets/quick``, ``workers/assets/long``).

The tiny model's supervised warm start sits on a knife edge of floating-point summation
order (``bench/warmstart_bench.py``): the same config built with 1 torch thread solves
nothing, with 2 it solves about 15%. So one build is shipped and every machine starts
from its bytes. This script made it: the quick preset's config, 2 torch threads, float32
on the CPU, through the same ``_build_warm_start`` (quality gate included) that builds
any other warm start at run time; then the held-out figures on 256 episodes, the machine,
and the sha256 of every file go into ``gapwatch_warmstart.json`` beside the weights.

    python bench/build_warmstart.py                 # rewrite workers/assets/quick
    python bench/build_warmstart.py --preset long   # rewrite workers/assets/long
    python bench/build_warmstart.py --out DIR       # elsewhere (to compare)

A rebuilt folder on another CPU may differ in its bytes and its figures: commit one only
after checking its figures and the learning table (``bench/learning_bench.py``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _machine import machine  # noqa: E402

THREADS = 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=["quick", "long"], default="quick")
    ap.add_argument("--out", type=Path, default=None, help="default: workers/assets/PRESET")
    ap.add_argument("--threads", type=int, default=THREADS, help="torch threads of the build")
    ap.add_argument(
        "--from-cache",
        action="store_true",
        help="ship the build already in $GAPWATCH_CACHE/warmstart/<key> (made at run time by "
        "the same gated builder) instead of building again; its own thread count is recorded",
    )
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from gapwatch.workers import RunConfig, envs, samplers
    from gapwatch.workers import model as M
    from gapwatch.workers.probe import measure

    out = args.out or M.ASSETS / args.preset
    cfg = RunConfig.preset(args.preset)
    cached = M.cache_root() / "warmstart" / M.warm_start_key(cfg)
    if args.from_cache:
        if not (cached / M.INFO_FILE).is_file():
            ap.error(f"no build of the {args.preset} preset's warm start in {cached}")
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model: Any = AutoModelForCausalLM.from_pretrained(cached, local_files_only=True)
        tok = AutoTokenizer.from_pretrained(cached, local_files_only=True)
        info = json.loads((cached / M.INFO_FILE).read_text())
        args.threads = info["torch_threads"]
    else:
        model, tok, info = M._build_warm_start(cfg)
    sampler = samplers.make("torch", model, tok, device="cpu", dtype="float32", seed=0,
                            stops=envs.STOP_STRINGS)  # fmt: skip
    q = measure(envs.get(cfg.env, **cfg.env_kwargs), sampler, tok, episodes=256,
                max_interactions=cfg.max_interactions, token_budget=cfg.token_budget,
                temperature=cfg.temperature)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        if args.from_cache:  # its files as the run-time builder saved them
            for f in cached.iterdir():
                if f.is_file() and f.name != M.INFO_FILE:
                    shutil.copy2(f, Path(tmp) / f.name)
        else:
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
        files = sorted(p.name for p in Path(tmp).iterdir() if p.is_file())
        info.update(
            held_out_256=q.to_dict(),
            built_with=f"python bench/build_warmstart.py --preset {args.preset}"
            + (" --from-cache (built at run time)" if args.from_cache else "")
            + f", torch {torch.__version__}, {args.threads} threads, float32 on the CPU",
            machine=machine(),
            date=dt.date.today().isoformat(),
            sha256={f: hashlib.sha256((Path(tmp) / f).read_bytes()).hexdigest() for f in files},
        )
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for f in files:
            shutil.copy2(Path(tmp) / f, out / f)
    (out / M.INFO_FILE).write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}: gate {info['gate']}; held out (256): {q.line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
