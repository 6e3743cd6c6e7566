"""Who each log of a fleet is: fields from its path (``--layout``) or a manifest, its role,
its pair, and the stop actions templated with them.

Pure string and path work (no store, no processes), so it is tested alone:

- :class:`Layout`: ``runs/{correction}-s{seed}/metrics.jsonl`` -> a glob that finds the logs
  and a regex that reads each one's fields (``seed`` is digits; any other name is a path
  part without ``/``); a layout relative to nothing matches the end of a path.
- :func:`parse_control_when`: ``correction=none,codec=dense`` -> the fields a control has;
  without it, a run whose codec and correction are both absent, ``none`` or ``dense`` is
  the control of its seed (:func:`is_control`).
- :func:`load_manifest`: a YAML mapping of log path -> fields (``seed``, ``codec``,
  ``correction``, ``control: true``, and any other name the templates use).
- :func:`render`: ``scancel {job}`` with the run's fields, one clear error for a missing one.

Call :func:`fields_of` for a path's fields, :func:`identity_of` for its store identity.
"""

from __future__ import annotations

import glob as globlib
import re
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gapwatch.store import identity

DENSE_WORDS = frozenset({"", "none", "dense"})
"""Codec or correction values that mean "not compressed" / "not corrected"."""
ARM_FIELDS = ("seed", "codec", "correction")
"""Fields every run has a value for (absent ones are filled as the identity needs)."""


class LayoutError(ValueError):
    """A layout, manifest or template a user gave that cannot be used (one line)."""


class Layout:
    """A path template with named fields: a glob to find logs, a regex to read them."""

    def __init__(self, template: str) -> None:
        self.template = template
        parts: list[str] = []
        globbed: list[str] = []
        self.fields: list[str] = []
        for literal, name, spec, _conv in string.Formatter().parse(template):
            parts.append(re.escape(literal))
            globbed.append(globlib.escape(literal))
            if name is None:
                continue
            if not name.isidentifier() or spec:
                raise LayoutError(
                    f"--layout {template!r}: {{{name}{':' + spec if spec else ''}}} is not a "
                    "field; name fields like {seed}, {correction}, {job}"
                )
            if name in self.fields:  # the same field twice must read the same text
                parts.append(f"(?P={name})")
            else:
                self.fields.append(name)
                parts.append(rf"(?P<{name}>-?\d+)" if name == "seed" else rf"(?P<{name}>[^/]+?)")
            globbed.append("*")
        if not self.fields:
            raise LayoutError(
                f"--layout {template!r} names no field; e.g. 'runs/{{correction}}-s{{seed}}/metrics.jsonl'"
            )
        self.glob = "".join(globbed)
        """Where the logs are: the template with each field as ``*``."""
        body = "".join(parts)
        anchored = template.startswith("/")
        self._re = re.compile(("^" if anchored else r"(?:^|/)") + body + "$")

    def match(self, path: str | Path) -> dict[str, str] | None:
        """The fields read from ``path`` (None where it does not fit the layout)."""
        text = Path(path).as_posix()
        if text.startswith("./"):
            text = text[2:]
        m = self._re.search(text)
        return None if m is None else {k: v for k, v in m.groupdict().items() if v is not None}


def parse_control_when(text: str | None) -> dict[str, str] | None:
    """``correction=none,codec=dense`` -> ``{"correction": "none", "codec": "dense"}``;
    None: the default rule (:func:`is_control`)."""
    if text is None or not text.strip():
        return None
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip().isidentifier():
            raise LayoutError(
                f"--control-when {text!r}: write field=value pairs, e.g. correction=none"
            )
        out[key.strip()] = value.strip()
    return out


def is_control(fields: Mapping[str, Any], when: Mapping[str, str] | None) -> bool:
    """Whether the run with ``fields`` is its seed's control: an explicit ``control``
    field, else every ``when`` pair matches, else codec and correction are both dense."""
    if "control" in fields:
        value = fields["control"]
        return value is True or str(value).lower() in ("true", "yes", "1")
    if when is not None:
        return all(str(fields.get(k, "")) == v for k, v in when.items())
    return all(str(fields.get(k, "")).lower() in DENSE_WORDS for k in ("codec", "correction"))


def load_manifest(path: Path) -> dict[Path, dict[str, Any]]:
    """A YAML mapping ``log path -> {seed, codec, correction, control, ...}``; paths
    relative to the manifest's folder."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise LayoutError(f"--manifest {path}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise LayoutError(f"--manifest {path}: not YAML ({' '.join(str(exc).split())})") from None
    if isinstance(data, dict) and isinstance(data.get("runs"), dict):
        data = data["runs"]
    if not isinstance(data, dict) or not data:
        raise LayoutError(
            f"--manifest {path}: write one entry per log, "
            "'runs/a/metrics.jsonl: {seed: 0, codec: topk, correction: tis}'"
        )
    out: dict[Path, dict[str, Any]] = {}
    for log, fields in data.items():
        if fields is None:
            fields = {}
        if not isinstance(fields, dict):
            raise LayoutError(
                f"--manifest {path}: the entry for {log} is {fields!r}; give a mapping "
                "like {seed: 0, correction: tis}"
            )
        p = Path(str(log)).expanduser()
        out[p if p.is_absolute() else path.parent / p] = {str(k): v for k, v in fields.items()}
    return out


def template_fields(template: str) -> list[str]:
    """The field names a template uses (``{dir}/train.pid`` -> ``["dir"]``)."""
    try:
        return [n for _l, n, _s, _c in string.Formatter().parse(template) if n]
    except ValueError as exc:
        raise LayoutError(f"template {template!r}: {exc}") from None


def render(template: str, fields: Mapping[str, Any]) -> str:
    """``template`` with ``{name}`` replaced by the run's fields."""
    missing = [n for n in template_fields(template) if n not in fields]
    if missing:
        raise LayoutError(
            f"{template!r} names {', '.join('{' + m + '}' for m in missing)}, which this run "
            f"lacks (it has {', '.join(sorted(fields))})"
        )
    return template.format_map(dict(fields))


def _seed(fields: Mapping[str, Any], where: str) -> int:
    try:
        return int(fields.get("seed", 0))
    except (TypeError, ValueError):
        raise LayoutError(f"{where}: seed {fields.get('seed')!r} is not an integer") from None


def pair_key(sweep: str, fields: Mapping[str, Any]) -> str:
    """The pair a run belongs to: its sweep and seed (or an explicit ``pair`` field)."""
    if "pair" in fields:
        return f"{sweep}/{fields['pair']}"
    return f"{sweep}/s{_seed(fields, sweep)}"


def identity_of(
    sweep: str, fields: Mapping[str, Any], control: bool, where: str
) -> identity.RunIdentity:
    """The store identity of a fleet's run (the one ``store.identity`` labels every run
    with): controls are dense and uncorrected; a treatment's missing codec is ``unknown``."""
    codec = str(fields.get("codec", "")) or ("none" if control else "unknown")
    corr = str(fields.get("correction", "")) or "none"
    if control:
        codec, corr = identity.DENSE, identity.NO_CORRECTION
    elif codec.lower() == "dense":
        codec = "unknown"  # a treatment with a dense codec: a label, not the control's
    return identity.RunIdentity(
        seed=_seed(fields, where), task=str(fields.get("task", "watch")),
        model=str(fields.get("model", "fleet")), settings="external", codec=codec,
        correction=corr, role="control" if control else "treatment",
        pair=pair_key(sweep, fields),
    )  # fmt: skip
