"""The ``gapwatch`` command line (typer).

Each command is a thin shell: it parses flags and calls one function in the package
that owns the job (``sweep``, ``run``: ``orchestrator.sweep``; ``watch``, ``replay``,
``names``: ``orchestrator.watch``; ``runs``: ``orchestrator.listing``; ``export``,
``db``: ``store``; ``ui``: ``ui``), imported lazily so ``gapwatch --help`` stays fast. It
is the one module that imports the modules of a way in directly. Any error a user can fix
(bad config, unknown name, missing database, malformed log) is printed as one line,
``error: <what is wrong and how to fix it>``, with exit code 2; set ``GAPWATCH_DEBUG=1``
to see the traceback instead.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from gapwatch.orchestrator.signals import Terminated

app = typer.Typer(
    name="gapwatch",
    help="Paired dense/compressed agentic RL runs: measure the train-inference gap, "
    "stop collapsing runs, compare them in a web UI.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Manage the store's schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")

F = TypeVar("F", bound=Callable[..., Any])

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Store URL (sqlite:///path.db or postgresql+psycopg://...). "
        "Default: $GAPWATCH_DB_URL, else sqlite:///./gapwatch.db.",
    ),
]

FORMAT_HELP = (
    "The log's format: auto (told by name and content), jsonl, csv, trl_state, "
    "console_dicts, verl_console, xtuner, tensorboard, mlflow, trackio, json_history, ipynb, "
    "keyvalue."
)
NAMES_HELP = (
    "Whose metric names the log uses: auto, gapwatch, verl, trl, prime-rl, tinker, slime, "
    "skyrl, nemo-rl, roll, openrlhf, areal, oat, xtuner, or a YAML file mapping yours to "
    "gapwatch's ({reward: critic/score/mean})."
)
STEP_FIELD_HELP = "keyvalue logs: the field that holds the step (default: step, global_step, ...)."
STEP_PATTERN_HELP = r"keyvalue logs: a regex whose first group is the step, e.g. 'Step (\d+)'."
LOGGING_STEPS_HELP = "Console dicts: trainer steps between two printed dicts (logging_steps)."


def _read_options(
    step_field: str | None, step_pattern: str | None, logging_steps: int | None
) -> Any:
    from gapwatch.orchestrator.readers import ReadOptions

    return ReadOptions(
        step_field=step_field, step_pattern=step_pattern, logging_steps=logging_steps
    )


def _one_line(exc: BaseException) -> str:
    from gapwatch.orchestrator.console import plain

    return plain(" ".join(str(exc).split()) or type(exc).__name__)


def friendly(fn: F) -> F:
    """Run a command; turn any exception into one ``error:`` line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except KeyboardInterrupt as exc:
            # the work may say what the interruption left (``gapwatch run``: its run's end)
            typer.echo(f"interrupted: {_one_line(exc)}" if str(exc) else "interrupted", err=True)
            raise typer.Exit(130) from None
        except Terminated:
            # the work's own finally blocks have run (its run marked, its log closed): end
            # now, as SIGTERM asks, without the seconds torch's teardown takes at exit
            typer.echo("terminated (SIGTERM); what was recorded is kept", err=True)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(143)
        except Exception as exc:  # noqa: BLE001 - the CLI's one place to catch everything
            if os.environ.get("GAPWATCH_DEBUG"):
                raise
            typer.echo(f"error: {_one_line(exc)}", err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


@db_app.command("upgrade")
@friendly
def db_upgrade(db: DbOpt = None) -> None:
    """Create the store or bring its schema to the newest revision."""
    from gapwatch.store import open_store

    st = open_store(db)
    typer.echo(f"store at {st.url_display} is at schema revision {st.revision()}")


@app.command("runs")
@friendly
def runs(
    db: DbOpt = None,
    sweep: Annotated[str | None, typer.Option(help="Only runs of this sweep (name).")] = None,
) -> None:
    """List the sweeps and runs the store holds."""
    from gapwatch.orchestrator.listing import print_runs

    print_runs(db, sweep)


@app.command("run")
@friendly
def run(
    config: Annotated[Path, typer.Argument(help="Run config YAML (e.g. examples/run-dense.yaml).")],
    db: DbOpt = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a config field: --set steps=5 (repeatable)."),
    ] = None,
    no_rules: Annotated[bool, typer.Option("--no-rules", help="Apply no stop rule.")] = False,
    log: Annotated[
        Path | None,
        typer.Option(
            "--log",
            help="Also write each step here as verl's file logger does "
            '({"step": n, "data": {...}} per line; for `gapwatch watch`).',
        ),
    ] = None,
    no_store: Annotated[
        bool,
        typer.Option(
            "--no-store",
            help="Write only --log: no store, no rules (a `gapwatch watch` that follows the "
            "log stores and judges it).",
        ),
    ] = False,
) -> None:
    """Run one RL run in this process and record it in the store (and/or a verl-format log)."""
    from gapwatch.orchestrator.sweep.local_run import run_local

    run_local(config, db_url=db, overrides=set_ or [], apply_rules=not no_rules, log=log,
              store=not no_store)  # fmt: skip


@app.command("sweep")
@friendly
def sweep(
    config: Annotated[
        Path, typer.Argument(help="Sweep config YAML (e.g. examples/quickstart.yaml).")
    ] = Path("examples/quickstart.yaml"),
    db: DbOpt = None,
    address: Annotated[
        str | None,
        typer.Option(help="Join a Ray cluster ('auto' or host:port) instead of starting one."),
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue an interrupted sweep of this name.")
    ] = False,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a config field: --set steps=5 (repeatable)."),
    ] = None,
    max_trials: Annotated[
        int | None,
        typer.Option("--max-trials", help="Allow the grid to expand to this many trials."),
    ] = None,
    no_preflight: Annotated[
        bool,
        typer.Option(
            "--no-preflight",
            help="Launch without first checking that each dense policy can score at all.",
        ),
    ] = False,
) -> None:
    """Run a paired dense/compressed sweep on Ray Tune, stopping collapsing trials."""
    from gapwatch.orchestrator.sweep.driver import run_sweep

    overrides = [*(set_ or []), *([f"max_trials={max_trials}"] if max_trials else [])]
    run_sweep(config, db_url=db, address=address, resume=resume, overrides=overrides,
              preflight=not no_preflight)  # fmt: skip


@app.command("replay")
@friendly
def replay(
    log: Annotated[
        Path,
        typer.Argument(
            help="What the trainer wrote: a metrics log, console output, trainer_state.json, "
            "a TensorBoard/MLflow/trackio folder, a notebook (see --format)."
        ),
    ],
    control: Annotated[
        Path | None, typer.Option(help="The paired dense control's log, same formats.")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "auto",
    names: Annotated[str, typer.Option(help=NAMES_HELP)] = "auto",
    step_field: Annotated[str | None, typer.Option(help=STEP_FIELD_HELP)] = None,
    step_pattern: Annotated[str | None, typer.Option(help=STEP_PATTERN_HELP)] = None,
    logging_steps: Annotated[int | None, typer.Option(help=LOGGING_STEPS_HELP)] = None,
    rules: Annotated[
        str | None,
        typer.Option(help="Comma-separated rule names (default: all registered rules)."),
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="Sweep YAML whose `rules:` settings to use.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Run the stop rules over a metrics log from elsewhere; say when and why they fire."""
    from gapwatch.orchestrator.watch.replay import replay_cli

    code = replay_cli(
        log, control=control, rules=rules, config=config, as_json=as_json, fmt=fmt,
        names=names, options=_read_options(step_field, step_pattern, logging_steps),
    )  # fmt: skip
    raise typer.Exit(code)


@app.command("names")
@friendly
def names_cmd(
    log: Annotated[Path, typer.Argument(help="A log in any format replay reads.")],
    fmt: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "auto",
    names: Annotated[str, typer.Option(help=NAMES_HELP)] = "auto",
    step_field: Annotated[str | None, typer.Option(help=STEP_FIELD_HELP)] = None,
    step_pattern: Annotated[str | None, typer.Option(help=STEP_PATTERN_HELP)] = None,
    logging_steps: Annotated[int | None, typer.Option(help=LOGGING_STEPS_HELP)] = None,
) -> None:
    """How a log is read: format and steps, names mapped, which rules can decide, and a
    names-file draft for the reward-, length- and mismatch-like keys left unmapped."""
    from gapwatch.orchestrator.watch.names_report import names_report, print_report

    options = _read_options(step_field, step_pattern, logging_steps)
    print_report(names_report(log, fmt=fmt, names=names, options=options))


@app.command("watch")
@friendly
def watch(
    log: Annotated[
        Path | None,
        typer.Argument(
            help="The metrics log the trainer writes (may not exist yet); or, for a fleet, "
            "a glob ('runs/*/metrics.jsonl') or a folder with --pattern."
        ),
    ] = None,
    db: DbOpt = None,
    control: Annotated[
        str | None,
        typer.Option(help="The paired control: its log (followed too) or a stored run id."),
    ] = None,
    sweep: Annotated[str, typer.Option(help="Store the run in this sweep.")] = "watch",
    name: Annotated[
        str | None, typer.Option(help="The run's name (default: the log's stem).")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "auto",
    names: Annotated[str, typer.Option(help=NAMES_HELP)] = "auto",
    step_field: Annotated[str | None, typer.Option(help=STEP_FIELD_HELP)] = None,
    step_pattern: Annotated[str | None, typer.Option(help=STEP_PATTERN_HELP)] = None,
    logging_steps: Annotated[int | None, typer.Option(help=LOGGING_STEPS_HELP)] = None,
    rules: Annotated[
        str | None, typer.Option(help="Comma-separated rule names (default: every rule).")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="A YAML file whose `rules:` settings to use.")
    ] = None,
    from_start: Annotated[
        bool,
        typer.Option(
            "--from-start/--from-end", help="Read the log from its start, or only what comes."
        ),
    ] = True,
    pid: Annotated[
        int | None, typer.Option(help="The trainer's pid: its process group is ended on a stop.")
    ] = None,
    grace: Annotated[float, typer.Option(help="Seconds from SIGTERM to SIGKILL.")] = 10.0,
    on_stop: Annotated[
        str | None,
        typer.Option("--on-stop", help="Shell command to run on a stop (e.g. 'scancel $JOB')."),
    ] = None,
    idle: Annotated[
        float,
        typer.Option(
            help="Seconds without a new line after which the run is finished, or, where "
            "--pid (a fleet: --pid-file) is still alive, hung (failed) (0: never)."
        ),
    ] = 600.0,
    end_hung: Annotated[
        bool,
        typer.Option(
            "--end-hung",
            help="A hung trainer (--pid or --pid-file alive, log silent --idle s): end it.",
        ),
    ] = False,
    wait: Annotated[float, typer.Option(help="Seconds to wait for the log to appear.")] = 120.0,
    role: Annotated[str, typer.Option(help="The run's role: treatment or control.")] = "treatment",
    seed: Annotated[int, typer.Option(help="The run's seed (a label).")] = 0,
    codec: Annotated[str, typer.Option(help="A label for the trainer's compression.")] = "unknown",
    correction: Annotated[str, typer.Option(help="A label for its correction.")] = "unknown",
    pattern: Annotated[
        str | None, typer.Option(help="Fleet: the logs under the folder LOG ('*/metrics.jsonl').")
    ] = None,
    layout: Annotated[
        str | None,
        typer.Option(
            help="Fleet: each log's fields from its path, "
            "'runs/{correction}-s{seed}/metrics.jsonl' (seed, codec, correction, any name)."
        ),
    ] = None,
    manifest: Annotated[
        Path | None,
        typer.Option(
            help="Fleet: a YAML file mapping each log to seed, codec, correction, control."
        ),
    ] = None,
    control_when: Annotated[
        str | None,
        typer.Option(
            help="Fleet: the fields of a seed's control, e.g. correction=none "
            "(default: codec and correction both absent, none or dense)."
        ),
    ] = None,
    pid_file: Annotated[
        str | None,
        typer.Option(
            help="Fleet: a file holding each trainer's pid, templated: '{dir}/train.pid'."
        ),
    ] = None,
    rescan: Annotated[
        float, typer.Option(help="Fleet: seconds between searches for new logs.")
    ] = 5.0,
    max_open: Annotated[int, typer.Option(help="Fleet: at most this many logs held open.")] = 128,
) -> None:
    """Follow a run another program trains: store each step, apply the rules, stop it.

    A glob, a folder with --pattern, --layout or --manifest follows a fleet: every log a
    run, paired by seed, each stopped by its own templated --on-stop / --pid-file.

    Exit status: 0 finished with no stop; 3 stopped by a rule; 4 stopped but the stop
    action failed; 5 a trainer hung (--pid or --pid-file alive, log silent --idle s);
    2 bad input.
    """
    from gapwatch.orchestrator.watch.replay import ruleset_for
    from gapwatch.orchestrator.watch.single import WatchOptions
    from gapwatch.orchestrator.watch.single import watch as follow

    if pattern or layout or manifest or (log is not None and set(str(log)) & set("*?[")):
        from gapwatch.orchestrator.watch.fleet import FleetOptions, watch_fleet

        single = {"--pid": pid, "--control": control, "--name": name, "--seed": seed or None,
                  "--codec": None if codec == "unknown" else codec,
                  "--correction": None if correction == "unknown" else correction,
                  "--role": None if role == "treatment" else role}  # fmt: skip
        given = [k for k, v in single.items() if v is not None]
        if given:
            raise ValueError(
                f"{', '.join(given)} name one run; a fleet takes its runs' fields from "
                "--layout or --manifest, their pids from --pid-file"
            )
        if end_hung and pid_file is None:
            raise ValueError(
                "--end-hung ends a hung trainer: give the fleet's --pid-file ('{dir}/train.pid')"
            )
        fleet = FleetOptions(
            source=None if log is None else str(log), pattern=pattern, layout=layout,
            manifest=manifest, control_when=control_when,
            sweep="fleet" if sweep == "watch" else sweep, fmt=fmt, names=names,
            read=_read_options(step_field, step_pattern, logging_steps),
            ruleset=ruleset_for(rules, config), from_start=from_start, on_stop=on_stop,
            pid_file=pid_file, grace=grace, idle=idle or None, end_hung=end_hung, wait=wait,
            rescan=rescan, max_open=max_open, say=lambda text: typer.echo(text),
        )  # fmt: skip
        raise typer.Exit(watch_fleet(fleet, db))
    if log is None:
        raise ValueError("give the log to follow (or a glob, --layout or --manifest for a fleet)")
    if pid_file is not None or control_when is not None:
        raise ValueError(
            "--pid-file and --control-when are for a fleet (a glob, --layout or --manifest)"
        )
    if role not in ("treatment", "control"):
        raise ValueError(f"--role {role!r}: use treatment or control")
    if end_hung and pid is None:
        raise ValueError("--end-hung ends a hung trainer's process group: give its --pid")
    opts = WatchOptions(
        log=log, control=control, sweep=sweep, name=name, fmt=fmt, names=names,
        read=_read_options(step_field, step_pattern, logging_steps),
        ruleset=ruleset_for(rules, config), from_start=from_start, pid=pid, grace=grace,
        on_stop=on_stop, idle=idle or None, end_hung=end_hung, wait=wait, role=role, seed=seed,
        codec=codec, correction=correction, say=lambda text: typer.echo(text),
    )  # fmt: skip
    raise typer.Exit(follow(opts, db))


@app.command("ui")
@friendly
def ui(
    db: DbOpt = None,
    port: Annotated[int, typer.Option(help="Port to serve on.")] = 8501,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
) -> None:
    """Serve the Streamlit web UI over the store."""
    from gapwatch.ui.launch import serve

    if host not in ("127.0.0.1", "localhost", "::1"):
        typer.echo(
            f"warning: serving on {host}: anyone who can reach this address can read the "
            "store through the UI (it has no login); keep it on 127.0.0.1 and tunnel "
            "(ssh -L 8501:127.0.0.1:8501 host) unless the network is yours alone",
            err=True,
        )
    serve(db_url=db, port=port, host=host)


@app.command("export")
@friendly
def export(
    run_id: Annotated[int, typer.Argument(help="Run id (see `gapwatch runs`).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output file (.jsonl or .csv).")],
    db: DbOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Replace --out if it exists.")] = False,
) -> None:
    """Export one run's metrics as a log that `gapwatch replay` reads."""
    from gapwatch.store import open_store

    st = open_store(db, read_only=True)  # a mistyped --db must not create a store
    n = st.export_run(run_id, out, overwrite=force)
    typer.echo(f"wrote {n} steps of run {run_id} to {out}")


def main() -> None:
    """Console-script entry point."""
    app(prog_name="gapwatch")


if __name__ == "__main__":
    main()
