"""``GapGRPOTrainer``: the seed's experiment inside TRL's ``GRPOTrainer``.

A dense sampler chooses every token; the trainer learns through a compressed forward
(a gapwatch codec, ``workers.codecs``, the same specs as the built-in worker). Per
generation batch this trainer:

1. takes the sampler's per-token log-probs TRL already holds (``sampling_per_token_logps``:
   from vLLM, from a ``rollout_func``'s ``logprobs``, or, with TRL's own transformers
   generation, from one dense no-grad forward with the codec off);
2. takes pi_trainer's log-probs before the update (TRL's ``old_per_token_logps`` where TRL
   computed them, else one no-grad forward through the codec);
3. slices the tokens from TRL's tool mask (``tool_mask``, or a ``rollout_func``'s
   ``env_mask``): tool-result tokens are left out, model tokens after the first tool
   result are ``post_tool``, the rest ``text``;
4. computes the gap figures, their tails, ESS and sketches (``correction.diagnostics``,
   the built-in worker's names) and, where TRL has a reference model (``beta`` > 0), the
   reference drift; they go into TRL's logs (``self._metrics``) and the sketches to a
   ``GapwatchCallback`` (the store, the UI's ECDFs);
5. weighs each token by a gapwatch correction strategy (``correction.strategies``: every
   alias and both axes). TRL's loss supports per-token advantages of shape (B, T); the
   weights enter there, ``A * w``, which for every TRL loss type with ``w >= 0`` is the
   loss times ``w``, as the built-in worker's ``pg * weights`` is;
6. uses the sampler's log-probs as the PPO ratio's denominator (``old_logprobs="sampler"``,
   the built-in worker's default), so TRL's clip sees pi_trainer / pi_sampler as the seed's
   trainer did; ``"trainer"`` keeps TRL's own choice.

Swap it in with one import: ``from gapwatch.integrations.trl import GapGRPOTrainer as
GRPOTrainer`` and pass ``gap=GapConfig(codec="topk", codec_kwargs={"keep": 0.05},
correction="tis")``.

TRL's own correction: with vLLM, ``vllm_importance_sampling_correction=True`` and
``vllm_importance_sampling_mode="token_truncate"`` (clip max C) is gapwatch's ``tis``
with the same C, ``"token_mask"`` with [lo, hi] is ``icepop`` with those bounds,
``"sequence_truncate"`` is ``seq_tis`` and ``"sequence_mask"`` is ``sequence_mask``
(tests/gapwatch/test_trl_gap.py checks the weights agree). Both at once would correct
twice: turn TRL's off or set ``correction="none"``; this trainer refuses both.

Left out: the PPO ratio family (``ppo``: it exists inside TRL's loss only, per
micro-batch); several processes (each reports its own figures and sketches: merge them
outside, the sketches add exactly); ``top_k``/``top_p`` sampling in TRL's own generation
(the dense forward's log-probs would not be the sampling distribution's: it refuses).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from gapwatch.correction import diagnostics, strategies
from gapwatch.correction import names as N
from gapwatch.correction.sketch import LogSketch
from gapwatch.workers import codecs

try:
    import trl
    from trl import GRPOTrainer
except ImportError as exc:  # pragma: no cover - the trl extra is missing
    raise ImportError(
        f"GapGRPOTrainer needs TRL ({exc.name} could not be imported): pip install 'gapwatch[trl]'"
    ) from None

__all__ = ["GapConfig", "GapGRPOTrainer", "TRLHooksMissing", "post_tool_mask", "require_hooks"]


class TRLHooksMissing(RuntimeError):
    """The installed TRL lacks a method or behaviour this trainer builds on."""


# What this trainer relies on in TRL's GRPOTrainer, and where: checked at construction.
_HOOKS: dict[str, str] = {
    "_generate_and_score_completions": "the generation batch (sampler and trainer log-probs)",
    "_get_per_token_logps_and_entropies": "the trainer's no-grad forward",
    "_generate": "generation (the codec is off while TRL samples)",
    "_compute_loss": "per-token (B, T) advantages in the loss",
}


def require_hooks(cls: type = GRPOTrainer) -> None:
    """Raise :class:`TRLHooksMissing` (one line) unless ``cls`` has every hook used here."""
    version = getattr(trl, "__version__", "?")
    for name, why in _HOOKS.items():
        if not callable(getattr(cls, name, None)):
            raise TRLHooksMissing(
                f"TRL {version}'s GRPOTrainer has no {name} ({why}); "
                "GapGRPOTrainer needs trl>=1.16: pip install -U 'trl>=1.16'"
            )
    base: Any = next((c for c in cls.__mro__ if c.__name__ == "GRPOTrainer"), cls)
    if "rollout_func" not in inspect.signature(base.__init__).parameters:
        raise TRLHooksMissing(
            f"TRL {version}'s GRPOTrainer takes no rollout_func; pip install -U 'trl>=1.16'"
        )
    if "advantages.dim() == 1" not in inspect.getsource(base._compute_loss):
        raise TRLHooksMissing(
            f"TRL {version}'s loss does not take per-token advantages, where gapwatch's "
            "correction weights enter; pip install 'trl>=1.16'"
        )


@dataclass(frozen=True)
class GapConfig:
    """What the trainer's forward does and how the loss corrects for it."""

    codec: str = "none"
    """A ``workers.codecs`` name (``none``, ``topk``, ``quant``): the trainer's forward."""
    codec_kwargs: dict[str, Any] = field(default_factory=dict)
    """The codec's strength (``{"keep": 0.05}``, ``{"bits": 4}``)."""
    codec_layers: str | int = "all"
    """Decoder layers whose output is compressed: ``"all"`` or every n-th."""
    correction: str = "none"
    """A ``correction.strategies`` name (``tis``, ``icepop``, ``seq_mis``, ``compose``, ...)."""
    correction_kwargs: dict[str, Any] = field(default_factory=dict)
    """The strategy's parameters (``{"C": 2.0}``)."""
    old_logprobs: Literal["sampler", "trainer"] = "sampler"
    """The PPO ratio's denominator: the sampler's log-probs (the built-in worker's
    default) or TRL's own (pi_trainer before the update, or pi_new.detach())."""
    alpha: float = 0.01
    """Relative accuracy of the tail sketches."""

    def __post_init__(self) -> None:
        # unknown names and bad strengths fail here, in the registries' one line
        codecs.get(self.codec, **self.codec_kwargs)
        codecs.boundaries(2, self.codec_layers)
        strategies.get(self.correction, **self.correction_kwargs)
        if self.old_logprobs not in ("sampler", "trainer"):
            raise ValueError(
                f"old_logprobs must be 'sampler' or 'trainer', got {self.old_logprobs!r}"
            )

    @property
    def label(self) -> str:
        """``topk(keep=0.05)``: the codec and its strength, as runs are labelled."""
        return self.codec + "".join(f"({k}={v})" for k, v in self.codec_kwargs.items())


def post_tool_mask(valid: torch.Tensor, tool_mask: torch.Tensor | None) -> torch.Tensor:
    """(B, T) bool: model tokens written after the first tool-result token of their row.

    Args:
        valid: (B, T) 0/1, completion tokens (TRL's ``completion_mask``).
        tool_mask: (B, T) 0/1, 1 on model tokens, 0 on tool-result tokens; None: no tools.
    """
    v = valid.bool()
    if tool_mask is None:
        return torch.zeros_like(v)
    tool_tok = v & (tool_mask == 0)  # (B, T)
    seen = tool_tok.int().cumsum(-1) > 0  # (B, T) a tool result is at or before t
    return seen & v & (tool_mask != 0)


class _Switch:
    """The codec's forward hooks act only while ``on`` (off while TRL samples)."""

    def __init__(self, codec: codecs.Codec) -> None:
        self.codec, self.on = codec, True

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.codec(x) if self.on else x


class GapGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
    """TRL's ``GRPOTrainer`` with a compressed trainer forward, a dense sampler, gapwatch's
    sliced diagnostics in its logs and gapwatch's corrections in its loss (module doc).

    Args: those of ``GRPOTrainer``, and ``gap``: a :class:`GapConfig` (or its fields as a
    dict). A ``GapwatchCallback`` among ``callbacks`` also gets each step's sketches.
    """

    def __init__(self, *args: Any, gap: GapConfig | dict[str, Any] | None = None, **kwargs: Any):
        require_hooks(type(self))
        self.gap = gap if isinstance(gap, GapConfig) else GapConfig(**(gap or {}))
        self.correct = strategies.get(self.gap.correction, **self.gap.correction_kwargs)
        super().__init__(*args, **kwargs)
        twice = self.use_vllm and self.vllm_importance_sampling_correction
        if twice and self.gap.correction != "none":
            raise ValueError(
                f"TRL's vLLM importance sampling and gapwatch's {self.gap.correction!r} would "
                "correct twice: set vllm_importance_sampling_correction=False or "
                "correction='none'"
            )
        config: Any = self.args  # a GRPOConfig
        truncated = (config.top_k or 0) > 0 or (config.top_p or 1.0) < 1.0
        if self.rollout_func is None and not self.use_vllm and truncated:
            raise ValueError(
                "with TRL's own generation the sampler's log-probs come from a dense "
                "forward: set top_k=0 and top_p=1.0, or pass a rollout_func"
            )
        self._switch = _Switch(codecs.get(self.gap.codec, **self.gap.codec_kwargs))
        if self.gap.codec != "none":
            for m in (self.accelerator.unwrap_model(self.model), self.ref_model):
                if m is not None:
                    codecs.attach(m, self._switch, self.gap.codec_layers)
        self._sketches: dict[str, LogSketch] = {}
        self._pending: dict[str, list[tuple[Any, ...]]] = {"train": [], "eval": []}
        self._unweighed: dict[str, Any] | None = None
        for cb in self.callback_handler.callbacks:
            if hasattr(cb, "take_distributions"):
                cb.take_distributions(self.pop_distributions)

    # --- the distributions a GapwatchCallback stores with each logged step -------------

    def pop_distributions(self) -> dict[str, dict[str, Any]]:
        """``{names.dist(slice, ratio): payload}`` merged since the last call, then reset."""
        out = {k: s.to_payload() for k, s in self._sketches.items() if s.count > 0}
        self._sketches = {}
        return out

    def _merge(self, sketches: dict[N.Slice, LogSketch], ratio: N.Ratio) -> None:
        for s, sk in sketches.items():
            key = N.dist(s, ratio)
            if key in self._sketches:
                self._sketches[key].merge(sk)
            else:
                self._sketches[key] = sk

    # --- TRL's hooks -----------------------------------------------------------------

    def _generate(self, prompts: list[Any]) -> Any:
        """TRL's generation with the codec off: the sampler is the dense policy."""
        self._switch.on = False
        try:
            return super()._generate(prompts)
        finally:
            self._switch.on = True

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = super()._generate_and_score_completions(inputs)
        sampler = out.get("sampling_per_token_logps")
        if sampler is None:  # TRL's transformers generation keeps no log-probs
            sampler = self._logps(out, codec_on=False)
        sampler = torch.nan_to_num(sampler, nan=0.0)  # vLLM may omit a token's log-prob
        out["sampling_per_token_logps"] = sampler
        out["gw_post_tool"] = post_tool_mask(out["completion_mask"], out.get("tool_mask"))
        trainer = out.get("old_per_token_logps")
        if trainer is not None:  # TRL computed pi_trainer before the update: weigh now
            self._weigh(out, trainer)
        # else the loss's own forward is pi_trainer before the update (one optimizer step
        # per generation batch): the batch is weighed there, at no extra forward
        if self.gap.old_logprobs == "sampler":
            out["old_per_token_logps"] = sampler
        return out

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        self._unweighed = None if "gw_weighed" in inputs else inputs
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._unweighed = None

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
        res = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        batch, self._unweighed = self._unweighed, None
        if batch is not None:  # the loss's forward: weigh the micro-batch before TRL reads
            self._weigh(batch, res[0].detach())  # its advantages (it does so just after)
        return res

    def _weigh(self, batch: dict[str, Any], trainer: torch.Tensor) -> None:
        """Weigh each token of ``batch`` (a generation batch or a micro-batch of one) by the
        correction strategy, ``batch["advantages"]`` (B,) -> (B, T) ``A * w`` (left as is
        for ``none``), and keep its tensors for the step's figures (:meth:`log`).

        Args:
            batch: TRL's batch, with ``sampling_per_token_logps``, ``completion_mask``,
                ``gw_post_tool`` and optionally ``tool_mask`` and ``ref_per_token_logps``.
            trainer: (B, T) log-probs of pi_trainer before the update.
        """
        valid, tool = batch["completion_mask"], batch.get("tool_mask")
        mask = (valid if tool is None else valid * tool).bool()  # (B, T) tokens the loss sees
        sampler = batch["sampling_per_token_logps"]
        batch["gw_weighed"] = torch.tensor(True)  # 0-dim: TRL's split and shuffle keep it whole
        mode = "train" if getattr(self.model, "training", True) else "eval"
        self._pending[mode].append(
            (trainer, sampler, mask, batch["gw_post_tool"], batch.get("ref_per_token_logps"))
        )
        if self.gap.correction == "none":
            return
        weights, _ = self.correct(trainer, sampler, mask)  # (B, T) detached, 0 off-mask
        adv = batch["advantages"]
        adv = adv.unsqueeze(1) if adv.dim() == 1 else adv  # (B, 1) or (B, T)
        batch["advantages"] = adv * weights.to(adv.device, adv.dtype)  # (B, T)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """The step's gap figures from every batch weighed since the last log, then TRL's."""
        mode = "train" if getattr(self.model, "training", True) else "eval"
        for k, v in self._figures(mode).items():
            self._metrics[mode][k].append(v)
        super().log(logs, start_time)

    def _figures(self, mode: str) -> dict[str, float]:
        """Diagnostics, reference drift and correction figures over the pending batches
        (one pass over them all, so tails are of the whole step, not means of parts)."""
        parts, self._pending[mode] = self._pending[mode], []
        if not parts:
            return {}
        width = max(p[0].shape[1] for p in parts)

        def cat(i: int) -> torch.Tensor:  # (sum B, width), right-padded with 0 / False
            return torch.cat(
                [torch.nn.functional.pad(p[i], (0, width - p[i].shape[1])) for p in parts]
            )

        trainer, sampler, mask, post = cat(0), cat(1), cat(2), cat(3)
        figs, sk = diagnostics.analyze(trainer, sampler, mask, post_tool=post, alpha=self.gap.alpha)
        self._merge(sk, "mismatch")
        if all(p[4] is not None for p in parts):  # how far training has moved the policy
            drift, dsk = diagnostics.drift(trainer, cat(4), mask, ratio="ref_drift",
                                           post_tool=post, alpha=self.gap.alpha)  # fmt: skip
            figs.update(drift)
            self._merge(dsk, "ref_drift")
        figs.update(self.correct(trainer, sampler, mask)[1])
        figs[N.POST_TOOL_TOKEN_FRAC] = float((post & mask).sum() / mask.sum().clamp(min=1))
        return {k: float(v) for k, v in figs.items()}

    def _logps(self, out: dict[str, Any], *, codec_on: bool) -> torch.Tensor:
        """(B, T) no-grad log-probs of the completion tokens, codec on or off."""
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        attn = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        self._switch.on = codec_on
        try:
            with torch.no_grad():
                logps, _, _ = self._get_per_token_logps_and_entropies(
                    self.model, ids, attn, out["completion_ids"].size(1),
                    batch_size=self.args.per_device_train_batch_size,
                )  # fmt: skip
        finally:
            self._switch.on = True
        return logps
