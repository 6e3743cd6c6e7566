"""Sweep configuration: a YAML file -> a validated, expanded :class:`Sweep`.

A sweep YAML names the settings every trial shares with ``workers.RunConfig``'s own field
names (``env``, ``model``, ``steps``, ``tasks_per_step``, ``token_budget``, ``lr``, ...),
at the top level or under ``run:``, plus the sweep's own keys: the axes (``seeds``,
``compression``, ``correction``) and how to run it (``rules``, ``stopping``, ``store``,
``ray_address``, ``resources``)::

    name: quickstart
    env: mul
    steps: 30
    seeds: [0, 1]
    compression: [{codec: topk, keep: 0.05}]
    correction: [none, tis, {name: icepop, lo: [0.5, 0.8]}]

What is here:
- ``SweepConfig`` (pydantic, like every gapwatch config): the YAML's fields, documented
  once. Unknown keys fail listing the valid ones (a key of the old vocabulary says what it
  is called now); names are checked against the registries.
- :func:`load_sweep_config` / :func:`parse_sweep_config`: read, override, validate and
  expand, once, into a :class:`Sweep`: per seed one dense CONTROL and one TREATMENT per
  (codec strength, correction, threshold combination), each a resolved
  ``RunConfig`` dict with its :class:`store.identity.RunIdentity`; controls first, so they
  are scheduled before their treatments.

What is not here: running anything (``orchestrator.sweep.driver``), the rules themselves
(``orchestrator.rules``), how a run is labelled (``store.identity``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from gapwatch.orchestrator import rules
from gapwatch.orchestrator.errors import GapwatchError
from gapwatch.orchestrator.sweep.command import CommandWorker
from gapwatch.store import identity
from gapwatch.workers import RunConfig, codecs, pretrained
from gapwatch.workers.validation import Float, Int, Strict, check_name, describe

Scalar = int | float | str | bool

AXES = ("seed", "compression", "compression_kwargs", "compression_layers", "correction")
"""RunConfig fields a sweep sets per trial (with ``correction_kwargs`` and ``name``)."""
RENAMED = {
    "environment": "env",
    "batch_size": "tasks_per_step",
    "budgets": "token_budget and max_interactions (RunConfig's names, at the top level)",
}
"""Keys of the sweep vocabulary before it took RunConfig's names, and what replaced them."""


class Resources(Strict):
    """What one trial asks Ray for."""

    cpus: Float = Field(default=1.0, gt=0)
    """CPU cores per trial (torch in the trial uses this many threads)."""
    gpus: Float = Field(default=0.0, ge=0)
    """GPU fraction per trial (0.5 puts two trials on one GPU)."""


def _combos(grid: dict[str, Scalar | list[Scalar]]) -> list[dict[str, Scalar]]:
    keys = list(grid)
    values = [v if isinstance(v, list) else [v] for v in grid.values()]
    return [dict(zip(keys, c, strict=True)) for c in itertools.product(*values)]


class Correction(Strict):
    """One correction strategy; any key besides ``name`` is a threshold (a list sweeps it)."""

    name: str
    """Strategy name from ``correction.strategies.names()``."""
    thresholds: dict[str, Scalar | list[Scalar]] = Field(default_factory=dict)
    """Keyword thresholds passed to ``strategies.get(name, **kw)``, e.g. ``C: [1.5, 2, 4]``."""

    @model_validator(mode="before")
    @classmethod
    def _gather_thresholds(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"name": data}
        if isinstance(data, dict) and "thresholds" not in data:
            rest = {k: v for k, v in data.items() if k != "name"}
            return {"name": data.get("name"), "thresholds": rest}
        return data

    def combos(self) -> list[dict[str, Scalar]]:
        """Every threshold combination this entry sweeps, in YAML order (derived)."""
        return _combos(self.thresholds)


class Compression(Strict):
    """One compressed-trainer setting: a codec and its strength; a list value sweeps it.

    Any key besides ``codec``, ``layers`` and ``correction`` is the codec's strength
    keyword, e.g. ``{codec: quant, bits: 2}`` or ``{codec: topk, keep: [0.1, 0.05]}``.
    """

    codec: str
    """Codec name from ``workers.codecs.names()``."""
    params: dict[str, Scalar | list[Scalar]] = Field(default_factory=dict)
    """The codec's keyword strength(s) (``bits``, ``keep``); a list sweeps it."""
    layers: str | Int | None = None
    """Which layer outputs are compressed (``all`` or every n-th); None: the run's setting."""
    correction: list[Correction] | None = Field(default=None, min_length=1)
    """The corrections this setting is crossed with, where not every one of the sweep's
    ``correction`` list (``{codec: quant, bits: 8, correction: [none]}``); None: all."""

    @model_validator(mode="before")
    @classmethod
    def _gather_params(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"codec": data}
        if isinstance(data, dict) and "params" not in data:
            own = ("codec", "layers", "correction")
            rest = {k: v for k, v in data.items() if k not in own}
            out = {k: data[k] for k in own if k in data}
            return {**out, "params": rest}
        return data

    def combos(self) -> list[dict[str, Scalar]]:
        """Every strength combination this entry sweeps, in YAML order (derived)."""
        return _combos(self.params)


class SweepConfig(Strict):
    """A paired dense/compressed sweep, as written in a sweep YAML."""

    name: str
    """Sweep name: the store's key for it (``--resume`` continues the sweep of this name)."""
    seeds: list[Int] = Field(min_length=1)
    """One pair of runs (control + treatments) per seed."""
    run: dict[str, Any] = Field(default_factory=dict)
    """``workers.RunConfig`` fields every trial shares (``env``, ``steps``, ``lr``, ...);
    the same names may also stand at the top level."""
    compression: list[Compression] = Field(min_length=1)
    """Compressed-trainer settings; each is crossed with every correction (or its own
    ``correction`` list)."""
    correction: list[Correction] = Field(min_length=1)
    """Correction strategies; each is crossed with every compression setting."""
    rules: dict[str, Any] = Field(default_factory=dict)
    """Rule settings, passed unchanged to ``orchestrator.rules.build``."""
    stopping: bool = True
    """False: apply no stop rule (trials run all steps; used to measure compute saved)."""
    store: str | None = None
    """Store URL; ``--db`` wins, else this, else ``$GAPWATCH_DB_URL``, else SQLite."""
    ray_address: str | None = None
    """Ray cluster to join (``auto`` or host:port); ``--address`` wins; None: local Ray."""
    storage_path: str | None = None
    """Where Ray Tune keeps the trials' checkpoints and state (None: ``.gapwatch/ray_results``
    under the working directory). On a cluster of several machines it must be a folder
    every node reaches (an NFS mount, the same path on each), or a URI Tune writes to
    (``s3://...``, ``gs://...``): a sweep checks at its start that every node sees it."""
    resources: Resources = Field(default_factory=Resources)
    checkpoint_every: Int | None = Field(default=5, ge=1)
    """Built-in trials save a checkpoint every this many steps (None: never), so
    ``--resume`` takes them up from there instead of from step 1."""
    max_failures: Int = Field(default=2, ge=0)
    """How many times a trial whose process is lost (its node died or was preempted, its
    Ray worker killed) is started again, on a node still there: a built-in trial from its
    newest checkpoint, a command trial from step 1 (``orchestrator.sweep.attempts``). An error
    the trial raises itself (a trainer's non-zero exit, a hang, a bad setting) is not
    retried: it would recur. 2 lets a trial outlive two node losses, as a preemptible
    cluster may deal it in a day-long sweep, while a trial that kills every node it runs
    on (a host OOM) fails after three; 0 fails a trial at its first loss."""
    restore_grace: Int = Field(default=2, ge=0)
    """After a trial is taken up from a checkpoint, its first this many steps are judged
    but not acted on: a restart's spike is not a collapse."""
    max_trials: Int = Field(default=1000, ge=1)
    """Most trials the sweep may expand to (``--max-trials`` on the command line): a typo
    in a grid should not queue thousands of runs."""
    worker: CommandWorker | None = None
    """A command to run in each trial instead of the built-in worker (any trainer that
    writes a metrics log: ``orchestrator.sweep.command``); its codec and correction names are
    passed to it, not checked against gapwatch's registries."""

    @model_validator(mode="after")
    def _known_parts(self) -> SweepConfig:
        """The built-in worker's codecs and corrections must be registered ones."""
        if self.worker is not None:
            return self
        from gapwatch.correction import strategies

        for i, comp in enumerate(self.compression):
            _named(f"compression.{i}.codec", "codec", comp.codec, codecs.names())
            for j, corr in enumerate(comp.correction or []):
                where = f"compression.{i}.correction.{j}.name"
                _named(where, "correction", corr.name, strategies.names())
        for i, corr in enumerate(self.correction):
            _named(f"correction.{i}.name", "correction", corr.name, strategies.names())
        return self

    def crossed(self, comp: Compression) -> list[Correction]:
        """The corrections ``comp`` is crossed with: its own list, else the sweep's."""
        return comp.correction or self.correction

    @model_validator(mode="before")
    @classmethod
    def _gather_run(cls, data: Any) -> Any:
        """RunConfig's field names at the top level go into ``run:``; old names are named."""
        if not isinstance(data, dict):
            return data
        for old, new in RENAMED.items():
            if old in data:
                raise ValueError(f"{old!r} is not a sweep key any more; use {new}")
        fields = set(RunConfig.field_names()) | {"preset"}
        top = {k: v for k, v in data.items() if k in fields and k not in cls.model_fields}
        if not top:
            return data
        run = data.get("run") or {}
        if not isinstance(run, dict):
            return data  # the field's own validation says what is wrong
        both = sorted(set(top) & set(run))
        if both:
            raise ValueError(f"{', '.join(both)} set both at the top level and under run:")
        rest = {k: v for k, v in data.items() if k not in top}
        return {**rest, "run": {**run, **top}}

    @field_validator("run")
    @classmethod
    def _no_axes(cls, v: dict[str, Any]) -> dict[str, Any]:
        axes = sorted(set(v) & {*AXES, "correction_kwargs", "name"})
        if axes:
            raise ValueError(
                f"{', '.join(axes)} vary per trial: set them with seeds:, compression: and "
                "correction: (a run's name is its trial key)"
            )
        return v

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError("use letters, digits, '_', '.', '-' (it names a directory)")
        return v

    @field_validator("seeds")
    @classmethod
    def _unique(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"seeds repeat: {v}")
        return v

    @field_validator("rules")
    @classmethod
    def _rules(cls, v: dict[str, Any]) -> dict[str, Any]:
        rules.build(v)  # names, parameters and values, with the rules' own wording
        return v


def _named(where: str, kind: str, name: str, valid: list[str]) -> None:
    try:
        check_name(kind, name, valid)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


# --- trials ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TrialSpec:
    """One Tune trial: who it is, whom it is paired with, and the RunConfig it trains."""

    ident: identity.RunIdentity
    control_key: str | None
    """The paired control's ``trial_key`` (None for a control)."""
    run: dict[str, Any]
    """The resolved ``workers.RunConfig`` dict (what ``RunConfig.from_dict`` receives)."""

    @property
    def trial_key(self) -> str:
        """Stable id of the trial in the sweep (the store's run ``trial_id``)."""
        return self.ident.trial_key

    @property
    def role(self) -> str:
        return self.ident.run_role

    @property
    def seed(self) -> int:
        return self.ident.seed

    @property
    def pair_key(self) -> str:
        return self.ident.pair_key

    command: dict[str, Any] | None = None
    """The command worker (``CommandWorker`` as a dict), or None: the built-in worker."""

    def to_dict(self) -> dict[str, Any]:
        """What a Tune trial's config carries (plain data): keys, labels and the run."""
        return {
            "trial_key": self.trial_key,
            "control_key": self.control_key,
            **self.ident.store_fields(),
            "run": self.run,
            "command": self.command,
            # a named pretrained model's figures (read off its file once per process; a
            # missing package fails here, in one line, before anything launches)
            "model_info": pretrained.model_info(str(self.run.get("model", ""))),
        }


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: its config, its YAML text and its trials, expanded once."""

    config: SweepConfig
    text: str
    trials: tuple[TrialSpec, ...]

    @property
    def steps(self) -> int:
        """Steps per trial (every trial runs the same number)."""
        return int(self.trials[0].run["steps"])


def _trial(
    cfg: SweepConfig, seed: int, role: identity.Role, arm: dict[str, Any], control_key: str | None
) -> TrialSpec:
    d: dict[str, Any] = {**cfg.run, "seed": seed, **arm}
    if cfg.worker is not None:  # a command: its settings are its own, passed through
        d.setdefault("compression_kwargs", {})
        d.setdefault("correction_kwargs", {})
        command = cfg.worker.model_dump()
        ident = identity.of_config({**d, "command": command["command"]}, role=role)
        return TrialSpec(ident=ident, control_key=control_key, run=d, command=command)
    d.setdefault("num_threads", max(1, int(cfg.resources.cpus)))
    if cfg.resources.gpus > 0:
        # Ray sets CUDA_VISIBLE_DEVICES per trial, so "cuda" is the trial's own GPU share
        d.setdefault("device", "cuda")
    try:
        run = RunConfig.from_dict(d).to_dict()
    except ValueError as exc:
        what = "control" if role == "control" else f"{arm['compression']} x {arm['correction']}"
        raise ValueError(f"seed {seed}, {what}: {exc}") from None
    ident = identity.of_config(run, role=role)
    run["name"] = ident.trial_key
    return TrialSpec(ident=ident, control_key=control_key, run=run)


def count_trials(cfg: SweepConfig) -> int:
    """How many trials ``cfg`` expands to (counted, not built)."""
    arms = sum(
        len(c.combos()) * sum(len(k.combos()) for k in cfg.crossed(c)) for c in cfg.compression
    )
    return len(cfg.seeds) * (1 + arms)


def expand(cfg: SweepConfig) -> tuple[TrialSpec, ...]:
    """Trial specs: every seed's control first, then each seed's treatments."""
    n = count_trials(cfg)
    if n > cfg.max_trials:
        raise GapwatchError(
            f"the sweep expands to {n:,} trials, over its limit of {cfg.max_trials:,}: "
            "narrow the grid, or raise the limit with --max-trials (or max_trials:)"
        )
    controls: list[TrialSpec] = []
    treatments: list[TrialSpec] = []
    for seed in cfg.seeds:
        dense = {"compression": identity.DENSE, "correction": identity.NO_CORRECTION}
        control = _trial(cfg, seed, "control", dense, None)
        controls.append(control)
        for comp in cfg.compression:
            for ckw in comp.combos():
                for corr in cfg.crossed(comp):
                    for tkw in corr.combos():
                        arm: dict[str, Any] = {
                            "compression": comp.codec,
                            "compression_kwargs": ckw,
                            "correction": corr.name,
                            "correction_kwargs": tkw,
                        }
                        if comp.layers is not None:
                            arm["compression_layers"] = comp.layers
                        spec = _trial(cfg, seed, "treatment", arm, control.trial_key)
                        treatments.append(spec)
    specs = (*controls, *treatments)
    keys = [s.trial_key for s in specs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise GapwatchError(f"the sweep lists the same trial twice: {', '.join(dup)}")
    return specs


# --- loading and validation ------------------------------------------------------------


def _apply_override(raw: dict[str, Any], item: str) -> None:
    if "=" not in item:
        raise GapwatchError(f"--set {item!r}: write it as key=value, e.g. --set steps=5")
    key, _, text = item.partition("=")
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise GapwatchError(f"--set {item!r}: the key before '=' is empty")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    node = raw
    for p in path[:-1]:
        child = node.get(p)
        if child is None:
            child = node[p] = {}
        if not isinstance(child, dict):
            raise GapwatchError(f"--set {item!r}: {p!r} is not a mapping")
        node = child
    node[path[-1]] = value


def parse_sweep_config(raw: Any, src: str = "sweep config", text: str | None = None) -> Sweep:
    """Validate an already-read mapping and expand it into trials (one ``GapwatchError``
    line for any problem)."""
    if not isinstance(raw, dict):
        raise GapwatchError(f"{src}: expected a mapping of sweep fields at the top level")
    try:
        cfg = SweepConfig.model_validate(raw)
    except ValidationError as exc:
        raise GapwatchError(f"{src}: {describe(exc, SweepConfig)}") from None
    try:
        trials = expand(cfg)
    except ValueError as exc:
        raise GapwatchError(f"{src}: {' '.join(str(exc).split())}") from None
    if text is None or cfg.store is not None:
        # the text is saved in the store: never with a store URL (it may hold a password)
        text = yaml.safe_dump(cfg.model_dump(mode="json", exclude={"store"}), sort_keys=False)
    return Sweep(config=cfg, text=text, trials=trials)


def load_sweep_config(path: Path | str, overrides: Sequence[str] = ()) -> Sweep:
    """Read, override, validate and expand a sweep YAML."""
    p = Path(path)
    if not p.exists():
        raise GapwatchError(
            f"sweep config {p} does not exist; pass a YAML file such as examples/quickstart.yaml"
        )
    if p.is_dir():
        raise GapwatchError(f"sweep config {p} is a directory; pass a YAML file")
    text = p.read_text()
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or "invalid YAML"
        if mark is not None:
            raise GapwatchError(
                f"{p}: YAML syntax error at line {mark.line + 1}, column {mark.column + 1}: {problem}"
            ) from None
        raise GapwatchError(f"{p}: YAML syntax error: {problem}") from None
    if raw is None:
        raise GapwatchError(f"{p} is empty; it needs at least name, seeds, compression, correction")
    if not isinstance(raw, dict):
        raise GapwatchError(f"{p}: expected a mapping of sweep fields at the top level")
    for item in overrides:
        _apply_override(raw, item)
    return parse_sweep_config(raw, str(p), None if overrides else text)
