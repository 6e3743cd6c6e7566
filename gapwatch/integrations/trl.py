"""``GapwatchCallback``: gapwatch inside a TRL (or any ``transformers.Trainer``) run.

Add it to the trainer's callbacks. At each ``on_log`` it maps TRL's metric names onto
gapwatch's (``correction.name_maps``; both kept), writes the step to the store as a run
(a ``TrackedRun``: it shows live in the UI), and lets the rules judge it; on a stop it
stores the decision with its evidence and sets ``control.should_training_stop``, so the
trainer ends at that step. ``on_train_end`` marks how the run ended. With ``log_path``
it also appends each logged step to a JSONL file, the form a command sweep or
``gapwatch watch`` follows (``store=False`` then leaves the store and the rules to the
follower)::

    from gapwatch.integrations.trl import GapwatchCallback
    trainer = GRPOTrainer(..., callbacks=[GapwatchCallback(name="grpo-s0")])

Import-light: this module needs only ``transformers`` (a gapwatch dependency); TRL itself
is never imported here, so the callback serves any Trainer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from orchestrator import rules as R
from orchestrator.logs import NameMapper
from orchestrator.rules import Decision, RuleSet
from orchestrator.tracked import TrackedRun
from store import identity, open_store

__all__ = ["GapwatchCallback"]


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
        store: False to write only ``log_path`` (no store, no rules).
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
        store: bool = True,
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
        self.use_store = store
        self.run: TrackedRun | None = None
        self.stop: Decision | None = None
        self.names = NameMapper("trl")
        self._last_step: int | None = None

    # --- Trainer's hooks ---------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        seed = int(self.seed if self.seed is not None else getattr(args, "seed", 0))
        name = self.name or f"trl-s{seed}"
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
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
        }
        self.run = TrackedRun(
            st, sweep_id, name, ident, config, self.ruleset, control_run=self.control_run
        )

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
        if self.log_path is not None:
            with self.log_path.open("a", encoding="utf-8") as fh:
                # NaN and infinities as the JSON tokens Python and gapwatch's readers take
                fh.write(json.dumps({"step": step, **numbers}) + "\n")
        if self.run is None:
            return
        row = self.names({"step": step, **numbers})
        metrics = {k: v for k, v in row.items() if k != "step"}
        if self._last_step is not None and step <= self._last_step:
            self.run.add(step, metrics)  # a second log at one step (e.g. the train summary)
            return
        self._last_step = step
        stop = self.run.step(step, metrics)
        if stop is not None:
            self.stop = stop
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is not None:
            self.run.finish()
