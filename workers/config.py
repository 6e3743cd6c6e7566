"""``RunConfig``: every setting of one RL run, validated, with two presets.

``RunConfig.from_dict(d)`` is the one way in from YAML/Tune: an optional ``preset`` key
(``quick`` or ``large``) picks the base values, every other key overrides one field, an
unknown key fails naming the valid ones, and an unknown env/codec/correction/sampler name
fails naming the registered ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Final

from workers import codecs, envs, samplers

DTYPES: Final = ("float32", "bfloat16", "float16")

QUICK_CODEC: Final[tuple[str, dict[str, Any]]] = ("topk", {"keep": 0.05})
"""The quick preset's compressed codec, chosen by measurement (bench/worker_bench.py,
bench/ground_truth.py): keep the 5% largest entries of every layer's output per token.
Step-1 gap 0.68 vs 0.0003 dense; with the quick preset it stops solving tasks and calling
the tool within 6 steps (score at or just below zero from then on) while the dense control
learns. Milder codecs (step-1 gap; no correction, seeds 0-1, at the former anchor 0.2):
top-k keep 0.1 (0.39) and 0.2 (0.12) also die, keep 0.35 (0.03) and 0.5 (0.014) stall
near the initial score, 4-bit quantisation (0.004) learns like the control, 2-bit (0.19)
dies."""

PRESETS: Final[dict[str, dict[str, Any]]] = {
    # Tiny model on CPU: what tests, the quickstart sweep and the demo use.
    "quick": {},
    # A real model on a GPU: the seed run's budgets.
    "large": {
        "token_budget": 512,
        "max_interactions": 50,
        "tasks_per_step": 16,
        "group_size": 8,
        "sampler": "vllm",
        "device": "cuda",
        "trainer_dtype": "bfloat16",
        "warm_start_steps": 0,
        "lr": 1e-6,
        "lr_warmup_steps": 10,
        "kl_coef": 0.001,
        "old_logprobs": "trainer",
    },
}


@dataclass
class RunConfig:
    """One RL run. Defaults are the ``quick`` preset.

    The quick preset (``mul`` with 2-digit factors, a warm start that guesses without the
    tool on 70% of demonstrations, lr 6e-4 after a 5-step warm-up, k3 anchor 0.05, PPO ratio
    against the sampler's log-probs, 16 tasks x 4, 30 steps) was chosen by measurement on
    the tiny model so that the dense control clearly learns while ``QUICK_CODEC`` collapses:
    on 8 of 8 seeds the control's mean score over its last 10 steps is 2.4-3.8x its mean
    over steps 1-3 (0.13-0.22 -> 0.49-0.61) and it is never below zero
    (bench/ground_truth.py, bench/results/ground_truth.md). On the former task (2-3 digit
    factors, miscopied answers, anchor 0.2) the control wandered at 0.01-0.19; there,
    without the anchor (lr 6e-4 to 2e-3) or at lr 1e-3 the control decayed to zero.
    """

    name: str = "run"
    """Label of the run; part of its trial id."""
    env: str = "mul"
    """Environment name (``workers.envs.names()``)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the environment (e.g. ``max_digits``)."""
    model: str = "tiny"
    """``tiny`` (built-in ~0.8M-parameter Llama, char tokenizer) or a local HF model directory."""
    seed: int = 0
    """Seed of task draws, sampling and initialisation of the RL run."""
    steps: int = 30
    """Number of GRPO steps."""
    tasks_per_step: int = 16
    """Distinct tasks drawn per step (the number of groups)."""
    group_size: int = 4
    """Trajectories per task (G); advantages are relative within a group."""
    max_interactions: int = 3
    """Most actions per trajectory (1..50); out of interactions scores 0."""
    token_budget: int = 48
    """Most tokens per action; an action cut here is unparseable."""
    temperature: float = 1.0
    """Sampling temperature; sampler and trainer log-probs are both taken after it."""
    lr: float = 6e-4
    """AdamW learning rate of the RL updates."""
    clip_eps: float = 0.2
    """PPO clip range: ratios outside [1 - eps, 1 + eps] stop contributing gradient."""
    kl_coef: float = 0.05
    """Coefficient of the k3 KL anchor to the initial policy (0 disables the reference model).
    0.05 by measurement (8 seeds, quick preset): the control's last-10 mean score is 2.4-3.8x
    its steps 1-3 mean at 0.05, 1.98-3.4x at 0.2 (seed 7 under 2x); the compressed run
    collapses at both."""
    old_logprobs: str = "sampler"
    """Denominator of the PPO ratio: ``trainer`` (recomputed by the trainer's forward before
    the update, verl's decoupled mode) or ``sampler`` (the sampler's log-probs, verl's
    bypass mode: the ratio then carries the whole train-inference gap)."""
    minibatches: int = 2
    """Optimizer steps per GRPO step (the batch is split by trajectory)."""
    lr_warmup_steps: int = 5
    """Linear learning-rate warm-up over this many GRPO steps (0: constant lr)."""
    micro_batch: int | None = None
    """Trajectories per forward/backward (gradient accumulation); None: a whole minibatch at
    once. Bounds memory for long histories and large vocabularies; results are unchanged."""
    max_grad_norm: float | None = 1.0
    """Gradient clipping norm; None for no clipping."""
    adv_eps: float = 1e-6
    """eps in (r - mean) / (std + eps)."""
    compression: str = "none"
    """Codec of the trainer's forward (``workers.codecs.names()``); ``none`` = dense control."""
    compression_kwargs: dict[str, Any] = field(default_factory=dict)
    """Strength of the codec (``bits`` for quant, ``keep`` for topk)."""
    compression_layers: str | int = "all"
    """Which decoder-layer outputs are compressed: ``all`` or every n-th layer (an int)."""
    correction: str = "none"
    """Correction strategy (``correction.strategies.names()``)."""
    correction_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the correction strategy (e.g. ``C``)."""
    sampler: str = "torch"
    """Sampler engine (``workers.samplers.names()``)."""
    sampler_dtype: str = "bfloat16"
    """Sampler weights' dtype: bfloat16 as vLLM serves; float32 to match the trainer exactly."""
    trainer_dtype: str = "float32"
    """Trainer weights' dtype."""
    device: str = "cpu"
    """Torch device of trainer and torch sampler (``cpu``, ``cuda``, ``cuda:1``)."""
    num_threads: int | None = None
    """torch CPU threads (None: leave torch's default); Ray trials use 1."""
    warm_start_steps: int = 600
    """Supervised steps on demonstrations before RL (0: none); cached on disk."""
    warm_start_lr: float = 3e-3
    """Peak learning rate of the warm start (cosine decay)."""
    warm_start_batch: int = 32
    """Demonstrations per warm-start step."""
    warm_start_wrong_frac: float = 0.7
    """Fraction of wrong demonstrations, wrong in the env's ``mistake`` way (leaves RL room).
    0.7 by measurement with ``mul`` (guesses): the warm-started policy calls the tool in about
    a quarter of episodes and scores 0.09-0.23 at step 1, and RL takes it to over 0.9 tool
    calls per episode and a score of 0.5-0.6; at 0.6 it starts at 0.38-0.43 over steps 1-3
    (ends 0.66-0.74, under 2x); at 0.8 the warm start does not learn to copy (score 0)."""
    warm_start_seed: int = 0
    """Seed of the warm start (shared by all runs, so pairs start from the same weights)."""

    def __post_init__(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(msg)

        self._coerce_types()

        for k in ("steps", "tasks_per_step", "token_budget", "minibatches", "warm_start_batch"):
            v = getattr(self, k)
            need(isinstance(v, int) and v >= 1, f"{k} must be a positive integer, got {v!r}")
        need(
            isinstance(self.group_size, int) and self.group_size >= 2,
            f"group_size must be an integer >= 2 (advantages are relative within a group), got {self.group_size!r}",
        )
        need(
            isinstance(self.max_interactions, int) and 1 <= self.max_interactions <= 50,
            f"max_interactions must be an integer in 1..50, got {self.max_interactions!r}",
        )
        need(
            isinstance(self.warm_start_steps, int) and self.warm_start_steps >= 0,
            "warm_start_steps must be >= 0",
        )
        need(self.temperature > 0, f"temperature must be > 0, got {self.temperature}")
        need(self.lr > 0, f"lr must be > 0, got {self.lr}")
        need(0 < self.clip_eps < 1, f"clip_eps must be in (0, 1), got {self.clip_eps}")
        need(self.lr_warmup_steps >= 0, f"lr_warmup_steps must be >= 0, got {self.lr_warmup_steps}")
        need(self.kl_coef >= 0, f"kl_coef must be >= 0, got {self.kl_coef}")
        need(0 <= self.warm_start_wrong_frac <= 1, "warm_start_wrong_frac must be in [0, 1]")
        need(
            self.max_grad_norm is None or self.max_grad_norm > 0,
            "max_grad_norm must be > 0 or null",
        )
        need(self.num_threads is None or self.num_threads >= 1, "num_threads must be >= 1 or null")
        need(self.micro_batch is None or self.micro_batch >= 1, "micro_batch must be >= 1 or null")
        need(
            self.old_logprobs in ("trainer", "sampler"),
            f"old_logprobs must be 'trainer' or 'sampler', got {self.old_logprobs!r}",
        )
        for k in ("sampler_dtype", "trainer_dtype"):
            need(
                getattr(self, k) in DTYPES,
                f"{k} must be one of {', '.join(DTYPES)}, got {getattr(self, k)!r}",
            )
        need(
            self.sampler in samplers.names(),
            f"unknown sampler {self.sampler!r}; valid: {', '.join(samplers.names())}",
        )
        # Names and arguments: building them validates them (each raises one clear ValueError).
        envs.get(self.env, **self.env_kwargs)
        codecs.get(self.compression, **self.compression_kwargs)
        codecs.boundaries(4, self.compression_layers)
        from correction import strategies

        strategies.get(self.correction, **self.correction_kwargs)

    def _coerce_types(self) -> None:
        """Check each field against its annotation; YAML's ``2e-4`` (a string) becomes a float."""
        for f in dataclasses.fields(self):
            v, kinds = getattr(self, f.name), str(f.type).replace(" ", "").split("|")
            if v is None and "None" in kinds:
                continue
            if "float" in kinds and isinstance(v, str):
                with contextlib.suppress(ValueError):
                    v = float(v)
            if "float" in kinds and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            ok = any(
                (k == "float" and isinstance(v, float))
                or (k == "int" and isinstance(v, int) and not isinstance(v, bool))
                or (k == "str" and isinstance(v, str))
                or (k.startswith("dict") and isinstance(v, dict))
                for k in kinds
            )
            if not ok:
                raise ValueError(f"{f.name} must be {' or '.join(kinds)}, got {v!r}")
            setattr(self, f.name, v)

    @classmethod
    def field_names(cls) -> list[str]:
        """Every settable key (plus ``preset``)."""
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """Build from a plain dict: optional ``preset`` base, then field overrides."""
        if not isinstance(d, dict):
            raise ValueError(
                f"a run config must be a mapping of field: value, got {type(d).__name__}"
            )
        d = dict(d)
        preset = d.pop("preset", "quick")
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
        valid = cls.field_names()
        unknown = sorted(set(d) - set(valid))
        if unknown:
            raise ValueError(
                f"unknown run config key(s) {', '.join(unknown)}; valid: preset, {', '.join(valid)}"
            )
        return cls(**{**PRESETS[preset], **d})

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> RunConfig:
        """``quick`` or ``large``, with field overrides."""
        return cls.from_dict({"preset": name, **overrides})

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of every field."""
        return dataclasses.asdict(self)

    @property
    def role(self) -> str:
        """Derived: ``control`` for a dense run, else ``treatment``."""
        return "control" if self.compression == "none" else "treatment"

    def pair_key(self) -> str:
        """Derived: identical for a control and its treatments (same everything but codec/correction)."""
        skip = {
            "name",
            "compression",
            "compression_kwargs",
            "compression_layers",
            "correction",
            "correction_kwargs",
        }
        same = {k: v for k, v in self.to_dict().items() if k not in skip}
        return f"{self.env}-s{self.seed}-{_digest(same)[:8]}"

    def trial_id(self) -> str:
        """Derived: ``<name>-<seed>-<hash of every field>``."""
        return f"{self.name}-{self.seed}-{_digest(self.to_dict())[:8]}"


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()
