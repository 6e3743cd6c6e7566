"""``GapwatchCallback``: gapwatch inside a TRL (or any ``transformers.Trainer``) run.

Add it to the trainer's callbacks. At each ``on_log`` it maps TRL's metric names onto
gapwatch's (``correction.name_maps``; both kept), writes the step to the store as a run
(a ``TrackedRun``: it shows live in the UI), and lets the rules judge it; on a stop it
stores the decision with its evidence and sets ``control.should_training_stop``, so the
trainer ends at that step. ``on_train_end`` marks how the run ended; a SIGTERM or Ctrl-C
(SIGINT) that ends the process first marks it too (failed "ended by SIGTERM", or stopped
as ``interrupted``), then goes on to the handler that was there before, so the trainer
ends as it would have (``orchestrator.signals.EndRelay``). With ``log_path``
it also appends each logged step to a JSONL file, the form a command sweep or
``gapwatch watch`` follows (``store=False`` then leaves the store and the rules to the
follower)::

    from gapwatch.integrations.trl import GapwatchCallback
    trainer = GRPOTrainer(..., callbacks=[GapwatchCallback(name="grpo-s0")])

With ``GapGRPOTrainer`` (``gapwatch.integrations.trl_gap``, the seed's experiment inside
TRL: a dense sampler, a compressed trainer forward, gapwatch's sliced diagnostics and
corrections) the callback also stores each step's |log-ratio| sketches, which the UI's
ECDFs read (``dists_path``: the same as JSONL for a command sweep). Swap the trainer in with
one import::

    from gapwatch.integrations.trl import GapConfig, GapGRPOTrainer as GRPOTrainer

Import-light: this module needs only ``transformers`` (a gapwatch dependency); TRL itself
is imported only when ``GapGRPOTrainer`` or ``GapConfig`` is first used, so the callback
serves any Trainer.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from gapwatch.orchestrator import rules as R
from gapwatch.orchestrator.rules import Decision, RuleSet
from gapwatch.orchestrator.signals import EndRelay, mark_signalled
from gapwatch.orchestrator.tracked import TrackedRun
from gapwatch.orchestrator.watch import NameMapper
from gapwatch.store import identity, open_store
from gapwatch.store.staleness import this_process

__all__ = ["GapConfig", "GapGRPOTrainer", "GapwatchCallback"]  # noqa: F822 (lazy, below)

_LAZY = ("GapConfig", "GapGRPOTrainer", "TRLHooksMissing")


def __getattr__(name: str) -> Any:
    # TRL is imported on first use of the trainer (the callback needs only transformers)
    if name in _LAZY:
        from gapwatch.orchestrator.integrations import trl_gap

        return getattr(trl_gap, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class GapwatchCallback(TrainerCallback):  # type: ignore[misc]
    """Record a Trainer's logged steps in the store, apply the rules, stop on a stop.

    Args:
        name: the run's name (its trial key in ``sweep``); default ``trl-s<seed>``.
        db: store URL (default ``$GAPWATCH_DB_URL``, else ``sqlite:///./gapwatch.db``).
        sweep: the store's sweep for the run.
        rules: a ``RuleSet``, or ``rules:`` settings as in a sweep YAML (None: defaults).
        control_run: a stored run id of the paired control (its figures at the same step
            feed the rules that compare with a control).
        role, seed, codec, correction: the run's labels (seed: the trainer's by default).
        log_path: also append each logged step here as JSONL (``{"step": n, ...}``).
        dists_path: append each logged step's sketches here as JSONL
            (``{"step": n, "distributions": {name: payload}}``; a command sweep's
            ``worker.distributions`` reads it), where the trainer hands any over.
        store: False to write only ``log_path`` (no store, no rules).
        config: more of the run to record in its stored config (e.g. ``{"model_info":
            workers.pretrained.describe(name)}``).
    """

    def __init__(
        self,
        *,
        name: str | None = None,
        db: str | None = None,
        sweep: str = "trl",
        rules: RuleSet | dict[str, Any] | None = None,
        control_run: int | None = None,
        role: str = "treatment",
        seed: int | None = None,
        codec: str = "unknown",
        correction: str = "unknown",
        log_path: str | Path | None = None,
        dists_path: str | Path | None = None,
        store: bool = True,
        config: dict[str, Any] | None = None,
    ) -> None:
        if role not in ("control", "treatment"):
            raise ValueError(f"role {role!r}: use 'control' or 'treatment'")
        if not store and log_path is None:
            raise ValueError("with store=False give log_path, or the callback records nothing")
        self.ruleset = rules if isinstance(rules, RuleSet) else R.build(rules)
        self.name, self.db, self.sweep = name, db, sweep
        self.control_run, self.role, self.seed = control_run, role, seed
        self.codec, self.correction = codec, correction
        self.log_path = None if log_path is None else Path(log_path)
        self.dists_path = None if dists_path is None else Path(dists_path)
        self._dists: Callable[[], dict[str, Any]] | None = None
        self.use_store = store
        self.extra_config = dict(config or {})
        self.run: TrackedRun | None = None
        self.stop: Decision | None = None
        self.names = NameMapper("trl")
        self._last_step: int | None = None
        self._relay = EndRelay(self._signalled)
        self.ended_by: int | None = None
        """The signal whose end was recorded (then ``on_train_end`` leaves the run as is)."""

    def take_distributions(self, source: Callable[[], dict[str, Any]]) -> None:
        """Where each logged step's distributions come from (``GapGRPOTrainer`` calls this
        with its ``pop_distributions``)."""
        self._dists = source

    # --- Trainer's hooks ---------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        seed = int(self.seed if self.seed is not None else getattr(args, "seed", 0))
        name = self.name or f"trl-s{seed}"
        for p in (self.log_path, self.dists_path):
            if p is not None:
                p.parent.mkdir(parents=True, exist_ok=True)
        if not self.use_store:
            return
        st = open_store(self.db)
        sweep_id = st.ensure_sweep(self.sweep, "runs recorded by GapwatchCallback")
        pair = st.run(self.control_run).pair_key if self.control_run is not None else None
        ident = identity.RunIdentity(
            seed=seed, task=self.sweep, model=name, settings="external", codec=self.codec,
            correction=self.correction, role=self.role, pair=pair or f"{self.sweep}/{name}",  # type: ignore[arg-type]
        )  # fmt: skip
        config = {
            "source": "transformers.Trainer callback",
            "trainer": type(kwargs.get("model")).__name__ if kwargs.get("model") else None,
            "output_dir": str(getattr(args, "output_dir", "")),
            "seed": seed,
            **self.extra_config,
        }
        self.run = TrackedRun(
            st, sweep_id, name, ident, config, self.ruleset, control_run=self.control_run
        )
        st.update_run_config(self.run.run_id, {"placement": this_process()})
        self.ended_by = None
        self._relay.install()  # from here a SIGTERM or Ctrl-C marks the run first

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        step = int(state.global_step)
        numbers = {
            k: float(v)
            for k, v in (logs or {}).items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        if not numbers:
            return
        dists = self._dists() if self._dists is not None else {}
        if self.dists_path is not None and dists:
            # before the metrics line: a follower that sees step n has its sketches
            with self.dists_path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"step": step, "distributions": dists}) + "\n")
        if self.log_path is not None:
            with self.log_path.open("a", encoding="utf-8") as fh:
                # NaN and infinities as the JSON tokens Python and gapwatch's readers take
                fh.write(json.dumps({"step": step, **numbers}) + "\n")
        if self.run is None or self.ended_by is not None:
            return
        row = self.names({"step": step, **numbers})
        metrics = {k: v for k, v in row.items() if k != "step"}
        with self._relay.held():  # a signal meanwhile is recorded once this write is done
            if self._last_step is not None and step <= self._last_step:
                self.run.add(step, metrics)  # a second log at one step (e.g. the summary)
                return
            self._last_step = step
            stop = self.run.step(step, metrics, dists)
        if stop is not None:
            self.stop = stop
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._relay.restore()
        if self.run is not None and self.ended_by is None:
            self.run.finish()

    def _signalled(self, signum: int) -> None:
        """SIGTERM or SIGINT is ending the process: record how the run ended, once."""
        if self.run is None or self.ended_by is not None:
            return
        self.ended_by = signum
        status = mark_signalled(self.run, signum)
        why = self.run.store.run(self.run.run_id).error or "stopped"
        print(f"gapwatch: run {self.run.run_id} {status}: {why}", file=sys.stderr, flush=True)
