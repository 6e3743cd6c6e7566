"""Trials that lose their process: Tune's retry, and what each new attempt takes up.

A sweep's trial runs in a Ray actor. When its node dies (preempted, its raylet killed),
Ray Tune starts the trial again on a node that is still there, up to the sweep config's
``max_failures`` times. What a new attempt takes up:

- a built-in trial goes on from its newest Tune checkpoint (``trainable`` asks
  ``tune.get_checkpoint()``): the Recorder drops what the store holds after that
  checkpoint's step (:func:`resumes_after`), and the Monitor rebuilds the rules' state
  from the stored steps before the first step the attempt reports, as ``--resume`` does;
- a command trial starts its trainer again from step 1 (``orchestrator.sweep.command``), so
  the store drops all of the earlier attempt's steps and the rules start over.

So the store ends with each step once whatever the number of attempts (writes are keyed
by run and step besides). Each start is counted in the run's ``attempts``.

A node drained with notice (``ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION
--deadline-remaining-seconds N``, or an autoscaler's preemption) is only marked: Ray
schedules nothing new there but ends nothing at the deadline (its ``drain-node`` says the
caller must), so its trials run on until the machine goes and are then lost like any
other. Ray flags such a loss as preempted (``RayActorError.preempted``, from the dead
node's ``AUTOSCALER_DRAIN_PREEMPTED``), and Tune does not count a preempted loss against
``max_failures`` unless ``RAY_TRAIN_COUNT_PREEMPTION_AS_FAILURE`` is 1: a trial on
preemptible machines would be retried past ``max_failures`` (with ``max_failures: 0`` it
would be retried anyway, and without end). :class:`Retries` sets that variable on the
driver when the sweep starts, so a preemption is one attempt and one failure like any
loss, and its retry line says the node was preempted and why (the drain's reason, from
the dead node's record in Ray). The line says what Ray recorded: since Ray 2.60 a
SIGTERMed ``ray start`` drains its node again (for preemption, 30 s ahead,
``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S``), and a node that goes before that later
drain's deadline is recorded as lost, so a machine shut down with SIGTERM after its
notice may read "its process was lost"; the attempt is counted the same either way.

An error the trial raises itself is not retried, since it would recur (Tune retries
every failure alike): :func:`marking_errors` wraps the trainable so that such an error is
first reported in a result under ``ERROR_KEY``, and :class:`Retries` (a Tune callback on
the driver) then sets that trial's ``max_failures`` to 0 before the error reaches Tune.
A lost process raises nothing in the trial, so only it is retried.

Not here: the retry itself (Ray Tune's ``FailureConfig``, set in ``orchestrator.sweep.driver``).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

from ray.core.generated.common_pb2 import NodeDeathInfo  # type: ignore[attr-defined]
from ray.train.constants import RAY_TRAIN_COUNT_PREEMPTION_AS_FAILURE
from ray.tune import Callback

from gapwatch.orchestrator.console import console
from gapwatch.orchestrator.sweep.placement import placement_of
from gapwatch.orchestrator.sweep.trainable import STEP_KEY, TRIAL_KEY

ERROR_KEY = "gw_error"
"""Result key: the trial's own code raised (the error's type); do not retry it."""
LOST = "its process was lost"
"""How a retry line says a trial went, unless its node was preempted."""
DRAIN_WAIT_S = 40.0
"""How long a retry line waits for Ray to record the end of a drained node whose trial
was lost: Ray's default health checks find a node gone within about 30 s (5 failed
checks, 3 s apart, after a 10 s timeout)."""
PREEMPTED = NodeDeathInfo.AUTOSCALER_DRAIN_PREEMPTED
"""How Ray records a node that ended while drained for preemption (``ray.nodes()``'s
``DeathReason``; the same test makes ``RayActorError.preempted``)."""


def marking_errors(train_fn: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """``train_fn`` that reports ``ERROR_KEY`` before re-raising an error of its own."""

    @functools.wraps(train_fn)
    def marked(config: dict[str, Any]) -> None:
        from ray import tune

        try:
            train_fn(config)
        except Exception as exc:  # a Tune stop ends the thread with SystemExit: not here
            key = str(config["spec"]["trial_key"])
            tune.report({TRIAL_KEY: key, ERROR_KEY: type(exc).__name__})
            raise

    return marked


def resumes_after(trial: Any) -> int | None:
    """The step a (re)started Tune trial goes on after: its newest Tune checkpoint's
    (a retry), else the checkpoint ``--resume`` gave it; None: it starts from step 1."""
    latest = trial.latest_checkpoint_result
    if latest is not None and STEP_KEY in (latest.metrics or {}):
        return int(latest.metrics[STEP_KEY])
    restore = trial.config["spec"].get("restore")
    return None if restore is None else int(restore["step"])


class Retries(Callback):
    """Keeps Tune from retrying a trial's own errors, has it count a preempted node's loss
    as a failure, says when a trial starts again (or is out of retries) and why, and
    checks that a built-in trial's attempt goes on where it should (the step after its
    checkpoint, or step 1): one that does not is said, as its steps between are missing."""

    def __init__(self) -> None:
        self._first: dict[str, int] = {}
        """Built-in trial key -> the step its running attempt should report first."""
        self._node: dict[str, str] = {}
        """Trial key -> the Ray node id its latest attempt reported it runs on."""
        self._own_error: set[str] = set()
        """Trial keys whose own code raised: not a loss, nothing to say here."""

    def setup(
        self,
        stop: Any = None,
        num_samples: int | None = None,
        total_num_samples: int | None = None,
        **info: Any,
    ) -> None:
        # Ray's switch for counting a preempted loss against max_failures, read by Tune on
        # this driver at each failure (Trial._handle_ray_actor_error); Tune's Callback.setup
        # is where it asks for such variables to be set. It stays set in this process.
        os.environ[RAY_TRAIN_COUNT_PREEMPTION_AS_FAILURE] = "1"

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        spec = trial.config["spec"]
        if spec.get("command") is None:  # a command's log may begin past step 1
            after = resumes_after(trial)
            self._first[str(spec["trial_key"])] = 1 if after is None else after + 1

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        key = str(result.get(TRIAL_KEY))
        if ERROR_KEY in result:
            # Trial.should_recover() compares its failures with this, once the error lands
            trial.max_failures = 0
            self._own_error.add(key)
        where = placement_of(result)
        if where is not None:
            self._node[key] = str(where["node_id"])
        if STEP_KEY in result and key in self._first:
            want, got = self._first.pop(key), int(result[STEP_KEY])
            if got != want:
                console().print(
                    f"warning: {key} went on at step {got}, not at step {want} where this "
                    "attempt should: its stored steps between may be missing",
                    markup=False,
                )

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        key = str(trial.config["spec"]["trial_key"])
        failures = int(trial.run_metadata.num_failures)
        after = resumes_after(trial)
        where = "step 1" if after is None else f"its checkpoint after step {after}"
        console().print(
            f"retry {key}: {self._node_end(key) or LOST}; starting it again from {where} on "
            f"a node still up (retry {failures} of at most {trial.max_failures})",
            markup=False,
        )

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        key = str(trial.config["spec"]["trial_key"])
        how = None if key in self._own_error else self._node_end(key)
        if how is None:  # its own error (the summary's line for it), or not told by its node
            return
        console().print(
            f"{key} failed: {how}, and max_failures ({trial.max_failures}) allows no more "
            "retries: raise max_failures in the sweep config to have Tune start it again",
            markup=False,
        )

    def _node_end(self, key: str) -> str | None:
        """How trial ``key``'s node ended, as Ray recorded it: preempted (and the drain's
        reason), else ``LOST``; None while it is up, unknown, or Ray does not answer.

        A trial's process often dies before its node is recorded dead (the machine's
        workers go first; the head notices the node only after its health checks fail),
        so where the node is still up but being drained, this waits for Ray to record its
        end, at most ``DRAIN_WAIT_S``: the drain's reason is only in that record. The
        wait holds Tune's loop, once per lost trial of a drained node."""
        node = self._node.get(key)
        if node is None:
            return None
        try:
            import ray
            from ray._private.state import state

            dead = _dead(ray.nodes(), node)
            if dead is None and node in state.get_draining_nodes():
                until = time.monotonic() + DRAIN_WAIT_S
                while dead is None and time.monotonic() < until:
                    time.sleep(0.5)
                    dead = _dead(ray.nodes(), node)
        except Exception:  # noqa: BLE001 - only the wording depends on it
            return None
        if dead is None:
            return None
        if dead.get("DeathReason") != PREEMPTED:
            return LOST
        why = str(dead.get("DeathReasonMessage") or "").strip()
        return f"its node was preempted ({why})" if why else "its node was preempted"


def _dead(nodes: list[dict[str, Any]], node: str) -> dict[str, Any] | None:
    """Node ``node``'s record in ``ray.nodes()`` once Ray has recorded it dead, else None."""
    return next((n for n in nodes if n.get("NodeID") == node and not n.get("Alive")), None)


def new_attempt(result: dict[str, Any]) -> str | None:
    """The trial key of a result that opens an attempt (its placement report), or None."""
    if placement_of(result) is None:
        return None
    key = result.get(TRIAL_KEY)
    return None if key is None else str(key)
