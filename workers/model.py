"""The policy: the built-in tiny model (warm-started, cached) or any local HF causal LM.

``load_policy(cfg)`` returns ``(model, tokenizer)`` in the trainer's dtype on its device:
- ``model: tiny``: a 4-layer, 128-wide Llama (about 0.8M parameters) with a character
  tokenizer (``tokenizers`` WordLevel over single characters, wrapped as
  ``PreTrainedTokenizerFast``), warm-started by ``cfg.warm_start_steps`` supervised steps
  on the environment's demonstrations. The result is saved with ``save_pretrained`` to
  ``$GAPWATCH_CACHE/warmstart/<hash of its config>`` (default ``~/.cache/gapwatch``),
  built once under a file lock, so concurrent trials wait and then load it.
- a directory: ``AutoModelForCausalLM``/``AutoTokenizer`` from it (local files only); if
  ``warm_start_steps > 0`` it is warm-started and cached the same way.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import random
import shutil
import tempfile
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

from workers import envs
from workers.config import RunConfig
from workers.sampling import DTYPE

WARMSTART_VERSION: Final = 2
"""Bump when warm-start code changes, so stale caches are not reused."""
CHARS: Final = "0123456789+-*/=<>:;.,?!()_ \nabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
SPECIALS: Final = ("[PAD]", "[BOS]", "[EOS]", "[UNK]")


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


def cache_root() -> Path:
    """``$GAPWATCH_CACHE`` or ``~/.cache/gapwatch``."""
    return Path(os.environ.get("GAPWATCH_CACHE") or Path.home() / ".cache" / "gapwatch")


def encode(tokenizer: Any, text: str, *, first: bool) -> list[int]:
    """Token ids of ``text``; ``first`` prepends BOS (the start of a history)."""
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
    if first and tokenizer.bos_token_id is not None:
        ids = [int(tokenizer.bos_token_id), *ids]
    return ids


def warm_start_key(cfg: RunConfig) -> str:
    """Hash of everything that determines the warm-started weights."""
    src: dict[str, Any] = {"model": cfg.model, "version": WARMSTART_VERSION}
    if cfg.model == "tiny":
        src["arch"] = tiny_config(len(SPECIALS) + len(CHARS)).to_dict()
        src["chars"] = CHARS
    else:
        src["config.json"] = (Path(cfg.model) / "config.json").read_text()
    for k in ("env", "env_kwargs", "warm_start_steps", "warm_start_lr", "warm_start_batch"):
        src[k] = getattr(cfg, k)
    src["wrong_frac"], src["seed"] = cfg.warm_start_wrong_frac, cfg.warm_start_seed
    return hashlib.sha256(json.dumps(src, sort_keys=True, default=str).encode()).hexdigest()[:16]


def load_policy(cfg: RunConfig) -> tuple[torch.nn.Module, Any]:
    """The trainer's model (``trainer_dtype`` on ``device``) and its tokenizer."""
    hf_logging.disable_progress_bar()  # one bar per load is noise in a sweep's logs
    if cfg.model != "tiny" and not (Path(cfg.model) / "config.json").is_file():
        raise ValueError(
            f"model must be 'tiny' or a local HF model directory with config.json, got {cfg.model!r}"
        )
    if cfg.warm_start_steps > 0:
        path = ensure_warm_start(cfg)
    elif cfg.model == "tiny":
        path = _save_fresh_tiny(cfg)
    else:
        path = Path(cfg.model)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        path, local_files_only=True, dtype=DTYPE[cfg.trainer_dtype]
    )
    model = model.to(cfg.device)  # type: ignore[arg-type]
    return model, tokenizer


def _save_fresh_tiny(cfg: RunConfig) -> Path:
    """An untrained tiny model (warm_start_steps=0), saved so it loads like any HF model."""
    path = cache_root() / "fresh" / f"tiny-{cfg.warm_start_seed}-v{WARMSTART_VERSION}"

    def build() -> tuple[Any, Any]:
        tok = build_tokenizer()
        torch.manual_seed(cfg.warm_start_seed)
        return LlamaForCausalLM(tiny_config(len(tok))), tok

    return _saved_once(path, build)


def ensure_warm_start(cfg: RunConfig) -> Path:
    """Path of the warm-started model, building it once under a file lock if missing."""
    return _saved_once(
        cache_root() / "warmstart" / warm_start_key(cfg), lambda: _build_warm_start(cfg)
    )


def _saved_once(path: Path, build: Any) -> Path:
    """``path`` holding ``build()``'s (model, tokenizer), built and saved once: concurrent
    trials wait on a file lock for the first builder, then load what it saved."""
    if (path / "config.json").is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f"{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (path / "config.json").is_file():
                model, tok = build()
                _atomic_save(model, tok, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return path


def _atomic_save(model: Any, tok: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)


def _build_warm_start(cfg: RunConfig) -> tuple[torch.nn.Module, Any]:
    """Supervised pass on demonstrations; loss on the action tokens only."""
    t0 = time.perf_counter()
    torch.manual_seed(cfg.warm_start_seed)
    rng = random.Random(cfg.warm_start_seed)
    if cfg.model == "tiny":
        tok: Any = build_tokenizer()
        model: Any = LlamaForCausalLM(tiny_config(len(tok)))
    else:
        tok = AutoTokenizer.from_pretrained(cfg.model, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(cfg.model, local_files_only=True)
    model.to(cfg.device).train()
    env = envs.get(cfg.env, **cfg.env_kwargs)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.warm_start_lr, weight_decay=0.0)
    n, warmup = cfg.warm_start_steps, max(1, cfg.warm_start_steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / n))),
    )
    pad = int(tok.pad_token_id if tok.pad_token_id is not None else 0)
    for _ in range(n):
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
        m = torch.tensor(
            [k + [False] * (width - len(k)) for k in masks], device=cfg.device
        )  # (B, T)
        attn = (
            torch.arange(width, device=cfg.device)[None]
            < torch.tensor([len(s) for s in seqs], device=cfg.device)[:, None]
        ).long()
        logits = model(input_ids=x, attention_mask=attn).logits[:, :-1].float()  # (B, T-1, V)
        nll = torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), x[:, 1:], reduction="none"
        )  # (B, T-1)
        loss = (nll * m[:, 1:]).sum() / m[:, 1:].sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.eval()
    print(
        f"gapwatch: warm start built in {time.perf_counter() - t0:.0f} s (final loss {loss.item():.3f})",
        flush=True,
    )
    return model, tok
