"""One small registry type behind the workers' named parts (envs, codecs, samplers).

A registry maps a name to a factory, filled by one decorator (STYLE.md #1): a name
registered twice is rejected, an unknown name fails listing the valid ones, and the
registry is the single source of names for config validation, the CLI and Tune.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class Registry(Generic[T]):
    """Factories of ``T`` by name. ``kind`` names the part in error messages ("codec")."""

    def __init__(self, kind: str, unknown_label: str | None = None) -> None:
        self.kind = kind
        self.unknown_label = unknown_label or kind
        self._factories: dict[str, Callable[..., T]] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: register a factory under ``name`` (once)."""

        def deco(factory: F) -> F:
            if name in self._factories:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._factories[name] = factory
            return factory

        return deco

    def names(self) -> list[str]:
        """Sorted registered names."""
        return sorted(self._factories)

    def factory(self, name: str) -> Callable[..., T]:
        """The factory for ``name``; an unknown name fails listing the valid ones."""
        if name not in self._factories:
            raise ValueError(
                f"unknown {self.unknown_label} {name!r}; valid: {', '.join(self.names())}"
            )
        return self._factories[name]

    def params(self, name: str) -> dict[str, Any]:
        """The keyword parameters of ``name``'s factory with their defaults, in order."""
        sig = inspect.signature(self.factory(name))
        return {
            p.name: p.default
            for p in sig.parameters.values()
            if p.default is not inspect.Parameter.empty
        }

    def build(self, name: str, kwargs_field: str, /, **kwargs: Any) -> T:
        """``factory(name)(**kwargs)``; a bad keyword fails naming ``kwargs_field``."""
        factory = self.factory(name)
        try:
            return factory(**kwargs)
        except TypeError as exc:
            raise ValueError(f"bad {kwargs_field} for {name!r}: {exc}") from None
