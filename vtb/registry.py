"""One registry idiom for everything chosen by name in a config: domains (task=), research agents
(agent=) and sandbox backends (sandbox.backend=).

A name is found, in order: among those registered so far (`@registry.register("name")`); in its
built-in module, imported on first use (the project's own kinds, found by a naming convention);
through a package entry point in the registry's group, so an outside package adds a kind with no
edit to this repository:

    [project.entry-points."vtb.agents"]          # in the outside package's pyproject.toml
    my_agent = "my_package.agent:MyAgent"          # the factory itself, or a module that registers it

A leaf module: no project imports.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from importlib import metadata
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """name -> factory for one kind of component."""

    def __init__(
        self, kind: str, group: str, builtin: Callable[[str], str | None], known: Iterable[str] = ()
    ):
        self.kind, self.group = kind, group  # e.g. "agent", "vtb.agents"
        self._builtin = builtin  # name -> the module that registers it, or None
        self._known = tuple(known)  # built-in names, listed in the error for an unknown one
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: `@REGISTRY.register("name")` on a factory (a class or a function)."""

        def deco(factory: T) -> T:
            self._items[name] = factory
            return factory

        return deco

    def get(self, name: str) -> T:
        """The factory registered under `name`, loading its built-in module or entry point first."""
        if name not in self._items:
            self._load(name)
        if name not in self._items:
            raise ValueError(f"unknown {self.kind} {name!r}; available: {', '.join(self.names())}")
        return self._items[name]

    def names(self) -> list[str]:
        """Every name this registry can give: registered, built-in and outside packages'."""
        outside = {ep.name for ep in metadata.entry_points(group=self.group)}
        return sorted({*self._items, *self._known, *outside})

    def _load(self, name: str) -> None:
        module = self._builtin(name) if name.isidentifier() else None
        if module:
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as e:
                if not (e.name and module.startswith(e.name)):
                    raise  # the module exists but an import inside it failed: show that error
        if name in self._items:
            return
        for ep in metadata.entry_points(group=self.group, name=name):
            loaded = ep.load()  # a module that registers `name` on import, or the factory itself
            if name not in self._items and callable(loaded):
                self._items[name] = loaded
            return
