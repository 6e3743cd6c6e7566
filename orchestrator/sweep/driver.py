"""``gapwatch sweep``: run a paired dense/compressed sweep on Ray Tune.

Call ``run_sweep(config_path, db_url=..., address=..., resume=..., overrides=...)``. It
validates and expands the YAML (``orchestrator.sweep.config``), opens the store, starts a local
Ray (or joins ``--address``), and runs a ``tune.Tuner`` over the trials (controls first)
with the ``Monitor`` (``orchestrator.sweep.monitor``) as stopper and the ``Recorder``
(``orchestrator.sweep.recorder``) and ``ProgressTable`` (``orchestrator.sweep.progress``) as
callbacks. At the end it prints one line per trial as the store has it (status, stop
rule and step) and the trial-steps used against the budget.

Resume is store-driven: ``--resume`` re-runs exactly the trials whose run is not
``completed`` or ``stopped`` in the store (a killed driver leaves them ``running``; an
errored one is ``failed``), a built-in trial from the checkpoint its run recorded, any
other from step 1; the store's upsert on (run, name, step) makes re-sent steps overwrite,
so nothing is stored twice. This survives a SIGKILLed driver, whose Tune experiment state
may be stale, which ``Tuner.restore`` would not.

A trial whose process is lost while the driver lives (its node died) is started again by
Tune on a node still up, up to ``max_failures`` times (``orchestrator.sweep.attempts``).

Not here: the rules (``orchestrator.rules``), one run without Ray (``local_run``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gapwatch.orchestrator import rules
from gapwatch.orchestrator.console import console
from gapwatch.orchestrator.errors import GapwatchError
from gapwatch.orchestrator.sweep.attempts import Retries, marking_errors
from gapwatch.orchestrator.sweep.command import command_trainable
from gapwatch.orchestrator.sweep.config import Sweep, TrialSpec, load_sweep_config
from gapwatch.orchestrator.sweep.monitor import VOID_RULE, Monitor, void_reason
from gapwatch.orchestrator.sweep.placement import with_placement
from gapwatch.orchestrator.sweep.preflight import preflight
from gapwatch.orchestrator.sweep.progress import ProgressTable, TrialLine, render_table
from gapwatch.orchestrator.sweep.reach import is_uri, unreached
from gapwatch.orchestrator.sweep.recorder import FINISHED, Recorder
from gapwatch.orchestrator.sweep.trainable import trainable

RAY_RESULTS = Path(".gapwatch") / "ray_results"
"""Where Tune keeps its experiment directories (relative to the working directory)."""


@dataclass(frozen=True)
class SweepOutcome:
    """What a finished (or interrupted) sweep leaves, for the CLI summary and tests."""

    sweep_id: int
    status: str
    """completed | interrupted | failed"""
    lines: list[TrialLine]
    """Every trial as the store has it at the end."""
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


def token_auth_on() -> bool:
    """Whether this process's Ray uses token authentication."""
    try:
        from ray._raylet import (  # type: ignore[attr-defined]
            AuthenticationMode,
            get_authentication_mode,
        )
    except ImportError:  # a Ray without token auth
        return False
    return bool(get_authentication_mode() == AuthenticationMode.TOKEN)


def _check_token_auth() -> None:
    """Ray's servers listen on every interface of the machine (Ray 2.60 has no setting to
    keep a local cluster on loopback); what guards them is its token authentication, on
    by default for a local ``ray.init``. Say so where it has been switched off."""
    if not token_auth_on():
        console().print(
            "warning: Ray's token authentication is off (RAY_AUTH_MODE); this sweep's Ray "
            "listens on every network interface, so anyone who can reach this machine can "
            "run code in it. Unset RAY_AUTH_MODE to keep the token on.",
            markup=False,
        )


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
        ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, **common)
        _check_token_auth()
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
    sweep: Sweep,
    todo: list[dict[str, Any]],
    monitor: Monitor,
    callbacks: list[Any],
    storage: str | Path,
    train_fn: Callable[[dict[str, Any]], None],
) -> Any:
    from ray import tune

    res = sweep.config.resources
    resources: dict[str, float] = {"cpu": res.cpus}
    if res.gpus > 0:
        resources["gpu"] = res.gpus
    return tune.Tuner(
        tune.with_resources(with_placement(marking_errors(train_fn)), resources),
        # One grid axis over explicit specs, in order: every control before treatments
        param_space={"spec": tune.grid_search(todo)},
        tune_config=tune.TuneConfig(num_samples=1, reuse_actors=True),
        run_config=tune.RunConfig(
            name=f"{sweep.config.name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
            storage_path=str(storage) if is_uri(storage) else str(Path(storage).resolve()),
            stop=monitor,
            callbacks=callbacks,
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=sweep.config.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
        ),
    )


def stored_lines(st: Any, sweep_id: int, specs: Sequence[TrialSpec]) -> list[TrialLine]:
    """Every trial as the store has it: status, stop rule and step, latest score and gap."""
    from gapwatch.correction import names

    runs = {r.trial_id: r for r in st.runs(sweep_id=sweep_id)}
    latest = st.latest([r.id for r in runs.values()], [names.SCORE_MEAN, names.PROBS_DIFF_MEAN])
    lines = []
    for spec in specs:
        ln = TrialLine.of(spec.to_dict())
        r = runs.get(spec.trial_key)
        if r is not None:
            ln.status, ln.error = r.status, r.error
            ln.stop_rule, ln.stop_step = r.stop_rule, r.stop_step
            ln.step = ln.steps_used = int(r.last_step or 0)
            last = latest.get(r.id, {})
            ln.score, ln.gap = last.get(names.SCORE_MEAN), last.get(names.PROBS_DIFF_MEAN)
        lines.append(ln)
    return lines


def execute_sweep(
    sweep: Sweep,
    *,
    db_url: str | None,
    address: str | None,
    resume: bool,
    storage: str | Path | None = None,
    live: bool = True,
    train_fn: Callable[[dict[str, Any]], None] | None = None,
    check_first: bool = False,
) -> SweepOutcome:
    """Run (or resume) ``sweep`` and record it; the function tests call.

    ``train_fn`` is the Tune trainable: by default the built-in worker's, or the command
    trainable where the sweep names a ``worker: {command: ...}`` (tests wrap them).
    ``check_first``: run the preflight (``orchestrator.sweep.preflight``) before launching.
    ``storage``: Tune's storage (None: the config's ``storage_path``, else
    ``RAY_RESULTS``); on a cluster of several nodes every node must reach it
    (``orchestrator.sweep.reach``), or the sweep stops at its start, before it is recorded.
    """
    if train_fn is None:
        train_fn = trainable if sweep.config.worker is None else command_trainable
    from gapwatch.store import open_store

    t0 = time.monotonic()
    cfg = sweep.config
    url = db_url or cfg.store
    st = open_store(url)
    existing = _find_sweep(st, cfg.name)
    if existing is None and resume:
        raise GapwatchError(
            f"no sweep named {cfg.name!r} in the store to resume; run without --resume to start it"
        )
    stored = {r.trial_id: r for r in st.runs(sweep_id=existing.id)} if existing else {}
    finished = {k for k, r in stored.items() if r.status in FINISHED}
    todo = [s for s in sweep.trials if s.trial_key not in finished]
    # A finished sweep run again just shows its summary (so `make demo` is idempotent);
    # an unfinished one is only continued on request
    if existing is not None and not resume and todo:
        raise GapwatchError(
            f"sweep {cfg.name!r} is already in the store, unfinished; continue it with "
            f"--resume, or start a new one with --set name=<new name>"
        )
    if check_first and todo and cfg.worker is None:
        preflight([s.run for s in todo], lambda line: console().print(line, markup=False))
    # Ray first: a cluster that cannot be joined leaves no sweep row behind
    started = init_ray(address or cfg.ray_address) if todo else False
    where = storage if storage is not None else cfg.storage_path or RAY_RESULTS
    try:
        if todo and not is_uri(where) and (missing := unreached(Path(where).resolve())):
            raise GapwatchError(
                f"Tune's storage {Path(where).resolve()} is not reachable from node(s) "
                f"{', '.join(missing)}: a trial moved off a lost node is restored from "
                "there; set storage_path (--set storage_path=DIR) to a folder every node "
                "mounts at the same path (NFS), or to a URI such as s3://bucket/path"
            )
        sweep_id = st.ensure_sweep(cfg.name, sweep.text)
        status = "completed"
        if todo:
            restores = _restores(sweep, stored) if resume else {}
            status = _run(sweep, todo, restores, st, url, sweep_id, where, live, train_fn)
        st.set_sweep_status(sweep_id, status)
    finally:
        if started:
            import ray

            ray.shutdown()
    lines = stored_lines(st, sweep_id, sweep.trials)
    for ln in lines:
        ln.earlier = ln.trial_key in finished
    return SweepOutcome(
        sweep_id=sweep_id,
        status=status,
        lines=lines,
        trial_steps_used=sum(ln.steps_used for ln in lines),
        trial_steps_budget=len(sweep.trials) * sweep.steps,
        wall_s=time.monotonic() - t0,
    )


def _restores(sweep: Sweep, stored: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Trial key -> the checkpoint ``--resume`` takes it up from (its step and path), for
    built-in trials whose recorded checkpoint is still on disk."""
    if sweep.config.worker is not None:
        return {}
    out = {}
    for key, r in stored.items():
        if r.checkpoint_step is not None and r.checkpoint_path and Path(r.checkpoint_path).is_dir():
            out[key] = {"step": int(r.checkpoint_step), "path": r.checkpoint_path}
    return out


def _run(
    sweep: Sweep,
    todo: list[TrialSpec],
    restores: dict[str, dict[str, Any]],
    st: Any,
    url: str | None,
    sweep_id: int,
    storage: str | Path,
    live: bool,
    train_fn: Callable[[dict[str, Any]], None],
) -> str:
    """Run the unfinished trials; the sweep's status afterwards."""
    cfg = sweep.config
    specs = [s.to_dict() for s in sweep.trials]
    recorder = Recorder(url, sweep_id, specs)
    # run rows first: a command trial may need its run id ({run_id}) when it starts
    cwd = os.getcwd()
    todo_specs = [
        {
            **s.to_dict(),
            "run_id": recorder.run_id(s.trial_key),
            "workdir": cwd,
            "checkpoint_every": cfg.checkpoint_every,
            "restore": restores.get(s.trial_key),
        }
        for s in todo
    ]
    monitor = Monitor(
        rules.build(cfg.rules), todo_specs, recorder, stopping=cfg.stopping,
        restore_grace=cfg.restore_grace,
    )  # fmt: skip
    # Retries first: it turns a trial's own error into no retry before Tune decides
    callbacks: list[Any] = [Retries(), recorder]
    table = None
    if live:
        lines = stored_lines(st, sweep_id, sweep.trials)
        for ln in lines:
            ln.earlier = ln.status in FINISHED
        table = ProgressTable(lines, recorder, f"sweep {cfg.name}", sweep.steps)
        callbacks.append(table)  # after the Recorder: it reads how a trial ended from it
    st.set_sweep_status(sweep_id, "running")
    try:
        _tuner(sweep, todo_specs, monitor, callbacks, storage, train_fn).fit()
    except BaseException:
        st.set_sweep_status(sweep_id, "interrupted")
        raise
    finally:
        if table is not None:
            table.close()
        recorder.flush()
    ended = [recorder.outcome(s.trial_key).status for s in todo]
    if any(e == "running" for e in ended):
        return "interrupted"
    if all(e == "failed" for e in ended):
        return "failed"
    return "completed"


def print_summary(sweep: Sweep, out: SweepOutcome, config_path: Path | str = "<config>") -> None:
    """One line per trial and the compute used against the budget."""
    con = console()
    con.print(render_table(out.lines, f"sweep {sweep.config.name}: {out.status}", sweep.steps))
    stopped = sum(1 for ln in out.lines if ln.status == "stopped")
    failed = sum(1 for ln in out.lines if ln.status == "failed")
    line = f"trial-steps used {out.trial_steps_used} of {out.trial_steps_budget}"
    if out.status != "interrupted":
        saved = out.trial_steps_budget - out.trial_steps_used
        line += f" ({saved} not run: {stopped} trial(s) stopped, {failed} failed)"
    con.print(f"{line}; wall {out.wall_s:.0f} s; sweep id {out.sweep_id}")
    for ln in out.lines:
        if ln.voids_pair and ln.stop_rule is not None and ln.stop_step is not None:
            stopped_with = sum(
                1 for t in out.lines if t.seed == ln.seed and t.stop_rule == VOID_RULE
            )
            con.print(
                f"void: {void_reason(ln.seed, ln.stop_rule, ln.stop_step)} "
                f"({stopped_with} treatment(s) stopped for it, none compared)",
                markup=False,
            )
    if out.status == "interrupted":
        con.print(f"interrupted: continue with `gapwatch sweep {config_path} --resume`")


def run_sweep(
    config_path: Path | str,
    *,
    db_url: str | None,
    address: str | None,
    resume: bool,
    overrides: Sequence[str],
    preflight: bool = True,
) -> SweepOutcome:
    """The ``gapwatch sweep`` command: validate, (preflight,) run or resume, record,
    summarise."""
    sweep = load_sweep_config(config_path, overrides)
    out = execute_sweep(sweep, db_url=db_url, address=address, resume=resume, check_first=preflight)
    print_summary(sweep, out, config_path)
    if out.status == "interrupted":
        # Ctrl-C: Tune stopped gracefully and the store is flushed; the CLI exits 130
        raise KeyboardInterrupt
    return out
