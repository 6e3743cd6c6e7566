"""``RunConfig``: every setting of one RL run, validated by pydantic, with three presets.

``RunConfig.from_dict(d)`` is the one way in from YAML/Tune: an optional ``preset`` key
(``quick``, ``long``, ``large`` or ``smollm2``) picks the base values, every other key overrides one
field, an unknown key fails naming the valid ones, and an unknown env/codec/correction/
sampler name fails naming the registered ones (wording: ``workers.validation``).

A validated config is *resolved*: ``compression_kwargs`` and ``correction_kwargs`` hold
every parameter of the codec and the strategy, defaults filled in (``correction: tis``
comes out with ``correction_kwargs: {C: 2.0}``), so the stored config says exactly what
ran and ``store.identity`` labels it the same however it was written.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from gapwatch.workers import codecs, envs, samplers
from gapwatch.workers.sampling import DTYPE
from gapwatch.workers.validation import (
    ConfigError,
    Float,
    Int,
    Strict,
    check_name,
    describe,
    resolve_params,
    unknown_keys,
)

DTYPES: Final = tuple(DTYPE)
Dtype = Literal["float32", "bfloat16", "float16"]

QUICK_CODEC: Final[tuple[str, dict[str, Any]]] = ("topk", {"keep": 0.05})
"""The quick preset's compressed codec, chosen by measurement (bench/worker_bench.py,
bench/ground_truth.py): keep the 5% largest entries of every layer's output per token.
Step-1 gap 0.68 vs 0.0003 dense; with the quick preset it stops solving tasks and calling
the tool within 6 steps (score at or just below zero from then on) while the dense control
learns. Milder codecs (step-1 gap; no correction, seeds 0-1, at the former anchor 0.2):
top-k keep 0.1 (0.39) and 0.2 (0.12) also die, keep 0.35 (0.03) and 0.5 (0.014) stall
near the initial score, 4-bit quantisation (0.004) learns like the control, 2-bit (0.19)
dies."""

GATE_SUCCESS: Final = 0.05
"""Default floor of a built warm start's held-out success rate (``warm_start_min_success``).
The quick preset's config, built from scratch: on an Intel Xeon with 1 torch thread it
solves 0 of 128 tasks (the build that stopped every dense control of ``make demo`` at step
3), with 2 threads 15% and with 4 threads 9% (issue 19's measurements); on an AMD EPYC
without bf16 the same 16% under 1, 2 and 4 threads (``bench/warmstart_bench.py``), and
its dense controls learn on 7 of 8 seeds (``bench/learning_bench.py``). 5% passes the
builds seen to learn (15%, 16%) and the 9% one, and fails the one that solves nothing."""
GATE_COPIED: Final = 0.5
"""Default floor of the share of answers after a tool call that copy its result
(``warm_start_min_copied``): the Xeon's 1-thread build calls the tool in 24% of episodes
but never copies the result; the shipped build copies it in 74% (256 held-out episodes)."""

PRESETS: Final[dict[str, dict[str, Any]]] = {
    # Tiny model on CPU: what tests, the quickstart sweep and the demo use.
    "quick": {},
    # Tiny model on CPU, long horizon: ``add_chain`` (8-12 tool calls an episode, each
    # built from the previous result). Fewer tasks per step and a shorter warm start than
    # quick, for the CPU budget (an episode is ~10x quick's tokens); its warm start is
    # shipped (workers/assets/long). lr 2e-4 and the warm start's 70% guesses at batch 32,
    # by measurement (on an Intel Xeon, 1 thread; screening runs with
    # `bench/learning_bench.py --preset long --threads 1 --set KEY=VALUE ...`): with 60%
    # guesses at batch 16 (the start copies the result into 79% of answers) at quick's lr
    # 6e-4 the control's score peaked by step 5 and fell back as its copies broke (1 of 8
    # seeds met the learning criteria, on an AMD EPYC); at 3e-4 seed 1 ended at 1.1x its
    # start, at 1.5e-4 1.8x, at 2e-4 1.65x (3 of seeds 0-3 met them). With 70% guesses at
    # batch 32 (copies into 95%) at 2e-4, 6 of 8 did (bench/results/ground_truth-long.md).
    "long": {
        "env": "add_chain",
        "max_interactions": 14,
        "tasks_per_step": 8,
        "lr": 2e-4,
        "warm_start_steps": 500,
        "warm_start_batch": 32,
        "warm_start_wrong_frac": 0.7,
    },
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
        "drift_reference": False,
    },
    # A real pretrained model on CPU: SmolLM2-135M-Instruct (workers.pretrained) on mul in
    # its chat template with two worked examples (workers.formats). Each choice by
    # measurement, `bench/real_model_bench.py` (AMD EPYC, 1 thread, seed 0):
    # - mul with 2 examples starts the dense policy at 0.38-0.44 (its 32 episodes of step 1;
    #   --start: 0 or 1 example: no action parses; 3: 0.68; mul_chain: at most 0 with 3);
    # - the budget: an action is 10-13 tokens; 24 cuts 1 in 47 at the start;
    # - a float32 sampler: 8% of the dequantized weights sit exactly on a bfloat16 rounding
    #   midpoint (--codecs), so a bfloat16 copy rounds each of them up or down by the sign of
    #   the first update, a full ulp, many times the update itself: one step of every layer
    #   at lr 1e-6 took a bf16 sampler's score from 0.44 to 0.91, a float32 one's barely
    #   (--screen sampler_dtype=bfloat16 train_layers=null lr=1e-6, and the same in float32);
    # - the top 6 of 30 layers trained at lr 2e-5, one update a step, no KL anchor: the
    #   control rises from 0.38 to 0.77-0.90 by steps 7-10 (--screen); at lr 1e-6 it
    #   wandered at 0.35-0.61 for 12 steps; training every layer costs 1.7x a step;
    # - the PPO ratio against the trainer's own log-probs before the update (verl's
    #   decoupled mode, the large preset's): the gap enters the loss through the correction
    #   weights only. Against the sampler's (the quick preset's bypass mode) the clip holds
    #   most of the strong codec's tokens, and its run stalled at its start (0.2-0.6 for 15
    #   steps) whatever the correction; in this mode it learns, slower than the control
    #   (--screen);
    # - 8 tasks x 4 a step, 15 steps: about 30 s a step on one core, so the 5-trial sweep,
    #   2 trials at a time, fits the bench's hour with and without stops.
    "smollm2": {
        "model": "smollm2-135m",
        "env": "mul",
        "shots": 2,
        "token_budget": 24,
        "max_interactions": 3,
        "tasks_per_step": 8,
        "group_size": 4,
        "steps": 15,
        "warm_start_steps": 0,
        "sampler_dtype": "float32",
        "lr": 2e-5,
        "lr_warmup_steps": 0,
        "kl_coef": 0.0,
        "drift_reference": False,
        "old_logprobs": "trainer",
        "minibatches": 1,
        "train_layers": 6,
    },
}


class RunConfig(Strict):
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
    """Label of the run (shown in progress lines; not part of its identity)."""
    env: str = "mul"
    """Environment name (``workers.envs.names()``)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the environment (e.g. ``max_digits``)."""
    model: str = "tiny"
    """``tiny`` (built-in ~0.8M-parameter Llama, char tokenizer), a named pretrained model
    (``workers.pretrained``: ``smollm2-135m``) or a local HF model directory."""
    shots: Int = Field(default=0, ge=0, le=16)
    """Worked examples before each task (the env's ideal episodes, the same in every run and
    step; ``workers.formats``): chat turns for a model with a chat template, text before
    the task otherwise. 0 for the tiny model, which is warm-started instead."""
    seed: Int = 0
    """Seed of task draws, sampling and initialisation of the RL run."""
    steps: Int = Field(default=30, ge=1, le=1_000_000)
    """Number of GRPO steps (at most a million)."""
    tasks_per_step: Int = Field(default=16, ge=1, le=4096)
    """Distinct tasks drawn per step (the number of groups; at most 4096)."""
    group_size: Int = Field(default=4, ge=2, le=1024)
    """Trajectories per task (G, 2 to 1024): advantages are relative within a group."""
    max_interactions: Int = Field(default=3, ge=1, le=50)
    """Most actions per trajectory (1..50); out of interactions scores 0."""
    token_budget: Int = Field(default=48, ge=1, le=131_072)
    """Most tokens per action (at most 131072); an action cut here is unparseable."""
    temperature: Float = Field(default=1.0, gt=0)
    """Sampling temperature; sampler and trainer log-probs are both taken after it."""
    lr: Float = Field(default=6e-4, gt=0)
    """AdamW learning rate of the RL updates."""
    clip_eps: Float = Field(default=0.2, gt=0, lt=1)
    """PPO clip range: ratios outside [1 - eps, 1 + eps] stop contributing gradient."""
    kl_coef: Float = Field(default=0.05, ge=0)
    """Coefficient of the k3 KL anchor to the initial policy (0 disables the reference model).
    0.05 by measurement (8 seeds, quick preset): the control's last-10 mean score is 2.4-3.8x
    its steps 1-3 mean at 0.05, 1.98-3.4x at 0.2 (seed 7 under 2x); the compressed run
    collapses at both."""
    drift_reference: bool = True
    """Keep the frozen reference (the initial policy) when ``kl_coef`` is 0, for the
    ``ref_drift`` diagnostics only (tails, ESS and mean of log pi_theta / pi_ref per
    slice); with ``kl_coef`` > 0 it is kept anyway and they are always reported. Costs a
    copy of the weights and one no-grad forward per step (the tiny model: 3 MB and about
    a tenth of a step); never changes the training. False (the ``large`` preset): no
    copy, and no ``ref_drift`` figures while ``kl_coef`` is 0."""
    old_logprobs: Literal["trainer", "sampler"] = "sampler"
    """Denominator of the PPO ratio: ``trainer`` (recomputed by the trainer's forward before
    the update, verl's decoupled mode) or ``sampler`` (the sampler's log-probs, verl's
    bypass mode: the ratio then carries the whole train-inference gap)."""
    minibatches: Int = Field(default=2, ge=1)
    """Optimizer steps per GRPO step (the batch is split by trajectory)."""
    lr_warmup_steps: Int = Field(default=5, ge=0)
    """Linear learning-rate warm-up over this many GRPO steps (0: constant lr)."""
    train_layers: Int | None = Field(default=None, ge=1)
    """Train only the top n decoder layers and the final norm (embeddings and lower layers
    frozen, so the backward pass stops early); None: every parameter. The codec still
    compresses the layers chosen by ``compression_layers``, frozen or not."""
    micro_batch: Int | None = Field(default=None, ge=1)
    """Trajectories per forward/backward (gradient accumulation); None: a whole minibatch at
    once. Bounds memory for long histories and large vocabularies; results are unchanged."""
    max_grad_norm: Float | None = Field(default=1.0, gt=0)
    """Gradient clipping norm; None for no clipping."""
    adv_eps: Float = Field(default=1e-6, gt=0)
    """eps in (r - mean) / (std + eps)."""
    compression: str = "none"
    """Codec of the trainer's forward (``workers.codecs.names()``); ``none`` = dense control."""
    compression_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Strength of the codec (``bits`` for quant, ``keep`` for topk); resolved: every
    parameter of the codec, defaults filled in."""
    compression_layers: Literal["all"] | Int = "all"
    """Which decoder-layer outputs are compressed: ``all`` or every n-th layer (an int >= 1)."""
    correction: str = "none"
    """Correction strategy (``correction.strategies.names()``)."""
    correction_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Thresholds of the correction strategy (e.g. ``C``); resolved like
    ``compression_kwargs`` (a threshold that is off, such as ``veto``, is left out)."""
    sampler: str = "torch"
    """Sampler engine (``workers.samplers.names()``)."""
    sampler_dtype: Dtype = "bfloat16"
    """Sampler weights' dtype: bfloat16 as vLLM serves; float32 to match the trainer exactly."""
    trainer_dtype: Dtype = "float32"
    """Trainer weights' dtype."""
    device: str = "cpu"
    """Torch device of trainer and torch sampler (``cpu``, ``cuda``, ``cuda:1``)."""
    num_threads: Int | None = Field(default=None, ge=1)
    """torch CPU threads (None: leave torch's default); Ray trials use their CPU share."""
    warm_start_steps: Int = Field(default=600, ge=0)
    """Supervised steps on demonstrations before RL (0: none); cached on disk."""
    warm_start_lr: Float = Field(default=3e-3, gt=0)
    """Peak learning rate of the warm start (cosine decay)."""
    warm_start_batch: Int = Field(default=32, ge=1)
    """Demonstrations per warm-start step."""
    warm_start_wrong_frac: Float = Field(default=0.7, ge=0, le=1)
    """Fraction of wrong demonstrations, wrong in the env's ``mistake`` way (leaves RL room).
    0.7 by measurement with ``mul`` (guesses): the warm-started policy calls the tool in about
    a quarter of episodes and scores 0.09-0.23 at step 1, and RL takes it to over 0.9 tool
    calls per episode and a score of 0.5-0.6; at 0.6 it starts at 0.38-0.43 over steps 1-3
    (ends 0.66-0.74, under 2x); at 0.8 the warm start does not learn to copy (score 0)."""
    warm_start_seed: Int = 0
    """Seed of the warm start (shared by all runs, so pairs start from the same weights)."""
    warm_start_min_success: Float | None = Field(default=GATE_SUCCESS, ge=0, le=1)
    """Quality gate of a warm start built at run time: after the supervised pass the policy
    plays 128 held-out tasks (``workers.probe``); below this success rate it trains on
    (up to two more rounds of half the steps), then fails in one line. None: no gate.
    The quick preset's start is shipped, not built (``workers/assets/quick``)."""
    warm_start_min_copied: Float | None = Field(default=GATE_COPIED, ge=0, le=1)
    """Gate, as ``warm_start_min_success``: the share of answers after a tool call that copy
    its result. None: not checked."""

    @field_validator("compression_layers")
    @classmethod
    def _layers(cls, v: str | int) -> str | int:
        if isinstance(v, int) and v < 1:
            raise ValueError(f"must be 'all' or every n-th layer with n >= 1, got {v}")
        return v

    @field_validator("sampler")
    @classmethod
    def _sampler(cls, v: str) -> str:
        return check_name("sampler", v, samplers.names())

    @model_validator(mode="after")
    def _resolve_parts(self) -> RunConfig:
        """Check the named parts and fill in their parameters' defaults."""
        from gapwatch.correction import strategies

        check_name("env", self.env, envs.names())
        envs.get(self.env, **self.env_kwargs)
        self.compression_kwargs = _resolved(
            "compression", self.compression, self.compression_kwargs, codecs
        )
        self.correction_kwargs = _resolved(
            "correction", self.correction, self.correction_kwargs, strategies
        )
        return self

    @classmethod
    def field_names(cls) -> list[str]:
        """Every settable key (plus ``preset``)."""
        return list(cls.model_fields)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """Build from a plain dict: optional ``preset`` base, then field overrides.

        Every problem is one :class:`workers.validation.ConfigError` (a ValueError) line.
        """
        if not isinstance(d, dict):
            raise ConfigError(
                f"a run config must be a mapping of field: value, got {type(d).__name__}"
            )
        d = dict(d)
        preset = d.pop("preset", "quick")
        try:
            unknown_keys("key", d, cls.field_names())
            check_name("preset", preset, PRESETS)
            return cls.model_validate({**PRESETS[preset], **d})
        except ValidationError as exc:
            raise ConfigError(describe(exc, cls)) from None
        except ValueError as exc:
            raise ConfigError(" ".join(str(exc).split())) from None

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> RunConfig:
        """``quick``, ``long``, ``large`` or ``smollm2``, with field overrides."""
        return cls.from_dict({"preset": name, **overrides})

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of every field (resolved)."""
        return self.model_dump(mode="json")


def _resolved(kind: str, name: str, given: dict[str, Any], registry: Any) -> dict[str, Any]:
    """``given`` parameters of part ``name`` from ``registry`` (``names``, ``factory``,
    ``get``): checked, completed with defaults, those that are off (None) left out, and
    the built part's own range checks passed."""
    check_name(kind, name, registry.names())
    full = resolve_params(f"{kind} {name!r}", registry.factory(name), given)
    kwargs = {k: v for k, v in full.items() if v is not None}
    registry.get(name, **kwargs)
    return kwargs
