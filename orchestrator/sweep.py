"""``gapwatch sweep``: run a paired dense/compressed sweep on Ray Tune.

Call ``run_sweep(config_path, db_url=..., address=..., resume=..., overrides=...)``. It
validates the YAML (``orchestrator.config``), expands it into trial specs (controls
first), opens the store, starts a local Ray (or joins ``--address``), and runs a
``tune.Tuner`` over the specs with the ``Monitor`` as stopper and the ``Recorder`` and
``ProgressTable`` as callbacks (``orchestrator.tune_parts``). At the end it prints one
line per trial (status, stop rule and step) and the trial-steps used against the budget.

Resume is store-driven: ``--resume`` re-runs exactly the trials whose run is not
``completed`` or ``stopped`` in the store (a killed driver leaves them ``running``; an
errored one is ``failed``), from step 1 (trials keep no checkpoints); the store's upsert
on (run, name, step) makes re-sent steps overwrite, so nothing is stored twice. This
survives a SIGKILLed driver, whose Tune experiment state may be stale, which
``Tuner.restore`` would not.

Not here: the rules (``orchestrator.rules``), one run without Ray (``local_run``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.config import SweepConfig, TrialSpec, expand, load_sweep_config
from orchestrator.console import console
from orchestrator.errors import GapwatchError
from orchestrator.tune_parts import (
    FINISHED,
    Monitor,
    ProgressTable,
    Recorder,
    SweepState,
    render_table,
    trainable,
)

RAY_RESULTS = Path(".gapwatch") / "ray_results"
"""Where Tune keeps its experiment directories (relative to the working directory)."""


@dataclass(frozen=True)
class SweepOutcome:
    """What a finished (or interrupted) sweep leaves, for the CLI summary and tests."""

    sweep_id: int
    status: str
    """completed | interrupted | failed"""
    state: SweepState
    trial_steps_used: int
    trial_steps_budget: int
    wall_s: float


def _quiet_ray_env() -> None:
    """Keep Ray and Tune from printing their own progress and logs."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_MAX_PENDING_TRIALS_PG", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")  # the table shows them
    for name in ("ray", "ray.tune", "ray.train", "ray.air"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _probe(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds, not minutes, where nothing listens at host:port (Ray retries long)."""
    import socket

    host, sep, port = address.rpartition(":")
    if address == "auto" or "://" in address or not sep:
        return
    if not port.isdigit() or not host:
        raise GapwatchError(f"--address {address!r}: write it as host:port or auto")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise GapwatchError(
            f"cannot join the Ray cluster at {address!r}: nothing answers there ({exc.strerror or exc}); "
            "start one with `ray start --head`, or drop --address to run locally"
        ) from None


def _token_auth_if_available() -> None:
    """Joining a cluster: use token auth where a Ray token is at hand.

    Ray 2.60's ``ray start --head`` enables token authentication by default (a token in
    ``~/.ray/auth_token``), but a driver joining with ``ray.init(address=...)`` stays in
    ``disabled`` mode unless ``RAY_AUTH_MODE=token`` was set before Ray was imported, and
    is then refused (InvalidAuthToken). Ray's own helper switches this process to token
    mode where ``RAY_AUTH_MODE`` is unset and a token exists; an explicit mode is kept.
    """
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token auth
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def init_ray(address: str | None) -> bool:
    """Start a local Ray with this machine's cores, or join ``address`` (auto | host:port).

    Returns False where Ray was already initialised in this process (the caller's Ray).
    """
    import ray

    _quiet_ray_env()
    if ray.is_initialized():
        return False
    common: dict[str, Any] = {
        "log_to_driver": False,
        "logging_level": logging.ERROR,
        "configure_logging": True,
    }
    if address is None:
        # address="local": never attach to some other cluster `ray start` left on this host
        ray.init(
            address="local",
            num_cpus=os.cpu_count() or 1,
            include_dashboard=False,
            **common,
        )
        return True
    _probe(address)
    _token_auth_if_available()
    try:
        ray.init(address=address, **common)
        return True
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise GapwatchError(
            f"cannot join the Ray cluster at {address!r}: {' '.join(str(exc).split())[:300]} "
            "(start one with `ray start --head`, or drop --address to run locally)"
        ) from None


def _find_sweep(st: Any, name: str) -> Any | None:
    for s in st.sweeps():
        if s.name == name:
            return s
    return None


def _tuner(
    cfg: SweepConfig,
    todo: list[TrialSpec],
    monitor: Monitor,
    callbacks: list[Any],
    storage: Path,
) -> Any:
    from ray import tune

    resources: dict[str, float] = {"cpu": cfg.resources.cpus}
    if cfg.resources.gpus > 0:
        resources["gpu"] = cfg.resources.gpus
    return tune.Tuner(
        tune.with_resources(trainable, resources),
        # One grid axis over explicit specs, in order: every control before treatments
        param_space={"spec": tune.grid_search([s.to_dict() for s in todo])},
        tune_config=tune.TuneConfig(num_samples=1, reuse_actors=True),
        run_config=tune.RunConfig(
            name=f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
            storage_path=str(storage.resolve()),
            stop=monitor,
            callbacks=callbacks,
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=0),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
        ),
    )


def execute_sweep(
    cfg: SweepConfig,
    config_text: str,
    *,
    db_url: str | None,
    address: str | None,
    resume: bool,
    storage: Path = RAY_RESULTS,
    live: bool = True,
) -> SweepOutcome:
    """Run (or resume) the sweep ``cfg`` and record it; the function tests call."""
    from store import open_store

    t0 = time.monotonic()
    url = db_url or cfg.store
    st = open_store(url)
    specs = expand(cfg)
    existing = _find_sweep(st, cfg.name)
    if existing is None and resume:
        raise GapwatchError(
            f"no sweep named {cfg.name!r} in the store to resume; run without --resume to start it"
        )
    finished = (
        {r.trial_id: r for r in st.runs(sweep_id=existing.id) if r.status in FINISHED}
        if existing is not None
        else {}
    )
    needed = any(s.trial_key not in finished for s in specs)
    # A finished sweep run again just shows its summary (so `make demo` is idempotent);
    # an unfinished one is only continued on request
    if existing is not None and not resume and needed:
        raise GapwatchError(
            f"sweep {cfg.name!r} is already in the store, unfinished; continue it with "
            f"--resume, or start a new one with --set name=<new name>"
        )
    # Ray first: a cluster that cannot be joined leaves no sweep row behind
    started = init_ray(address or cfg.ray_address) if needed else False
    try:
        return _run(cfg, config_text, st, url, specs, finished, storage=storage, live=live, t0=t0)
    finally:
        if started:
            import ray

            ray.shutdown()


def _run(
    cfg: SweepConfig,
    config_text: str,
    st: Any,
    url: str | None,
    specs: list[TrialSpec],
    finished: dict[str, Any],
    *,
    storage: Path,
    live: bool,
    t0: float,
) -> SweepOutcome:
    sweep_id = st.ensure_sweep(cfg.name, config_text)
    state = SweepState.of([s.to_dict() for s in specs])
    # Finished in an earlier run of this sweep: shown with what the store has, not re-run
    from correction import names

    latest = st.latest([r.id for r in finished.values()], [names.SCORE_MEAN, names.PROBS_DIFF_MEAN])
    for key, r in finished.items():
        if key in state.rows:
            row = state.rows[key]
            row.status, row.earlier = r.status, True
            row.stop_rule, row.stop_step = r.stop_rule, r.stop_step
            row.step = row.steps_used = int(r.last_step or 0)
            last = latest.get(r.id, {})
            row.score, row.gap = last.get(names.SCORE_MEAN), last.get(names.PROBS_DIFF_MEAN)
    todo = [s for s in specs if s.trial_key not in finished]
    st.set_sweep_status(sweep_id, "running")
    status = "completed"
    if todo:
        recorder = Recorder(url, sweep_id, state)
        monitor = Monitor(cfg.rules, state, recorder, stopping=cfg.stopping)
        callbacks: list[Any] = [recorder]
        table = ProgressTable(state, f"sweep {cfg.name}", cfg.steps) if live else None
        if table is not None:
            callbacks.append(table)
        try:
            _tuner(cfg, todo, monitor, callbacks, storage).fit()
        except BaseException:
            st.set_sweep_status(sweep_id, "interrupted")
            raise
        finally:
            if table is not None:
                table.close()
            recorder.flush()
        if any(state.rows[s.trial_key].status in ("pending", "running") for s in todo):
            status = "interrupted"
        elif all(state.rows[s.trial_key].status == "failed" for s in todo):
            status = "failed"
    st.set_sweep_status(sweep_id, status)
    used = sum(r.steps_used for r in state.rows.values())
    return SweepOutcome(
        sweep_id=sweep_id,
        status=status,
        state=state,
        trial_steps_used=used,
        trial_steps_budget=len(specs) * cfg.steps,
        wall_s=time.monotonic() - t0,
    )


def print_summary(
    cfg: SweepConfig, out: SweepOutcome, config_path: Path | str = "<config>"
) -> None:
    """One line per trial and the compute used against the budget."""
    con = console()
    con.print(render_table(out.state, f"sweep {cfg.name}: {out.status}", cfg.steps))
    rows = out.state.rows.values()
    stopped = sum(1 for r in rows if r.status == "stopped")
    failed = sum(1 for r in rows if r.status == "failed")
    line = f"trial-steps used {out.trial_steps_used} of {out.trial_steps_budget}"
    if out.status != "interrupted":
        saved = out.trial_steps_budget - out.trial_steps_used
        line += f" ({saved} not run: {stopped} trial(s) stopped, {failed} failed)"
    con.print(f"{line}; wall {out.wall_s:.0f} s; sweep id {out.sweep_id}")
    if out.status == "interrupted":
        con.print(f"interrupted: continue with `gapwatch sweep {config_path} --resume`")


def run_sweep(
    config_path: Path | str,
    *,
    db_url: str | None,
    address: str | None,
    resume: bool,
    overrides: Sequence[str],
) -> SweepOutcome:
    """The ``gapwatch sweep`` command: validate, run or resume, record, summarise."""
    cfg, text = load_sweep_config(config_path, overrides)
    out = execute_sweep(cfg, text, db_url=db_url, address=address, resume=resume)
    print_summary(cfg, out, config_path)
    if out.status == "interrupted":
        # Ctrl-C: Tune stopped gracefully and the store is flushed; the CLI exits 130
        raise KeyboardInterrupt
    return out
