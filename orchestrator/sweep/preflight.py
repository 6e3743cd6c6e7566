"""The preflight: before a sweep launches its grid, can its dense policy score at all?

A sweep of paired runs only means something if each dense control can learn; one whose
policy never gets the task reward (it never calls the tool, its actions never parse, or
it never copies the tool's result) gives every pair a dead reference and wastes the whole
grid. So ``gapwatch sweep`` first plays one batch of episodes (no update) with the dense
policy of each distinct model/environment among its built-in trials, with each trial's
own sampler settings, and stops with one line if any cannot score. ``--no-preflight``
skips it. Command workers (TRL, verl, any program) are not probed: gapwatch does not
know how to run their policy.

Call :func:`preflight` with the sweep's trial specs; it returns the lines it printed.
Not here: the measurement itself (``workers.probe``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Final

from gapwatch.orchestrator.errors import GapwatchError

EPISODES: Final = 64
"""Episodes per probe: at the quick preset's 16% starting success, the chance that 64
episodes of a policy that can score show no success is 0.84**64, about 1e-5."""

PROBED: Final = (
    "model", "env", "env_kwargs", "shots", "max_interactions", "token_budget", "temperature",
    "sampler_dtype", "device",
)  # fmt: skip
"""The run settings a probe depends on; trials that share them share one probe (the
seed, the codec and the correction do not change the dense policy before an update)."""


def distinct_runs(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One run dict per distinct combination of ``PROBED`` settings (and warm start)."""
    seen: dict[str, dict[str, Any]] = {}
    for run in runs:
        key = json.dumps(
            {k: v for k, v in run.items() if k in PROBED or k.startswith("warm_start")},
            sort_keys=True,
            default=str,
        )
        seen.setdefault(key, run)
    return list(seen.values())


class Skipped(Exception):
    """The probe cannot run on this machine (said, not an error)."""


def probe_run(run: dict[str, Any]) -> Any:
    """The dense policy of ``run`` (a resolved RunConfig dict) played for ``EPISODES`` on
    this machine (the driver's). A run on a device this machine lacks is skipped: on a
    cluster the trials run on nodes that have it (Ray places them). A non-torch sampler
    is probed with the torch one (the same dense weights: whether the policy can score
    does not depend on the engine, and vLLM would take the driver's GPU)."""
    from gapwatch.workers import RunConfig, devices, envs, formats
    from gapwatch.workers.loop import make_sampler
    from gapwatch.workers.model import load_policy
    from gapwatch.workers.probe import measure

    over = {"compression": "none", "compression_kwargs": {}, "sampler": "torch"}
    cfg = RunConfig.from_dict({**run, **over})
    try:
        devices.require(cfg.device)
    except ValueError:
        raise Skipped(f"device {cfg.device!r} is not usable on this machine") from None
    model, tok = load_policy(cfg)
    sampler = make_sampler(cfg, model, tok)
    env = envs.get(cfg.env, **cfg.env_kwargs)
    return measure(env, sampler, tok, episodes=EPISODES, max_interactions=cfg.max_interactions,
                   token_budget=cfg.token_budget, temperature=cfg.temperature,
                   fmt=formats.make(tok, env, cfg.shots))  # fmt: skip


def preflight(
    runs: Sequence[dict[str, Any]],
    say: Callable[[str], None],
    probe: Callable[[dict[str, Any]], Any] = probe_run,
) -> None:
    """Probe each distinct dense policy among ``runs``; raise ``GapwatchError`` (one line,
    nothing launched) where one cannot score. ``probe`` is a seam for tests."""
    for run in distinct_runs(runs):
        what = f"{run.get('model', 'tiny')} on {run.get('env')}"
        try:
            q = probe(run)
        except Skipped as why:
            say(f"preflight: skipped for {what}: {why} (its trials run where it is)")
            continue
        except ValueError as exc:  # a bad model path, a device not there, a failed gate
            raise GapwatchError(
                f"preflight: cannot load the dense policy ({what}): {exc}"
            ) from None
        if q.success > 0:
            say(f"preflight: dense policy {what}: {q.line()}")
            continue
        raise GapwatchError(
            f"preflight: the dense policy ({what}) cannot score: {q.why_not()} ({q.line()}); "
            "nothing launched. Its controls would learn nothing, so no pair would mean "
            "anything: fix the warm start (warm_start_steps, warm_start_wrong_frac) or the "
            "env, or pass --no-preflight to launch anyway"
        )
