"""What every gapwatch config validates with: pydantic, numbers that refuse true/false,
and one wording for every error.

Run configs (``workers.RunConfig``), sweep configs (``orchestrator.sweep.config``) and the
parameters of rules and correction strategies are all checked by pydantic through the
pieces here, so a mistake reads the same wherever it is made:

- ``unknown key 'stepz'; valid: name, env, ...`` for a misspelt field;
- ``unknown correction 'magic'; valid: icepop, none, ...`` for a name no registry has
  (:func:`check_name`);
- ``<where>: <field>: <what is wrong>`` for a bad value, on one line.

YAML reads ``2e-4`` as a string and ``yes`` as true: floats accept numeric strings
(pydantic's lax mode), but a true/false never passes for a number (:data:`Int`,
:data:`Float`), and a number must be finite.
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationError,
    create_model,
)


def _not_bool(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError(f"expected a number, got {str(v).lower()}")
    return v


def _finite(v: float) -> float:
    if not math.isfinite(v):
        raise ValueError(f"expected a finite number, got {v}")
    return v


Int = Annotated[int, BeforeValidator(_not_bool)]
"""An integer; true/false refused (pydantic would read them as 1/0)."""
Float = Annotated[float, BeforeValidator(_not_bool), AfterValidator(_finite)]
"""A finite float; ints and numeric strings (YAML's ``2e-4``) accepted, true/false refused."""


class Strict(BaseModel):
    """Base of gapwatch's config models: unknown keys refused, docstrings kept as docs."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class ConfigError(ValueError):
    """A config that does not validate, said in one line."""


def check_name(kind: str, name: Any, valid: Iterable[str]) -> str:
    """``name`` if it is one of ``valid``, else ValueError ``unknown <kind> ...; valid: ...``."""
    choices = list(valid)
    if not isinstance(name, str) or name not in choices:
        raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(choices)}")
    return name


def unknown_keys(kind: str, given: Iterable[str], valid: Iterable[str]) -> None:
    """ValueError ``unknown <kind> 'x'; valid: ...`` for any key of ``given`` not in ``valid``."""
    known = list(valid)
    extra = [k for k in given if k not in known]
    if extra:
        names = ", ".join(repr(k) for k in extra)
        raise ValueError(f"unknown {kind} {names}; valid: {', '.join(known)}")


def _fields_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str] | None:
    """Field names of the (nested) model at ``loc``, where a plain model path leads there."""
    for part in loc:
        if model is None:
            return None
        info = model.model_fields.get(str(part))
        ann = getattr(info, "annotation", None)
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    return list(model.model_fields) if model is not None else None


def describe(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One line for every error in ``exc``: ``loc: message``, joined by ``; ``."""
    parts = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        where = ".".join(str(p) for p in loc)
        if err["type"] == "extra_forbidden":
            valid = _fields_at(model, loc[:-1])
            msg = f"unknown key {str(loc[-1])!r}"
            if valid:
                msg += f"; valid: {', '.join(valid)}"
            where = ".".join(str(p) for p in loc[:-1])
        elif err["type"] == "missing":
            msg = "required field missing"
        else:
            msg = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(" ".join(p.split()) for p in parts)


def _strict(tp: Any) -> Any:
    """``tp`` with ``int``/``float`` (also inside ``X | None``) swapped for Int/Float."""
    if tp is float:
        return Float
    if tp is int:
        return Int
    args = typing.get_args(tp)
    if args and typing.get_origin(tp) in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, [_strict(a) for a in args])
    return tp


@functools.cache
def params_model(factory: Callable[..., Any]) -> type[BaseModel]:
    """A pydantic model of ``factory``'s keyword parameters (types from its annotations,
    defaults from its signature), so a factory's keywords validate like any config."""
    hints = typing.get_type_hints(factory)
    fields: dict[str, Any] = {}
    for p in inspect.signature(factory).parameters.values():
        if p.default is inspect.Parameter.empty:
            continue
        fields[p.name] = (_strict(hints.get(p.name, Any)), p.default)
    return create_model(  # type: ignore[call-overload,no-any-return]
        f"{factory.__name__}_params", __config__=ConfigDict(extra="forbid"), **fields
    )


def resolve_params(
    what: str, factory: Callable[..., Any], given: Mapping[str, Any]
) -> dict[str, Any]:
    """``given`` checked against ``factory``'s keywords and completed with their defaults
    (in the factory's order). ``what`` names it in the one-line error (``correction 'tis'``)."""
    model = params_model(factory)
    if not isinstance(given, Mapping):
        raise ValueError(f"{what}: parameters must be a mapping of name: value, got {given!r}")
    try:
        return model(**dict(given)).model_dump()
    except ValidationError as exc:
        raise ValueError(f"{what}: {describe(exc, model)}") from None
