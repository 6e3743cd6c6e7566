"""Sweep configuration: a YAML file -> a validated ``SweepConfig`` -> a list of trial specs.

What is here:
- ``SweepConfig`` (pydantic v2): every field a sweep YAML may hold, documented once.
  Unknown keys are rejected; unknown correction, codec, rule or environment names fail
  listing the valid ones, read from the registries (``correction.strategies``,
  ``workers.codecs``, ``workers.envs``, ``orchestrator.rules``).
- ``load_sweep_config(path, overrides)``: read + override + validate; every problem is
  one ``GapwatchError`` line (a YAML syntax error names its line, a missing file says so).
- ``expand(cfg)``: per seed one dense CONTROL and one TREATMENT per
  (codec strength, correction, threshold combination); each treatment carries its
  control's trial key. Controls come first so they are scheduled before treatments.
- ``run_config_dict(cfg, ...)``: the one place sweep fields map onto ``workers.RunConfig``.

What is not here: running anything (``orchestrator.sweep``), the rules themselves
(``orchestrator.rules``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestrator.errors import GapwatchError

Role = Literal["control", "treatment"]
DENSE_CODEC = "none"
"""Codec name of the dense (uncompressed) trainer forward; every control uses it."""
NO_CORRECTION = "none"
"""Correction name that leaves every token's weight at 1; every control uses it."""

Scalar = int | float | str | bool


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Budgets(_Strict):
    """Per-trajectory limits of the agentic environment (None: the worker preset's)."""

    tokens_per_interaction: int | None = Field(default=None, gt=0)
    """Per-interaction token budget: an action cut here is unparseable (-0.1)."""
    max_interactions: int | None = Field(default=None, gt=0, le=50)
    """Most interactions (tool calls + final answer) per trajectory."""


class Resources(_Strict):
    """What one trial asks Ray for."""

    cpus: float = Field(default=1.0, gt=0)
    """CPU cores per trial (torch in the trial uses this many threads)."""
    gpus: float = Field(default=0.0, ge=0)
    """GPU fraction per trial (0.5 puts two trials on one GPU)."""


class Compression(_Strict):
    """One compressed-trainer setting: a codec and its strength; a list value sweeps it.

    Any key besides ``codec`` and ``layers`` is the codec's strength keyword, e.g.
    ``{codec: quant, bits: 2}`` or ``{codec: topk, keep: [0.1, 0.05]}``.
    """

    codec: str
    """Codec name from ``workers.codecs.names()``."""
    params: dict[str, Scalar | list[Scalar]] = Field(default_factory=dict)
    """The codec's keyword strength(s) (``bits``, ``keep``); a list sweeps it."""
    layers: str | int | None = None
    """Which layer outputs are compressed (``all`` or every n-th); None: the worker's default."""

    @model_validator(mode="before")
    @classmethod
    def _gather_params(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"codec": data}
        if isinstance(data, dict) and "params" not in data:
            rest = {k: v for k, v in data.items() if k not in ("codec", "layers")}
            out = {k: data[k] for k in ("codec", "layers") if k in data}
            return {**out, "params": rest}
        return data

    def combos(self) -> list[dict[str, Scalar]]:
        """Every strength combination this entry sweeps, in YAML order (derived)."""
        return _combos(self.params)


def _combos(grid: dict[str, Scalar | list[Scalar]]) -> list[dict[str, Scalar]]:
    keys = list(grid)
    values = [v if isinstance(v, list) else [v] for v in grid.values()]
    return [dict(zip(keys, c, strict=True)) for c in itertools.product(*values)]


class Correction(_Strict):
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


class SweepConfig(_Strict):
    """A paired dense/compressed sweep, as written in a sweep YAML."""

    name: str
    """Sweep name: the store's key for it (``--resume`` continues the sweep of this name)."""
    environment: str
    """Agentic environment from ``workers.envs.names()``."""
    model: str = "tiny"
    """The embedded tiny model (``tiny``) or a local directory ``transformers`` loads."""
    seeds: list[int] = Field(min_length=1)
    """One pair of runs (control + treatments) per seed."""
    steps: int = Field(gt=0)
    """GRPO steps per trial (the budget each trial may use)."""
    batch_size: int | None = Field(default=None, gt=0)
    """Tasks drawn per step (None: the worker preset's)."""
    group_size: int | None = Field(default=None, gt=1)
    """Trajectories per task, GRPO's G (None: the worker preset's)."""
    budgets: Budgets = Field(default_factory=Budgets)
    compression: list[Compression] = Field(min_length=1)
    """Compressed-trainer settings; each is crossed with every correction."""
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
    resources: Resources = Field(default_factory=Resources)
    worker: dict[str, Any] = Field(default_factory=dict)
    """Extra ``workers.RunConfig`` fields (lr, sampler, kl_coef, ...), validated by it."""

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


# --- trial specs ---------------------------------------------------------------------


def _label(name: str, kw: dict[str, Scalar]) -> str:
    if not kw:
        return name
    return f"{name}(" + ",".join(f"{k}={v}" for k, v in kw.items()) + ")"


@dataclass(frozen=True)
class TrialSpec:
    """One Tune trial: its role, its pairing and the RunConfig dict it trains."""

    trial_key: str
    """Stable id of the trial in the sweep (the store's run ``trial_id``)."""
    role: Role
    pair_key: str
    """seed + environment + model: a treatment and its control share it."""
    seed: int
    codec: str
    codec_kwargs: dict[str, Scalar]
    correction: str
    thresholds: dict[str, Scalar]
    control_key: str | None
    """The paired control's ``trial_key`` (None for a control)."""
    run: dict[str, Any] = field(default_factory=dict)
    """What ``workers.RunConfig.from_dict`` receives."""

    @property
    def compression_label(self) -> str:
        """``quant(bits=2)`` (derived; the store's compression column)."""
        return _label(self.codec, self.codec_kwargs)

    @property
    def correction_label(self) -> str:
        """``tis(C=2)`` (derived; the store's correction column)."""
        return _label(self.correction, self.thresholds)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "compression_label": self.compression_label,
            "correction_label": self.correction_label,
        }


def run_config_dict(
    cfg: SweepConfig,
    spec_name: str,
    *,
    seed: int,
    codec: str,
    codec_kwargs: dict[str, Scalar],
    layers: str | int | None,
    correction: str,
    thresholds: dict[str, Scalar],
) -> dict[str, Any]:
    """The ``workers.RunConfig`` dict of one trial: sweep fields, then ``worker:`` extras."""
    d: dict[str, Any] = {
        "name": spec_name,
        "env": cfg.environment,
        "model": cfg.model,
        "seed": seed,
        "steps": cfg.steps,
        "compression": codec,
        "compression_kwargs": dict(codec_kwargs),
        "correction": correction,
        "correction_kwargs": dict(thresholds),
        "num_threads": max(1, int(cfg.resources.cpus)),
    }
    # Unset sizes and budgets keep the worker preset's values (workers.config.PRESETS)
    optional = {
        "tasks_per_step": cfg.batch_size,
        "group_size": cfg.group_size,
        "token_budget": cfg.budgets.tokens_per_interaction,
        "max_interactions": cfg.budgets.max_interactions,
        "compression_layers": layers,
    }
    d.update({k: v for k, v in optional.items() if v is not None})
    if cfg.resources.gpus > 0 and "device" not in cfg.worker:
        # Ray sets CUDA_VISIBLE_DEVICES per trial, so "cuda" is the trial's own GPU share
        d["device"] = "cuda"
    clash = sorted(set(cfg.worker) & (set(d) - {"num_threads"}))
    if clash:
        raise GapwatchError(
            f"worker: {', '.join(clash)} is a sweep field (or set per trial); set it there, "
            "not under worker:"
        )
    return {**d, **cfg.worker}


def _slug(v: object) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "", str(v))


def _key_part(name: str, kw: dict[str, Scalar]) -> str:
    return name + "".join(f"_{k}{_slug(v)}" for k, v in kw.items())


def expand(cfg: SweepConfig) -> list[TrialSpec]:
    """Trial specs: every seed's control first, then each seed's treatments."""
    controls: list[TrialSpec] = []
    treatments: list[TrialSpec] = []
    for seed in cfg.seeds:
        pair_key = f"{cfg.environment}/{cfg.model}/seed{seed}"
        control_key = f"s{seed}-control"
        dense: dict[str, Any] = {
            "seed": seed,
            "codec": DENSE_CODEC,
            "codec_kwargs": {},
            "correction": NO_CORRECTION,
            "thresholds": {},
        }
        controls.append(
            TrialSpec(
                trial_key=control_key,
                role="control",
                pair_key=pair_key,
                control_key=None,
                run=run_config_dict(cfg, control_key, layers=None, **dense),
                **dense,
            )
        )
        for comp in cfg.compression:
            for ckw in comp.combos():
                for corr in cfg.correction:
                    for tkw in corr.combos():
                        key = "-".join(
                            [f"s{seed}", _key_part(comp.codec, ckw), _key_part(corr.name, tkw)]
                        )
                        arm: dict[str, Any] = {
                            "seed": seed,
                            "codec": comp.codec,
                            "codec_kwargs": ckw,
                            "correction": corr.name,
                            "thresholds": tkw,
                        }
                        treatments.append(
                            TrialSpec(
                                trial_key=key,
                                role="treatment",
                                pair_key=pair_key,
                                control_key=control_key,
                                run=run_config_dict(cfg, key, layers=comp.layers, **arm),
                                **arm,
                            )
                        )
    specs = controls + treatments
    keys = [s.trial_key for s in specs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise GapwatchError(f"the sweep lists the same trial twice: {', '.join(dup)}")
    return specs


# --- loading and validation ------------------------------------------------------------


def _registry_names(kind: str) -> list[str]:
    """Valid names of one registry; the single source for validation messages."""
    if kind == "correction":
        from correction import strategies

        return list(strategies.names())
    if kind == "codec":
        from workers import codecs

        return list(codecs.names())
    if kind == "environment":
        from workers import envs

        return list(envs.names())
    from orchestrator import rules

    return list(rules.names())


def _check_name(kind: str, name: str, where: str) -> None:
    valid = _registry_names(kind)
    if name not in valid:
        raise GapwatchError(f"{where}: unknown {kind} {name!r}; valid: {', '.join(valid)}")


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


def _one_line_validation(src: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key (remove it or check its spelling)"
        elif err["type"] == "missing":
            msg = "required field missing"
        parts.append(f"{loc}: {msg}")
    return f"{src}: " + "; ".join(parts)


def parse_sweep_config(raw: Any, src: str = "sweep config") -> SweepConfig:
    """Validate an already-read mapping (names checked against the registries)."""
    if not isinstance(raw, dict):
        raise GapwatchError(f"{src}: expected a mapping of sweep fields at the top level")
    try:
        cfg = SweepConfig.model_validate(raw)
    except ValidationError as exc:
        raise GapwatchError(_one_line_validation(src, exc)) from None
    _check_name("environment", cfg.environment, f"{src}: environment")
    for i, comp in enumerate(cfg.compression):
        _check_name("codec", comp.codec, f"{src}: compression[{i}].codec")
    for i, corr in enumerate(cfg.correction):
        _check_name("correction", corr.name, f"{src}: correction[{i}].name")
        _check_correction_kwargs(corr, f"{src}: correction[{i}]")
    _check_rules(cfg.rules, src)
    specs = expand(cfg)
    _check_run_configs(specs, src)
    return cfg


def _check_correction_kwargs(corr: Correction, where: str) -> None:
    from correction import strategies

    for kw in corr.combos():
        try:
            strategies.get(corr.name, **kw)
        except (TypeError, ValueError) as exc:
            raise GapwatchError(f"{where} {corr.name} {kw}: {' '.join(str(exc).split())}") from None


def _check_rules(settings: dict[str, Any], src: str) -> None:
    from orchestrator import rules

    try:
        rules.build(settings)
    except (TypeError, ValueError) as exc:
        raise GapwatchError(f"{src}: rules: {' '.join(str(exc).split())}") from None


def _check_run_configs(specs: Sequence[TrialSpec], src: str) -> None:
    from workers import RunConfig

    seen: set[str] = set()
    for spec in specs:
        key = repr(sorted(spec.run.items()))
        if key in seen:
            continue
        seen.add(key)
        try:
            RunConfig.from_dict(dict(spec.run))
        except (TypeError, ValueError) as exc:
            raise GapwatchError(
                f"{src}: trial {spec.trial_key}: {' '.join(str(exc).split())}"
            ) from None


def load_sweep_config(path: Path | str, overrides: Sequence[str] = ()) -> tuple[SweepConfig, str]:
    """Read, override and validate a sweep YAML; returns the config and the YAML text."""
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
        raise GapwatchError(
            f"{p} is empty; it needs at least name, environment, seeds, steps, compression, correction"
        )
    if not isinstance(raw, dict):
        raise GapwatchError(f"{p}: expected a mapping of sweep fields at the top level")
    for item in overrides:
        _apply_override(raw, item)
    cfg = parse_sweep_config(raw, str(p))
    if overrides:
        text = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
    return cfg, text
