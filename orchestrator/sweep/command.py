"""Sweeps of any trainer: a Ray Tune trial that runs a command and follows its log.

A sweep YAML with ``worker: {command: [...], log: ..., format: ...}`` runs that command in
each trial instead of the built-in worker. ``command_trainable`` fills the trial's values
into the command, its log path and its environment (``{seed}``, ``{codec}``,
``{correction}``, each strength and threshold by its name, ``{trial_dir}``,
``{trial_key}``, ``{run_id}``, ``{workdir}``: where ``gapwatch sweep`` was started,
``{python}``: its interpreter, and the ``run:`` settings), starts it in ``{workdir}``, in
its own process group, with the GPUs Ray gave the trial, follows its log
(``orchestrator.watch.follow``) and reports each step with ``tune.report``, so the sweep's
Monitor, Recorder, resume and UI treat it like a built-in trial.

How a trainer process ends with its trial:

- a stop (the Monitor's) ends the trial's thread; its ``finally`` SIGTERMs the process
  group, then SIGKILLs it after ``grace`` seconds;
- a trainer that exits non-zero fails the trial with the last lines of its stderr;
- a trainer that neither writes its log nor exits for ``idle`` seconds (hung: a deadlocked
  collective, a stuck data loader) has its process group ended the same way, and the
  trial fails with one line naming the last step it wrote;
- a trial started again (Tune's retry after its node was lost, or ``--resume``) starts its
  trainer from step 1: a log an earlier attempt left at the same path is first renamed
  ``<log>.attempt-N``, so the steps followed are this attempt's alone (the Recorder has
  dropped the earlier attempt's steps from the store).
- the trainer is started under a parent-death signal (``PR_SET_PDEATHSIG``, SIGKILL): if
  the trial's process dies (a killed driver takes Ray's workers with it), so does the
  trainer, with no one left to clean up.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from gapwatch.orchestrator.sweep.trainable import pack
from gapwatch.orchestrator.watch import (
    FOLLOW_FORMATS,
    LogFollower,
    NameMapper,
    ReadOptions,
    end_process_group,
    hung_line,
)
from gapwatch.workers.validation import Float, Strict

# Started in the child before the trainer: set its parent-death signal to SIGKILL, then
# become the trainer (prctl(PR_SET_PDEATHSIG=1, SIGKILL=9); a parent already gone: exit).
_PDEATHSIG = (
    "import ctypes, os, sys; ctypes.CDLL(None).prctl(1, 9); "
    "os.getppid() == int(sys.argv[1]) or sys.exit(1); os.execvp(sys.argv[2], sys.argv[2:])"
)


class CommandWorker(Strict):
    """``worker:`` in a sweep YAML: the command every trial runs, and the log it writes."""

    command: list[str] = Field(min_length=1)
    """The trainer's argv; ``{name}`` placeholders are filled per trial."""
    log: str = "{trial_dir}/metrics.jsonl"
    """Where the trainer writes its metrics log (placeholders filled)."""
    format: str = "auto"
    """The log's format: auto, or a reader's name (``orchestrator.readers``: jsonl, csv,
    trl_state, console_dicts, verl_console, tensorboard, mlflow, trackio, ...)."""
    names: str = "auto"
    """Whose metric names it uses: auto, a built-in map (``correction.name_maps.SOURCES``:
    gapwatch, verl, trl, prime-rl, tinker, slime, skyrl, nemo-rl, roll, openrlhf, areal, oat),
    or a YAML name map file ``{their_name: gapwatch_name}`` (relative to ``{workdir}``)."""
    distributions: str | None = None
    """Where the trainer writes each step's |log-ratio| sketches, if it does: JSONL of
    ``{"step": n, "distributions": {name: payload}}`` (``GapwatchCallback``'s
    ``dists_path``; placeholders filled). They are stored with the step, for the UI's
    ECDFs."""
    step_field: str | None = None
    """``keyvalue`` logs: the field holding the step."""
    step_pattern: str | None = None
    """``keyvalue`` logs: a regular expression whose first group is the step."""
    logging_steps: int | None = Field(default=None, ge=1)
    """Console dicts: trainer steps between two printed dicts."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables for the trainer (placeholders filled)."""
    defaults: dict[str, str | int | float] = Field(default_factory=dict)
    """Values for placeholders a trial does not set (the dense control has no codec
    strength or threshold: ``{keep: 1.0}``)."""
    values: dict[str, dict[str, str]] = Field(default_factory=dict)
    """Per placeholder, values to write differently for the trainer, e.g.
    ``{correction: {none: "null"}}`` for a Hydra override."""
    grace: Float = Field(default=10.0, ge=0)
    """Seconds between SIGTERM and SIGKILL when a trial ends."""
    wait: Float = Field(default=600.0, gt=0)
    """Seconds to wait for the log to appear before the trial fails."""
    idle: Float | None = Field(default=1800.0, gt=0)
    """Seconds the trainer may run without its log growing; then it is taken to be hung:
    its process group is ended and the trial fails naming the last step seen (None: wait
    for ever). Generous by default: between two logged steps a real trainer may save a
    checkpoint, run an evaluation or (``logging_steps``) train several steps; verl and TRL
    runs of 3B-9B models log a step every few seconds to a few minutes, so half an hour of
    silence is far outside what a working trainer does."""

    @model_validator(mode="before")
    @classmethod
    def _not_run_settings(cls, data: Any) -> Any:
        """``worker:`` used to hold run settings: say where they go now."""
        if isinstance(data, dict) and "command" not in data:
            from gapwatch.workers import RunConfig

            old = sorted(set(data) & set(RunConfig.field_names()))
            if old:
                raise ValueError(
                    f"worker: names a command to run now; {', '.join(old)} are run settings: "
                    "put them at the top level or under run:"
                )
        return data

    @field_validator("names")
    @classmethod
    def _names(cls, v: str) -> str:
        from gapwatch.correction.name_maps import SOURCES

        if v != "auto" and v not in SOURCES and not v.endswith((".yaml", ".yml")):
            raise ValueError(
                f"unknown names {v!r}; valid: auto, {', '.join(SOURCES)}, or a .yaml name map"
            )
        return v

    @field_validator("format")
    @classmethod
    def _format(cls, v: str) -> str:
        if v not in FOLLOW_FORMATS:
            raise ValueError(f"unknown format {v!r}; valid: {', '.join(FOLLOW_FORMATS)}")
        return v


class DistsSidecar:
    """The sketches file a trainer writes beside its metrics log, read as it grows: each
    complete line's distributions are kept by step until that step is reported. The
    trainer writes a step's sketches before its metrics, so they are there in time."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.partial = path, 0, b""
        self.by_step: dict[int, dict[str, Any]] = {}

    def poll(self) -> None:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return  # not written yet
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            try:
                row = json.loads(line)
                self.by_step[int(row["step"])] = dict(row["distributions"])
            except (ValueError, KeyError, TypeError):
                continue  # a line that is not a step's sketches: the metrics still count

    def take(self, step: int) -> dict[str, Any]:
        """The step's distributions (polling first), or {} where it wrote none."""
        if step not in self.by_step:
            self.poll()
        return self.by_step.pop(step, {})


@dataclass
class _Step:
    step: int
    metrics: dict[str, float]
    distributions: dict[str, Any]


def fill(template: str, values: dict[str, Any]) -> str:
    """``template`` with ``{name}`` placeholders filled; an unknown name fails naming the
    known ones."""
    try:
        return template.format(**values)
    except KeyError as exc:
        raise ValueError(
            f"{template!r}: no value for {{{exc.args[0]}}}; valid: "
            + ", ".join("{" + k + "}" for k in sorted(values))
        ) from None


def placeholders(spec: dict[str, Any], trial_dir: str) -> dict[str, Any]:
    """The values a trial fills into its command: its run settings, its arm (seed, codec,
    correction, each strength and threshold by name), its directory and keys."""
    run = spec["run"]
    plain = {k: v for k, v in run.items() if isinstance(v, str | int | float)}
    return {
        **plain,
        "seed": run["seed"],
        "codec": run["compression"],
        "correction": run["correction"],
        **run["compression_kwargs"],
        **run["correction_kwargs"],
        "trial_dir": trial_dir,
        "trial_key": spec["trial_key"],
        "run_id": spec.get("run_id", ""),
        "workdir": spec.get("workdir", os.getcwd()),
        "python": sys.executable,
    }


def gpu_env() -> dict[str, str]:
    """``CUDA_VISIBLE_DEVICES`` for the GPUs Ray assigned this trial (none: empty)."""
    import ray

    try:
        ids = ray.get_gpu_ids()
    except Exception:  # noqa: BLE001 - outside a Ray worker: no assignment
        return {}
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(int(i)) for i in ids)}


def start(
    argv: list[str], env: dict[str, str], out_dir: Path, cwd: Path
) -> subprocess.Popen[bytes]:
    """Start the trainer in ``cwd``, in its own process group, dying with this process;
    its stdout and stderr go to ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stdout = (out_dir / "trainer.stdout").open("ab")
    stderr = (out_dir / "trainer.stderr").open("ab")
    wrapped = [sys.executable, "-c", _PDEATHSIG, str(os.getpid()), *argv]
    try:
        return subprocess.Popen(
            wrapped, env=env, stdout=stdout, stderr=stderr, start_new_session=True, cwd=cwd,
        )  # fmt: skip
    finally:
        stdout.close()
        stderr.close()


def set_aside(log: Path) -> Path | None:
    """Rename a log an earlier attempt left at ``log`` to ``<log>.attempt-N`` (the first
    free N); where it went, or None if there was none."""
    if not (log.is_file() or log.is_dir()):
        return None
    n = 1
    while (aside := log.with_name(f"{log.name}.attempt-{n}")).exists():
        n += 1
    log.rename(aside)
    return aside


def stderr_tail(out_dir: Path, lines: int = 3) -> str:
    """The last lines of the trainer's stderr, as one line."""
    path = out_dir / "trainer.stderr"
    try:
        with path.open(errors="replace") as fh:
            tail = collections.deque((ln.strip() for ln in fh if ln.strip()), maxlen=lines)
    except OSError:
        return "(no stderr)"
    return " | ".join(tail) or "(stderr empty)"


def command_trainable(config: dict[str, Any]) -> None:
    """One Tune trial of a command trainer (see the module docstring)."""
    from ray import tune

    spec = config["spec"]
    worker = CommandWorker.model_validate(spec["command"])
    trial_dir = Path(tune.get_context().get_trial_dir() or os.getcwd())
    values = {**worker.defaults, **placeholders(spec, str(trial_dir))}
    for name, table in worker.values.items():
        if str(values.get(name)) in table:
            values[name] = table[str(values[name])]
    argv = [fill(a, values) for a in worker.command]
    log = Path(fill(worker.log, values))
    env = {**os.environ, **{k: fill(v, values) for k, v in worker.env.items()}, **gpu_env()}
    set_aside(log)
    proc = start(argv, env, trial_dir, Path(values["workdir"]))
    options = ReadOptions(worker.step_field, worker.step_pattern, worker.logging_steps)
    follower = LogFollower(log, worker.format, options=options)
    names_src = worker.names
    if names_src.endswith((".yaml", ".yml")):
        names_src = str(Path(values["workdir"]) / fill(names_src, values))
    names = NameMapper(names_src)
    sidecar = (
        None
        if worker.distributions is None
        else DistsSidecar(Path(fill(worker.distributions, values)))
    )
    if sidecar is not None:
        set_aside(sidecar.path)
    key = spec["trial_key"]
    t0 = time.monotonic()
    last: int | None = None
    appeared: float | None = None  # when the log was first seen
    try:
        while True:
            done = proc.poll() is not None
            if follower.exists():
                if appeared is None:
                    appeared = time.monotonic()
                for s in follower.close() if done else follower.poll():
                    row = names({"step": s.step, **s.metrics})
                    metrics = {k: v for k, v in row.items() if k != "step"}
                    dists = sidecar.take(s.step) if sidecar is not None else {}
                    tune.report(pack(key, _Step(s.step, metrics, dists)))
                    last = s.step
                if follower.error is not None:
                    raise follower.error
                if not done and worker.idle is not None:
                    quiet = time.monotonic() - max(follower.grew_at, appeared)
                    if quiet > worker.idle:
                        end_process_group(proc.pid, worker.grace, pgid=proc.pid)
                        raise RuntimeError(
                            f"{hung_line(worker.idle, last)}; ended its process group"
                        )
            elif time.monotonic() - t0 > worker.wait and not done:
                raise RuntimeError(f"trainer wrote no log at {log} within {worker.wait:g} s")
            if done:
                break
            time.sleep(0.1)
        if proc.returncode != 0:
            raise RuntimeError(
                f"trainer exited with code {proc.returncode}: {stderr_tail(trial_dir)}"
            )
        if not follower.exists():
            raise RuntimeError(f"trainer exited without writing its log {log}")
    finally:
        # the trainer's own session: its group's id is its pid, also once it has exited
        end_process_group(proc.pid, worker.grace, pgid=proc.pid)
        proc.wait()
