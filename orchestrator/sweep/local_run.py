"""``gapwatch run CONFIG``: one RL run in this process, recorded in the store.

``run_local(path, db_url=..., overrides=["steps=5", "compression_kwargs.bits=2"])`` loads the
run YAML into ``workers.RunConfig`` (overrides are YAML-typed; a dotted key sets one entry
of a dict field), opens the store, and follows the run as a ``TrackedRun`` in the
``local`` sweep: the run row carries the run's identity (``store.identity``: role
``control`` when the codec is ``none``, labels with every threshold, the pair key a
control shares with its treatments), every step is written as it comes with a rich
progress bar (step, score, gap), the YAML's ``rules:`` (the same ``RuleSet`` a sweep
applies) judge each step against the latest stored control of the same pair, and the run
ends completed, stopped (by a rule) or failed (with a one-line error; the steps already
written are kept). Ctrl-C stops it (``stopped``, stop rule ``interrupted``, at its newest
step) and SIGTERM fails it ("ended by SIGTERM"), each said in one line
(``orchestrator.signals``). The run records this process as its ``placement`` (host,
pid), so ``gapwatch runs`` can tell a run whose process was killed outright (``stale``).

``log=PATH`` also writes each step to PATH as verl's file logger does
(:class:`VerlFileLogger`), the log a ``gapwatch watch`` elsewhere can follow; with
``store=False`` that log is all the run writes (no store, no rules: the watch judges it).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import orjson
import yaml
from rich.markup import escape

from gapwatch.correction import names as N
from gapwatch.orchestrator.signals import mark_signalled, sigint_ignored, terminated_raises
from gapwatch.orchestrator.tracked import TrackedRun
from gapwatch.store import identity
from gapwatch.store.staleness import this_process

LOCAL_SWEEP = "local"
"""Name of the sweep that holds every run started by ``gapwatch run``."""


class VerlFileLogger:
    """Steps written as verl's ``FileLogger`` writes them (``trainer.logger=[..., "file"]``,
    ``verl/utils/tracking.py``): the file opened ``wb`` without buffering (an earlier log
    at the path is replaced), one ``{"step": n, "data": {...}}`` line per step from
    ``orjson.dumps(..., option=OPT_SERIALIZE_NUMPY)`` (compact; NaN written as null), so a
    follower sees each step as soon as it is written. Unlike verl, a missing folder is made."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fp = self.path.open("wb", buffering=0)
        except OSError as exc:
            raise ValueError(
                f"--log {str(self.path)!r}: cannot write it ({exc.strerror}); "
                "give a path in a folder you can write"
            ) from None

    def log(self, data: dict[str, Any], step: int) -> None:
        self.fp.write(
            orjson.dumps({"step": step, "data": data}, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        )

    def close(self) -> None:
        self.fp.close()


class Untracked:
    """A run that is not stored (``store=False``): the steps go to its log only, no rule
    judges them; the same calls as a ``TrackedRun``."""

    run_id = None
    stop = None

    def __init__(self) -> None:
        self.steps = 0

    def step(self, step: int, metrics: dict[str, float], dists: Any = None) -> None:
        self.steps += 1

    def finish(self, error: str | None = None) -> str:
        return "failed" if error is not None else "completed"


def _control_run(st: Any, sweep_id: int, pair_key: str, role: str) -> int | None:
    """The latest stored control run with this pair key (None for a control itself)."""
    if role == "control":
        return None
    controls = [
        r.id
        for r in st.runs(sweep_id)
        if r.role == "control" and r.pair_key == pair_key and (r.last_step or 0) > 0
    ]
    return max(controls) if controls else None


def load_run_config(path: Path | str, overrides: list[str]) -> Any:
    """Read the run YAML, apply ``key=value`` overrides, validate into a ``RunConfig``."""
    return _load(path, overrides)[0]


def _load(path: Path | str, overrides: list[str]) -> tuple[Any, dict[str, Any] | None]:
    """``(RunConfig, rules settings)`` from the run YAML plus ``key=value`` overrides."""
    from gapwatch.workers import RunConfig

    p = Path(path)
    if not p.is_file():
        raise ValueError(
            f"run config {str(p)!r} not found; pass a YAML file such as examples/run-dense.yaml"
        )
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(
            f"run config {str(p)!r} is not valid YAML: {' '.join(str(exc).split())}"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"run config {str(p)!r} must be a mapping of field: value")
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects key=value (e.g. --set steps=5), got {item!r}")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        head, dot, sub = key.strip().partition(".")
        if dot:
            inner = data.get(head) or {}
            if not isinstance(inner, dict):
                raise ValueError(f"--set {key}: field {head!r} is not a mapping")
            data[head] = {**inner, sub: value}
        else:
            data[head] = value
    rules_settings = data.pop("rules", None)
    if rules_settings is not None and not isinstance(rules_settings, dict):
        raise ValueError(
            f"run config {str(p)!r}: `rules:` must map rule names to settings, "
            "e.g. rules: {score_collapse: {k: 3}}"
        )
    return RunConfig.from_dict(data), rules_settings


def run_local(
    config_path: Path | str,
    *,
    db_url: str | None = None,
    overrides: list[str] | None = None,
    apply_rules: bool = True,
    log: Path | str | None = None,
    store: bool = True,
) -> int | None:
    """Run one config end to end into the store (and ``log``, verl's file-logger format);
    return the run id (None with ``store=False``: only ``log`` is written)."""
    if not store and log is None:
        raise ValueError(
            "--no-store with no --log writes nothing; give --log runs/x/metrics.jsonl "
            "(a `gapwatch watch` follows it) or drop --no-store"
        )
    if not store and db_url is not None:
        raise ValueError("--db names a store but --no-store writes none; drop one of them")

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gapwatch.orchestrator import rules
    from gapwatch.store import open_store
    from gapwatch.workers import pretrained, train

    cfg, rules_settings = _load(config_path, overrides or [])
    # built (and so validated) before any work starts
    ruleset = rules.build(rules_settings) if apply_rules else None
    config = cfg.to_dict()
    ident = identity.of_config(config)
    model_info = pretrained.model_info(cfg.model)  # a named model's figures, stored
    extras = {"model_info": model_info} if model_info else {}
    file_log = VerlFileLogger(log) if log is not None else None  # an unwritable path fails here
    where = f"to {log}"
    run: TrackedRun | Untracked = Untracked()
    if store:
        try:
            st = open_store(db_url)
            # Runs started here belong to one pseudo-sweep, LOCAL_SWEEP (the store needs one).
            sweep_id = st.ensure_sweep(LOCAL_SWEEP, "runs started with `gapwatch run CONFIG`")
            control = _control_run(st, sweep_id, ident.pair_key, ident.run_role)
            run = TrackedRun(
                st, sweep_id, ident.unique_key, ident, config, ruleset, control_run=control
            )
            st.update_run_config(run.run_id, {"placement": this_process(), **extras})
        except BaseException:
            if file_log is not None:
                file_log.close()
            raise
        where = f"in {st.url_display}" + (f" and {log}" if log is not None else "")
    columns = (
        TextColumn(f"[bold]{escape(cfg.name)}[/] {ident.run_role}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
    )
    try:
        with terminated_raises(), Progress(*columns, transient=False) as bar:
            task = bar.add_task("steps", total=cfg.steps, info="warming up")
            for res in train(cfg):
                if file_log is not None:
                    file_log.log(res.metrics, res.step)
                stop = run.step(res.step, res.metrics, res.distributions)
                m = res.metrics
                info = (
                    f"score {m[N.SCORE_MEAN]:+.3f}  gap {m.get(N.PROBS_DIFF_MEAN, float('nan')):.4f}"
                    f"  clip {m[N.CLIP_RATIO]:.2f}"
                )
                bar.update(task, completed=res.step, info=info)
                if stop is not None:
                    break
    except KeyboardInterrupt:
        with sigint_ignored():  # a second Ctrl-C does not cut the record short
            status = mark_signalled(run, signal.SIGINT) if isinstance(run, TrackedRun) else "ended"
            name = "the run" if run.run_id is None else f"run {run.run_id}"
            said = f"{name} {status} after {run.steps} steps {where}"
        raise KeyboardInterrupt(said) from None  # the CLI says it in one line, exit 130
    except BaseException as exc:
        msg = " ".join(str(exc).split()) or type(exc).__name__
        run.finish(error=msg)
        # (SIGTERM: "ended by SIGTERM"; the run is failed with it, not left running)
        raise
    finally:
        if file_log is not None:
            file_log.close()
    status = run.finish()
    why = f" (stopped by {run.stop.rule} at step {run.stop.step})" if run.stop else ""
    name = "run" if run.run_id is None else f"run {run.run_id}"
    print(f"{name} {status}{why}: {run.steps} steps {where}")
    return None if run.run_id is None else int(run.run_id)
