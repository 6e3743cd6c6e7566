"""gapwatch's sliced gap diagnostics inside a verl run: computed from verl's batch.

verl logs the train-inference gap as a mean and a max (``training/rollout_probs_diff_*``)
and, with its rollout correction on, ``rollout_corr/*``; no post-tool slice and no tail
beyond the max. :func:`gap_metrics` computes gapwatch's figures from a verl ``DataProto``
(the built-in worker's names, ``correction.names``, which are verl's where verl has one):

- the mismatch pi_trainer / pi_rollout from ``old_log_probs`` and ``rollout_log_probs``
  (the rollout's log-probs: ``actor_rollout_ref.rollout.calculate_log_probs=True``): gap
  mean/max, |log-ratio| mean, KL k1/k3, chi2, log-ppl difference, globally and per slice,
  ESS and p50/p95/p99/max tails per slice;
- the reference drift pi_theta / pi_ref from ``old_log_probs`` and ``ref_log_prob``,
  where a reference policy runs;
- the slices from ``response_mask`` and ``attention_mask``: verl's multi-turn agent loop
  sets ``response_mask`` to 0 on tool-response tokens, so a tool-result token is a valid
  response token (``attention_mask``) with ``response_mask`` 0; the model's tokens after
  the first one in their row are ``post_tool``, the rest ``text``.

Switch it on without forking verl: one Ray runtime-env override runs :func:`install` in
every Ray worker process, verl's trainer actor included::

    python -m verl.trainer.main_ppo ... \\
        actor_rollout_ref.rollout.calculate_log_probs=True \\
        +ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=gapwatch.integrations.verl.install

``install`` wraps verl's ``compute_data_metrics`` (the function every verl PPO trainer calls
once a step for its ``critic/*`` and ``response_length/*`` figures), so the step's metrics
dict, and every logger verl writes it to (its ``file`` logger that ``gapwatch watch``
follows, W&B, TensorBoard, console), gets gapwatch's keys beside verl's. With
``GAPWATCH_VERL_DISTS=path`` set in the runtime env's ``env_vars``, each step's |log-ratio|
sketches are appended there as JSONL (``{"step": n, "distributions": ...}``; the step is
the count of training steps this process has seen), the file a command sweep's
``worker.distributions`` reads.

verl is an optional extra (``pip install 'gapwatch[verl]'``); nothing here imports it until
:func:`install` is called, and a missing verl is one line.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
from typing import Any

import torch

from gapwatch.correction import diagnostics
from gapwatch.correction import names as N

__all__ = ["gap_metrics", "install", "slices"]

# Modules that import compute_data_metrics by name (each holds its own reference to it).
_CALLERS = (
    "verl.trainer.ppo.metric_utils",
    "verl.trainer.ppo.ray_trainer",
    "verl.trainer.ppo.v1.trainer_base",
    "verl.experimental.separation.ray_trainer",
)
_MARK = "_gapwatch_wrapped"


def slices(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask, post_tool), both (B, T) bool over the response tokens of a verl batch.

    ``mask``: tokens the loss sees (``response_mask``); ``post_tool``: those written after
    the first tool-response token of their row (a valid token, by ``attention_mask``, with
    ``response_mask`` 0).
    """
    td = batch.batch
    resp = td["response_mask"].bool()  # (B, T)
    T = resp.shape[1]
    keys = set(td.keys())  # a TensorDict's keys
    valid = td["attention_mask"][:, -T:].bool() if "attention_mask" in keys else resp
    tool = valid & ~resp  # (B, T) tool-response tokens
    seen = tool.int().cumsum(-1) > 0  # (B, T) a tool response is at or before t
    return resp, seen & resp


def gap_metrics(batch: Any, alpha: float = 0.01) -> tuple[dict[str, float], dict[str, Any]]:
    """gapwatch's figures and sketch payloads of one verl batch (module doc).

    Args:
        batch: a ``verl.DataProto`` with ``old_log_probs``, ``rollout_log_probs`` and
            ``response_mask`` (B, T), optionally ``ref_log_prob`` and ``attention_mask``.
        alpha: relative accuracy of the tails.

    Returns ``({name: value}, {names.dist(slice, ratio): payload})``; empty where the batch
    has no rollout log-probs (verl did not keep them).
    """
    td = batch.batch
    keys = set(td.keys())
    if "rollout_log_probs" not in keys or "old_log_probs" not in keys:
        return {}, {}
    mask, post = slices(batch)
    old = td["old_log_probs"]
    figs, sk = diagnostics.analyze(old, td["rollout_log_probs"], mask, post_tool=post, alpha=alpha)
    dists = diagnostics.payloads(sk)
    if "ref_log_prob" in keys:
        drift, dsk = diagnostics.drift(
            old, td["ref_log_prob"], mask, ratio="ref_drift", post_tool=post, alpha=alpha
        )
        figs.update(drift)
        dists.update(diagnostics.payloads(dsk, "ref_drift"))
    n = mask.sum().clamp(min=1)
    figs[N.POST_TOOL_TOKEN_FRAC] = float((post & mask).sum() / n)
    return figs, dists


class _Writer:
    """Appends each step's sketches to ``$GAPWATCH_VERL_DISTS`` (when set)."""

    def __init__(self) -> None:
        self.steps = 0

    def __call__(self, batch: Any, dists: dict[str, Any]) -> None:
        path = os.environ.get("GAPWATCH_VERL_DISTS")
        self.steps += 1
        if not path or not dists:
            return
        step = int(getattr(batch, "meta_info", {}).get("global_steps", self.steps))
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": step, "distributions": dists}) + "\n")


def wrap(fn: Any, writer: _Writer | None = None) -> Any:
    """``fn`` (verl's ``compute_data_metrics``) with gapwatch's figures added to its dict."""
    if getattr(fn, _MARK, False):
        return fn
    writer = writer or _Writer()

    @functools.wraps(fn)
    def compute_data_metrics(batch: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        metrics = dict(fn(batch, *args, **kwargs))
        figs, dists = gap_metrics(batch)
        metrics.update(figs)
        writer(batch, dists)
        return metrics

    setattr(compute_data_metrics, _MARK, True)
    return compute_data_metrics


def install() -> list[str]:
    """Wrap verl's ``compute_data_metrics`` wherever verl imported it (idempotent); returns
    the modules patched. A Ray ``worker_process_setup_hook`` (module doc)."""
    try:
        metric_utils: Any = importlib.import_module("verl.trainer.ppo.metric_utils")
    except ImportError as exc:
        raise ImportError(
            f"gapwatch's verl plug-in needs verl ({exc.name} could not be imported): "
            "pip install 'gapwatch[verl]'"
        ) from None
    wrapped = wrap(metric_utils.compute_data_metrics)
    patched = []
    for name in _CALLERS:
        try:
            mod = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an optional trainer whose own deps are absent
            continue
        if hasattr(mod, "compute_data_metrics"):
            setattr(mod, "compute_data_metrics", wrapped)  # noqa: B010 (a module of verl's)
            patched.append(name)
    return patched
