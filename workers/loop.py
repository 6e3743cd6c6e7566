"""The GRPO loop: one RL run, step by step. Call ``train(cfg)``; it yields a ``StepResult``.

``GRPORun(cfg, resume=checkpoint_dir)`` is the same run, stoppable: ``save(dir)`` writes
a checkpoint (``workers.checkpoint``) and a run built from it goes on where it stopped.

Per step:
1. draw ``tasks_per_step`` tasks; play ``group_size`` trajectories of each with the SAMPLER
   (dense weights, ``sampler_dtype``); every interaction is one training row;
2. one no-grad pass of the TRAINER (its compressed forward) and of the frozen reference
   (the initial policy, same forward; kept when ``kl_coef`` > 0 or ``drift_reference``)
   over each trajectory: old log-probs and entropy;
3. gap diagnostics per slice (``correction.diagnostics``) and correction weights
   (``correction.strategies``) from trainer vs sampler log-probs; drift diagnostics of
   trainer vs reference (``ref_drift``);
4. group-relative advantages ``(r - mean) / (std + eps)`` per task, broadcast to every row
   of the trajectory;
5. ``minibatches`` AdamW steps on the PPO-clip loss times the correction weights plus the
   k3 KL anchor, token-mean over the minibatch; the PPO ratio each minibatch saw is
   sliced like the gap (``ppo``); then sync the sampler's weights.

Deliberately left out: multiple PPO epochs, value functions, reward models, distributed
training, I/O (the caller writes ``StepResult``s to the store), stop rules (the caller's).
All math on log-probs (gap, tails, KL, ESS, correction weights) lives in ``correction/``.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gapwatch.correction import diagnostics, strategies
from gapwatch.correction import names as N
from gapwatch.workers import checkpoint, codecs, devices, envs, formats, samplers
from gapwatch.workers.config import RunConfig
from gapwatch.workers.model import load_policy
from gapwatch.workers.rollout import Trajectory, rollout
from gapwatch.workers.sampling import Sampler, lm_forward


@dataclass
class StepResult:
    """What one GRPO step reports."""

    step: int
    """1-based step number."""
    metrics: dict[str, float]
    """Figures keyed by ``correction.names``."""
    distributions: dict[str, dict[str, Any]]
    """Per-slice |log-ratio| histogram payloads keyed by ``names.dist(slice, ratio)``."""


@dataclass
class Rows:
    """A step's rows laid out as (R, L) tensors, L = longest action."""

    traj: torch.Tensor  # (R,) index of the row's trajectory
    pos: torch.Tensor  # (R, L) position in the shifted log-prob array of each action token
    mask: torch.Tensor  # (R, L) bool, True on action tokens
    post_tool: torch.Tensor  # (R,) bool
    logp_sampler: torch.Tensor  # (R, L)
    adv: torch.Tensor  # (R,) the trajectory's advantage
    turn: torch.Tensor  # (R,) 1-based interaction index of the row in its trajectory


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float) -> torch.Tensor:
    """(N,) rewards ordered by group -> (N,) ``(r - mean) / (std + eps)`` within each group."""
    r = rewards.view(-1, group_size)  # (groups, G)
    adv = (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True) + eps)  # (groups, G)
    return adv.view(-1)


def build_rows(trajs: list[Trajectory], adv: torch.Tensor) -> Rows:
    """Lay out every row of every trajectory (log-prob position t predicts token t + 1)."""
    flat = [
        (i, row, lps, k + 1)
        for i, t in enumerate(trajs)
        for k, (row, lps) in enumerate(zip(t.rows, t.sampler_logps, strict=True))
    ]
    width = max(row.length for _, row, _, _ in flat)
    r = len(flat)
    pos = torch.zeros((r, width), dtype=torch.long)
    mask = torch.zeros((r, width), dtype=torch.bool)
    lps = torch.zeros((r, width))
    for k, (_, row, lp, _) in enumerate(flat):
        pos[k, : row.length] = torch.arange(row.start - 1, row.start - 1 + row.length)
        mask[k, : row.length] = True
        lps[k, : row.length] = torch.tensor(lp)
    traj = torch.tensor([i for i, _, _, _ in flat])
    post = torch.tensor([row.post_tool for _, row, _, _ in flat])
    turn = torch.tensor([n for _, _, _, n in flat])
    return Rows(traj, pos, mask, post, lps, adv[traj], turn)


def token_logps(
    model: nn.Module,
    trajs: list[Trajectory],
    pad: int,
    temperature: float,
    device: torch.device,
    *,
    entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Forward of whole trajectories -> (B, T-1) log-prob of each next token, (B, T-1) entropy.

    Exact, at a fraction of the cost for a long shared prompt: the ids all trajectories
    share (``Trajectory.shared``: worked examples) are read once and their KV cache
    repeated over the batch, and logits are made only from the first action's position
    on (positions before it, prompt, are 0 in both outputs)."""
    width = max(len(t.ids) for t in trajs)
    first = min((t.rows[0].start for t in trajs if t.rows), default=1) - 1  # first read
    shared = min(min(t.shared for t in trajs), first)
    ids = torch.full((len(trajs), width), pad, dtype=torch.long)
    for i, t in enumerate(trajs):
        ids[i, : len(t.ids)] = torch.tensor(t.ids)
    lengths = torch.tensor([len(t.ids) for t in trajs])
    attn = (torch.arange(width)[None] < lengths[:, None]).long()  # (B, T) right padding
    ids, attn = ids.to(device), attn.to(device)
    cache = None
    if shared > 0:  # (1, S) once, its cache repeated to (B, S)
        _, cache = lm_forward(model, ids[:1, :shared])
        cache.batch_repeat_interleave(len(trajs))
    logits, _ = lm_forward(model, ids[:, shared:], attention_mask=attn, cache=cache,
                           logits_to_keep=width - first)  # fmt: skip
    logits = logits[:, :-1].float() / temperature  # (B, T-1-first, V) positions first..T-2
    logz = torch.logsumexp(logits, dim=-1)  # (B, T-1-first)
    part = logits.gather(-1, ids[:, first + 1 :, None]).squeeze(-1) - logz  # (B, T-1-first)
    logp = torch.nn.functional.pad(part, (first, 0))  # (B, T-1)
    if not entropy:
        return logp, None
    with torch.no_grad():  # a diagnostic: no graph over the vocabulary
        ent = logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)  # (B, T-1-first)
    return logp, torch.nn.functional.pad(ent, (first, 0))


def chunked_logps(
    model: nn.Module,
    trajs: list[Trajectory],
    pad: int,
    temperature: float,
    device: torch.device,
    micro: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``token_logps`` (no grad) ``micro`` trajectories at a time, stacked to (B, T-1) on CPU."""
    width = max(len(t.ids) for t in trajs) - 1
    logp, ent = torch.zeros((len(trajs), width)), torch.zeros((len(trajs), width))
    for lo in range(0, len(trajs), micro):
        lp, en = token_logps(model, trajs[lo : lo + micro], pad, temperature, device)
        assert en is not None
        logp[lo : lo + micro, : lp.shape[1]], ent[lo : lo + micro, : en.shape[1]] = (
            lp.cpu(),
            en.cpu(),
        )
    return logp, ent


def at_rows(full: torch.Tensor, rows: Rows, local: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T-1) per-trajectory values -> (R, L) per row token (0 off-mask)."""
    dev = full.device
    traj = (rows.traj if local is None else local).to(dev)
    pos = rows.pos.clamp(max=full.shape[1] - 1).to(dev)
    return torch.where(rows.mask.to(dev), full[traj[:, None], pos], 0.0)


def subset(rows: Rows, sel: torch.Tensor) -> Rows:
    """Rows selected by a (R,) bool mask."""
    return Rows(
        rows.traj[sel],
        rows.pos[sel],
        rows.mask[sel],
        rows.post_tool[sel],
        rows.logp_sampler[sel],
        rows.adv[sel],
        rows.turn[sel],
    )


def episode_metrics(trajs: list[Trajectory], cfg: RunConfig) -> dict[str, float]:
    """Score, advantage degeneracy, lengths, turns, parse failures, success, tool calls."""
    rewards = torch.tensor([t.reward for t in trajs])
    groups = rewards.view(-1, cfg.group_size)
    rows = [row for t in trajs for row in t.rows]
    lengths = torch.tensor([row.length for row in rows], dtype=torch.float)
    return {
        N.SCORE_MEAN: rewards.mean().item(),
        N.SCORE_STD: rewards.std().item(),
        N.SCORE_MIN: rewards.min().item(),
        N.SCORE_MAX: rewards.max().item(),
        N.ZERO_ADV_FRAC: (groups == groups[:, :1]).all(dim=1).float().mean().item(),
        N.SCORE_GROUP_STD: groups.std(dim=1).mean().item(),
        N.RESPONSE_LENGTH_MEAN: lengths.mean().item(),
        N.RESPONSE_LENGTH_MAX: lengths.max().item(),
        N.POST_TOOL_TOKEN_FRAC: sum(r.length for r in rows if r.post_tool)
        / max(1.0, lengths.sum().item()),
        N.CLIP_RATIO: sum(row.truncated for row in rows) / len(rows),
        N.RESPONSE_BUDGET: float(cfg.token_budget),
        N.NUM_TURNS: sum(len(t.rows) for t in trajs) / len(trajs),
        N.PARSE_FAIL_FRAC: sum(not row.parsed for row in rows) / len(rows),
        N.SUCCESS_RATE: sum(t.success for t in trajs) / len(trajs),
        N.TOOL_CALLS: sum(t.tool_calls for t in trajs) / len(trajs),
    }


def freeze_below(model: nn.Module, top: int) -> None:
    """Train only the top ``top`` decoder layers and the final norm: the embeddings (and a
    head tied to them) and every layer below stay as they are. The backward pass then
    stops at the lowest trained layer."""
    layers = codecs.decoder_layers(model)
    if not 1 <= top <= len(layers):
        raise ValueError(f"train_layers must be 1..{len(layers)} for this model, got {top}")
    model.requires_grad_(False)
    for layer in layers[len(layers) - top :]:
        layer.requires_grad_(True)
    norm = getattr(getattr(model, "model", None), "norm", None)
    if isinstance(norm, nn.Module):
        norm.requires_grad_(True)


class Trainer:
    """Trainer model (compressed forward), frozen reference, optimizer, correction strategy."""

    def __init__(self, cfg: RunConfig, model: nn.Module, pad: int) -> None:
        self.cfg, self.model, self.pad = cfg, model, pad
        self.device = torch.device(cfg.device)
        self.ref: nn.Module | None = None
        if cfg.kl_coef > 0 or cfg.drift_reference:
            self.ref = copy.deepcopy(model).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
        codec = codecs.get(cfg.compression, **cfg.compression_kwargs)
        if cfg.compression != "none":
            for m in (model, self.ref):
                if m is not None:
                    codecs.attach(m, codec, cfg.compression_layers)
        self.correct = strategies.get(cfg.correction, **cfg.correction_kwargs)
        if cfg.train_layers is not None:
            freeze_below(model, cfg.train_layers)
        params = [p for p in model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)

    def set_lr(self, step: int) -> None:
        """Linear warm-up over ``lr_warmup_steps`` GRPO steps, then ``lr``."""
        w = self.cfg.lr_warmup_steps
        for g in self.opt.param_groups:
            g["lr"] = self.cfg.lr * (min(1.0, step / w) if w > 0 else 1.0)

    def logps(self, model: nn.Module, trajs: list[Trajectory]) -> tuple[torch.Tensor, torch.Tensor]:
        micro = self.cfg.micro_batch or len(trajs)
        return chunked_logps(model, trajs, self.pad, self.cfg.temperature, self.device, micro)

    def step(
        self, trajs: list[Trajectory], rows: Rows, gen: torch.Generator
    ) -> tuple[dict[str, float], dict[str, Any]]:
        """Diagnostics, correction weights, then ``minibatches`` PPO-clip updates."""
        cfg = self.cfg
        given = None  # (B, T-1) the update's own forward, where it is also the one before it
        if cfg.minibatches == 1 and cfg.micro_batch is None:  # one update on the whole batch:
            self.model.train()  # its forward is pi_trainer before the update (TRL does so too)
            given, ent_full = token_logps(self.model, trajs, self.pad, cfg.temperature,
                                          self.device)  # fmt: skip
            old_full = given.detach()
        else:
            self.model.eval()
            with torch.no_grad():
                old_full, ent_full = self.logps(self.model, trajs)
        assert ent_full is not None
        old = at_rows(old_full, rows)  # (R, L) trainer log-probs before the update
        ent = at_rows(ent_full, rows)
        with torch.no_grad():
            ref = at_rows(self.logps(self.ref, trajs)[0], rows) if self.ref is not None else None
        ls, m = rows.logp_sampler, rows.mask
        # one pass gives the gap figures and the |log-ratio| sketches (shared bucket indices)
        metrics, sketches = diagnostics.analyze(old, ls, m, post_tool=rows.post_tool)
        dists = diagnostics.payloads(sketches)
        metrics.update(diagnostics.by_turn(old, ls, m, rows.turn))  # which round diverges
        if ref is not None:  # how far training has moved the policy from the reference
            figs, sk = diagnostics.drift(old, ref, m, ratio="ref_drift", post_tool=rows.post_tool)
            metrics.update(figs)
            dists.update(diagnostics.payloads(sk, "ref_drift"))
        anchor = ref if cfg.kl_coef > 0 else None  # a diagnostics-only reference: no loss
        weights, corr = self.correct(old, ls, m)  # (R, L) detached
        metrics.update(corr)
        metrics[N.ENTROPY] = (ent[m].mean()).item()
        base = old if cfg.old_logprobs == "trainer" else ls  # (R, L) PPO ratio denominator
        ppo_lr = torch.zeros_like(ls)  # (R, L) log(pi_new / pi_behaviour) as the loss saw it

        self.model.train()
        order = torch.randperm(len(trajs), generator=gen)
        sums = {"pg": 0.0, "kl": 0.0, "clip": 0.0, "gn": 0.0}
        max_norm = cfg.max_grad_norm if cfg.max_grad_norm is not None else float("inf")
        for chunk in order.chunk(cfg.minibatches):
            n_tok = m[torch.isin(rows.traj, chunk)].sum().clamp_min(1)  # tokens in the minibatch
            self.opt.zero_grad(set_to_none=True)
            for micro in chunk.split(cfg.micro_batch or len(chunk)):  # gradient accumulation
                part = self.micro_loss(trajs, rows, micro, base, weights, anchor, n_tok, ppo_lr,
                                       given)  # fmt: skip
                for k, v in part.items():
                    sums[k] += v / cfg.minibatches
            gn = nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
            sums["gn"] += float(gn) / cfg.minibatches
            self.opt.step()
        metrics.update(
            {N.PG_LOSS: sums["pg"], N.PG_CLIPFRAC: sums["clip"], N.GRAD_NORM: sums["gn"]}
        )
        if anchor is not None:
            metrics[N.KL_TO_REF] = sums["kl"]
        figs, sk = diagnostics.drift(ppo_lr, torch.zeros_like(ppo_lr), m, ratio="ppo",
                                     post_tool=rows.post_tool)  # fmt: skip
        metrics.update(figs)
        dists.update(diagnostics.payloads(sk, "ppo"))
        return metrics, dists

    def micro_loss(
        self,
        trajs: list[Trajectory],
        rows: Rows,
        micro: torch.Tensor,
        base: torch.Tensor,
        weights: torch.Tensor,
        ref: torch.Tensor | None,
        n_tok: torch.Tensor,
        ppo_lr: torch.Tensor,
        given: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """Backward of (PPO-clip x weights + kl_coef x k3) over the rows of ``micro``'s
        trajectories, token sums divided by the minibatch's ``n_tok``; returns its parts
        and writes the PPO log-ratio of those rows into ``ppo_lr`` (R, L). ``given``: the
        (B, T-1) forward of every trajectory, with grad, already made (else made here)."""
        cfg, dev = self.cfg, self.device
        sel = torch.isin(rows.traj, micro)  # (R,) rows of these trajectories
        sub = subset(rows, sel)
        if given is None:
            local = torch.full((len(trajs),), -1, dtype=torch.long)
            local[micro] = torch.arange(len(micro))
            new_full, _ = token_logps(self.model, [trajs[int(i)] for i in micro], self.pad,
                                      cfg.temperature, dev, entropy=False)  # fmt: skip
            new = at_rows(new_full, sub, local[sub.traj].to(dev))  # (r, L)
        else:
            new = at_rows(given, sub)  # (r, L)
        mk = sub.mask.to(dev)
        ratio = torch.exp(new - base[sel].to(dev))  # (r, L)
        ppo_lr[sel] = torch.where(mk, new - base[sel].to(dev), 0.0).detach().cpu()
        adv = sub.adv.to(dev)[:, None]  # (r, 1)
        clipped = ratio.clamp(1 - cfg.clip_eps, 1 + cfg.clip_eps)
        pg = -torch.minimum(ratio * adv, clipped * adv) * weights[sel].to(dev)  # (r, L)
        pg_sum = (pg * mk).sum() / n_tok
        out = {
            "pg": pg_sum.item(),
            "clip": float((((ratio - clipped).abs() > 0) & mk).sum() / n_tok),
        }
        loss = pg_sum
        if ref is not None:
            d = ref[sel].to(dev) - new  # (r, L)
            kl = ((torch.exp(d) - d - 1) * mk).sum() / n_tok  # k3, >= 0
            loss = loss + cfg.kl_coef * kl
            out["kl"] = kl.item()
        loss.backward()
        return out


def make_sampler(cfg: RunConfig, model: nn.Module, tokenizer: Any) -> Sampler:
    """The config's sampler over the trainer's ``model`` (build it before a codec is
    attached, so the sampler's copy of the weights is dense)."""
    return samplers.make(cfg.sampler, model, tokenizer, device=cfg.device,
                         dtype=cfg.sampler_dtype, seed=cfg.seed, stops=envs.STOP_STRINGS)  # fmt: skip


class GRPORun:
    """One RL run that can be stopped and taken up again: ``steps()`` yields the steps
    still to do; ``save(dir)`` writes a checkpoint; ``GRPORun(cfg, resume=dir)`` goes on
    after the checkpoint's step as if it had never stopped (``workers.checkpoint``)."""

    def __init__(self, cfg: RunConfig, resume: str | Path | None = None) -> None:
        if cfg.num_threads is not None:
            torch.set_num_threads(cfg.num_threads)
        devices.require(cfg.device)  # one clear line where the device is not usable here
        self.cfg = cfg
        self.model, self.tokenizer = load_policy(cfg)
        torch.manual_seed(cfg.seed)
        self.env = envs.get(cfg.env, **cfg.env_kwargs)
        self.fmt = formats.make(self.tokenizer, self.env, cfg.shots)  # plain, or chat turns
        # before the codec is attached to the trainer's model: the sampler's copy stays dense
        self.sampler = make_sampler(cfg, self.model, self.tokenizer)
        pad = self.tokenizer.pad_token_id
        self.trainer = Trainer(cfg, self.model, int(pad if pad is not None else 0))
        self.rng = random.Random(cfg.seed)
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.done = 0
        """Steps done (a restored run starts after its checkpoint's)."""
        if resume is not None:
            self.done = checkpoint.load(Path(resume), self)
            self.sampler.sync(self.model)  # the sampler serves the restored weights

    def save(self, path: str | Path) -> Path:
        """A checkpoint of everything the next step depends on, in directory ``path``."""
        return checkpoint.save(Path(path), self)

    def steps(self) -> Iterator[StepResult]:
        """The remaining GRPO steps, one ``StepResult`` each (steps count from 1)."""
        cfg, env, trainer = self.cfg, self.env, self.trainer
        for step in range(self.done + 1, cfg.steps + 1):
            t0 = time.perf_counter()
            tasks = [env.sample_task(self.rng) for _ in range(cfg.tasks_per_step)]
            trajs = rollout(
                env,
                tasks,
                cfg.group_size,
                self.sampler,
                self.tokenizer,
                max_interactions=cfg.max_interactions,
                token_budget=cfg.token_budget,
                temperature=cfg.temperature,
                seed=cfg.seed * 100_003 + step,
                fmt=self.fmt,
            )
            rewards = torch.tensor([t.reward for t in trajs])
            rows = build_rows(trajs, group_advantages(rewards, cfg.group_size, cfg.adv_eps))
            metrics = episode_metrics(trajs, cfg)
            trainer.set_lr(step)
            train_metrics, dists = trainer.step(trajs, rows, self.gen)
            metrics.update(train_metrics)
            self.sampler.sync(self.model)
            dt = time.perf_counter() - t0
            metrics[N.STEP_TIME] = dt
            metrics[N.TOKENS_PER_S] = int(rows.mask.sum()) / dt
            self.done = step
            yield StepResult(step, metrics, dists)


def train(cfg: RunConfig) -> Iterator[StepResult]:
    """Run ``cfg.steps`` GRPO steps, yielding one ``StepResult`` per step (step from 1)."""
    yield from GRPORun(cfg).steps()
