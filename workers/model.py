"""The policy: the built-in tiny model (warm-started, cached), a named pretrained model or
any local HF causal LM.

``load_policy(cfg)`` returns ``(model, tokenizer)`` in the trainer's dtype on its device:
- ``model: tiny``: a 4-layer, 128-wide Llama (about 0.8M parameters) with a character
  tokenizer (``tokenizers`` WordLevel over single characters, wrapped as
  ``PreTrainedTokenizerFast``), warm-started by ``cfg.warm_start_steps`` supervised steps
  on the environment's demonstrations.
- a named model (``workers.pretrained``: ``smollm2-135m``, a real pretrained instruct
  model that ships in a registry package, converted once into the cache) or a directory:
  ``AutoModelForCausalLM``/``AutoTokenizer`` from it (local files only); if
  ``warm_start_steps > 0`` it is warm-started the same way.

**The quick and long presets' warm starts are shipped** (``workers/assets/quick`` and
``workers/assets/long``, with the sha256 of every file and the figures each was accepted
on): whether the tiny model learns to copy the tool's result sits on a knife edge of
floating-point summation order (the quick one built with 1 torch thread solves nothing,
with 2 it solves 15%; the long one solved 24% on an AMD EPYC and 8% on an Intel Xeon,
both with 1 thread), so every machine starts from the same bytes instead of building its
own. ``bench/build_warmstart.py --preset quick|long`` built them.

Any other warm start is built at run time, saved with ``save_pretrained`` to
``$GAPWATCH_CACHE/warmstart/<hash of its config>`` (default ``~/.cache/gapwatch``) once
under a file lock (concurrent trials wait, then load it), after passing the **quality
gate**: the policy plays held-out tasks (``workers.probe``); below the config's floors it
trains on, then fails in one line. The gate's figures are saved beside the weights
(``gapwatch_warmstart.json``) and printed once, when it is built.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from pathlib import Path
from typing import Any, Final

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)
from transformers.utils import logging as hf_logging

from gapwatch.workers import envs, pretrained
from gapwatch.workers.cache import INFO_FILE, cache_root
from gapwatch.workers.cache import saved_once as _saved_once
from gapwatch.workers.config import RunConfig
from gapwatch.workers.sampling import DTYPE
from gapwatch.workers.tokens import encode  # also imported from here by callers

WARMSTART_VERSION: Final = 3
"""Bump when warm-start code changes, so stale caches are not reused."""
CHARS: Final = "0123456789+-*/=<>:;.,?!()_ \nabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
SPECIALS: Final = ("[PAD]", "[BOS]", "[EOS]", "[UNK]")
ASSETS: Final = Path(__file__).resolve().parent / "assets"
SHIPPED: Final = ASSETS / "quick"
"""The shipped warm start of the quick preset (weights, tokenizer, ``gapwatch_warmstart.json``)."""
SHIPPED_LONG: Final = ASSETS / "long"
"""The shipped warm start of the long preset (``add_chain``), likewise."""
GATE_EPISODES: Final = 128
GATE_ROUNDS: Final = 2
"""Extra supervised rounds (each half the configured steps, at the schedule's final
learning rate) a warm start below the gate gets before it fails."""


class WarmStartError(ValueError):
    """A warm start that cannot be used: below its quality gate, or a corrupted shipped one."""


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer: one token per character, exact decoding."""
    vocab = {t: i for i, t in enumerate([*SPECIALS, *CHARS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]",
        bos_token="[BOS]",
        eos_token="[EOS]",
        unk_token="[UNK]",
    )


def tiny_config(vocab_size: int) -> LlamaConfig:
    """The built-in model's architecture."""
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=344,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )


def warm_start_key(cfg: RunConfig) -> str:
    """Hash of everything that determines the warm-started weights."""
    src: dict[str, Any] = {"model": cfg.model, "version": WARMSTART_VERSION}
    if cfg.model == "tiny":
        src["arch"] = tiny_config(len(SPECIALS) + len(CHARS)).to_dict()
        src["chars"] = CHARS
    else:
        src["config.json"] = (source_dir(cfg.model) / "config.json").read_text()
    for k in ("env", "env_kwargs", "warm_start_steps", "warm_start_lr", "warm_start_batch"):
        src[k] = getattr(cfg, k)
    # the gate may train on, so its floors shape the weights (and probe's settings with them)
    for k in ("warm_start_min_success", "warm_start_min_copied"):
        src[k] = getattr(cfg, k)
    if cfg.warm_start_min_success is not None or cfg.warm_start_min_copied is not None:
        src["gate"] = [GATE_EPISODES, GATE_ROUNDS, cfg.max_interactions, cfg.token_budget]
        src["gate_temperature"] = cfg.temperature
    src["wrong_frac"], src["seed"] = cfg.warm_start_wrong_frac, cfg.warm_start_seed
    return hashlib.sha256(json.dumps(src, sort_keys=True, default=str).encode()).hexdigest()[:16]


def source_dir(model: str) -> Path:
    """The Hugging Face directory a ``model`` setting other than ``tiny`` names: a named
    model's converted copy (``workers.pretrained``, converted once) or a local directory."""
    if pretrained.is_named(model):
        return pretrained.ensure(model)
    if not (Path(model) / "config.json").is_file():
        raise ValueError(
            f"model must be 'tiny', a named model ({', '.join(pretrained.names())}) or a "
            f"local HF model directory with config.json, got {model!r}"
        )
    return Path(model)


def load_policy(cfg: RunConfig) -> tuple[torch.nn.Module, Any]:
    """The trainer's model (``trainer_dtype`` on ``device``) and its tokenizer."""
    hf_logging.disable_progress_bar()  # one bar per load is noise in a sweep's logs
    if cfg.warm_start_steps > 0:
        path = ensure_warm_start(cfg)
    elif cfg.model == "tiny":
        path = _save_fresh_tiny(cfg)
    else:
        path = source_dir(cfg.model)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        path, local_files_only=True, dtype=DTYPE[cfg.trainer_dtype]
    )
    model = model.to(cfg.device)  # type: ignore[arg-type]
    return model, tokenizer


def _save_fresh_tiny(cfg: RunConfig) -> Path:
    """An untrained tiny model (warm_start_steps=0), saved so it loads like any HF model."""
    path = cache_root() / "fresh" / f"tiny-{cfg.warm_start_seed}-v{WARMSTART_VERSION}"

    def build() -> tuple[Any, Any, None]:
        tok = build_tokenizer()
        torch.manual_seed(cfg.warm_start_seed)
        return LlamaForCausalLM(tiny_config(len(tok))), tok, None

    return _saved_once(path, build)


def ensure_warm_start(cfg: RunConfig) -> Path:
    """Path of the warm-started model: the shipped one where ``cfg`` asks for exactly it,
    else built once under a file lock (and gated) if missing from the cache."""
    key = warm_start_key(cfg)
    shipped = {SHIPPED_KEY: SHIPPED, SHIPPED_LONG_KEY: SHIPPED_LONG}.get(key)
    if shipped is not None:
        return verified_shipped(shipped)
    return _saved_once(cache_root() / "warmstart" / key, lambda: _build_warm_start(cfg))


SHIPPED_KEY: Final = "6c27bef85202b647"
"""``warm_start_key`` of the quick preset: the config the shipped warm start stands for
(its ``gapwatch_warmstart.json`` says the same; a test checks both)."""
SHIPPED_LONG_KEY: Final = "7e6c93f4dc5c36c1"
"""``warm_start_key`` of the long preset, likewise."""


_VERIFIED: set[Path] = set()


def verified_shipped(root: Path | None = None) -> Path:
    """``root`` (default ``SHIPPED``) after checking every file against the sha256 recorded
    beside it (once per process); a missing or changed file fails in one line."""
    root = SHIPPED if root is None else root
    if root in _VERIFIED:
        return root
    fix = (
        f"reinstall gapwatch (git checkout workers/assets/{root.name}) or rebuild it with "
        f"python bench/build_warmstart.py --preset {root.name}"
    )
    if not (root / INFO_FILE).is_file():
        raise WarmStartError(
            f"the shipped warm start is missing ({root / INFO_FILE} not found); {fix}"
        )
    info = json.loads((root / INFO_FILE).read_text())
    for name, want in sorted(info["sha256"].items()):
        f = root / name
        if not f.is_file():
            raise WarmStartError(f"the shipped warm start is incomplete: {f} is missing; {fix}")
        got = hashlib.sha256(f.read_bytes()).hexdigest()
        if got != want:
            raise WarmStartError(
                f"the shipped warm start is corrupted: {f} has sha256 {got[:12]}..., expected "
                f"{want[:12]}...; {fix}"
            )
    _VERIFIED.add(root)
    return root


def _demo_batch(
    env: envs.Env, tok: Any, rng: random.Random, cfg: RunConfig
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One batch of demonstrations: ids (B, T), trainable mask (B, T), attention (B, T)."""
    pad = int(tok.pad_token_id if tok.pad_token_id is not None else 0)
    seqs, masks = [], []
    for _ in range(cfg.warm_start_batch):
        ids: list[int] = []
        mask: list[bool] = []
        for text, trainable in env.demonstration(
            env.sample_task(rng), rng, cfg.warm_start_wrong_frac
        ):
            piece = encode(tok, text, first=not ids)
            ids += piece
            mask += [trainable] * len(piece)
        seqs.append(ids)
        masks.append(mask)
    width = max(len(s) for s in seqs)
    x = torch.tensor([s + [pad] * (width - len(s)) for s in seqs], device=cfg.device)  # (B, T)
    m = torch.tensor([k + [False] * (width - len(k)) for k in masks], device=cfg.device)  # (B, T)
    attn = (
        torch.arange(width, device=cfg.device)[None]
        < torch.tensor([len(s) for s in seqs], device=cfg.device)[:, None]
    ).long()  # (B, T)
    return x, m, attn


def _supervised(model: Any, opt: Any, sched: Any, batches: Any, n: int) -> float:
    """``n`` supervised steps (loss on the action tokens only); the last loss."""
    loss = torch.zeros(())
    for _ in range(n):
        x, m, attn = batches()
        logits = model(input_ids=x, attention_mask=attn).logits[:, :-1].float()  # (B, T-1, V)
        nll = torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), x[:, 1:], reduction="none"
        )  # (B, T-1)
        loss = (nll * m[:, 1:]).sum() / m[:, 1:].sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if sched is not None:
            sched.step()
    return float(loss.item())


def gate_quality(model: Any, tok: Any, cfg: RunConfig) -> Any:
    """The warm start's held-out figures (``workers.probe.Quality``), dense, float32."""
    from gapwatch.workers import formats, probe, samplers

    model.eval()
    sampler = samplers.make("torch", model, tok, device=cfg.device, dtype="float32",
                            seed=cfg.warm_start_seed, stops=envs.STOP_STRINGS)  # fmt: skip
    env = envs.get(cfg.env, **cfg.env_kwargs)
    return probe.measure(env, sampler, tok, episodes=GATE_EPISODES,
                         max_interactions=cfg.max_interactions, token_budget=cfg.token_budget,
                         temperature=cfg.temperature,
                         fmt=formats.make(tok, env, cfg.shots))  # fmt: skip


def _passes(q: Any, cfg: RunConfig) -> bool:
    return (cfg.warm_start_min_success is None or q.success >= cfg.warm_start_min_success) and (
        cfg.warm_start_min_copied is None or q.copied >= cfg.warm_start_min_copied
    )


def _build_warm_start(cfg: RunConfig) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """Supervised pass on demonstrations, then the quality gate (training on if below it)."""
    t0 = time.perf_counter()
    torch.manual_seed(cfg.warm_start_seed)
    rng = random.Random(cfg.warm_start_seed)
    if cfg.model == "tiny":
        tok: Any = build_tokenizer()
        model: Any = LlamaForCausalLM(tiny_config(len(tok)))
    else:
        tok = AutoTokenizer.from_pretrained(source_dir(cfg.model), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(source_dir(cfg.model), local_files_only=True)
    model.to(cfg.device).train()
    env = envs.get(cfg.env, **cfg.env_kwargs)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.warm_start_lr, weight_decay=0.0)
    n, warmup = cfg.warm_start_steps, max(1, cfg.warm_start_steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / n))),
    )

    def batches() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _demo_batch(env, tok, rng, cfg)

    loss = _supervised(model, opt, sched, batches, n)
    gated = cfg.warm_start_min_success is not None or cfg.warm_start_min_copied is not None
    info: dict[str, Any] = {"key": warm_start_key(cfg), "steps": n, "final_loss": loss,
                            "torch_threads": torch.get_num_threads()}  # fmt: skip
    rounds = 0
    if gated:
        q = gate_quality(model, tok, cfg)
        while not _passes(q, cfg) and rounds < GATE_ROUNDS:
            rounds += 1
            print(f"gapwatch: warm start below its gate ({q.line()}); training on, "
                  f"round {rounds} of {GATE_ROUNDS}", flush=True)  # fmt: skip
            model.train()
            loss = _supervised(model, opt, None, batches, max(1, n // 2))
            q = gate_quality(model, tok, cfg)
        info.update(final_loss=loss, extra_rounds=rounds, gate=q.to_dict(),
                    floors={"success": cfg.warm_start_min_success,
                            "copied": cfg.warm_start_min_copied})  # fmt: skip
        if not _passes(q, cfg):
            raise WarmStartError(
                f"the warm start of {cfg.model} on {cfg.env} failed its quality gate after "
                f"{n + rounds * max(1, n // 2)} steps: {q.line()} (floors: success "
                f"{cfg.warm_start_min_success}, copied {cfg.warm_start_min_copied}); raise "
                "warm_start_steps, lower warm_start_wrong_frac, or set the floors to null"
            )
    model.eval()
    gate_txt = f"; gate: {q.line()}" if gated else ""
    print(
        f"gapwatch: warm start built in {time.perf_counter() - t0:.0f} s "
        f"(final loss {loss:.3f}){gate_txt}",
        flush=True,
    )
    return model, tok, info
