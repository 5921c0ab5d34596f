"""A hook on a method of a ``typing.Protocol`` class: the classes that conform to it without
subclassing it run their own method, never the hook, and no subclass walk can find them."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from spawnkit.hooks import HookRegistry, HookType

_SOURCE = """
from typing import Protocol


class Backend(Protocol):
    def forward(self, x: int) -> int: ...


class Plain:
    def forward(self, x: int) -> int:
        return x


class CudaBackend:  # conforms to Backend without subclassing it
    def forward(self, x: int) -> int:
        return x


class Named(Backend):  # subclasses it and keeps the Protocol's method
    pass
"""


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"proto_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(_SOURCE), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def _around(calls: list[str]) -> object:
    def hook(original, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append("hook")
        return original(*args, **kwargs)

    return hook


def test_a_hook_on_a_protocols_method_says_conforming_classes_never_run_it(module: str) -> None:
    calls: list[str] = []
    reg = HookRegistry(name=f"{module}-reg")
    reg.register(f"{module}.Backend.forward", _around(calls), HookType.AROUND)
    try:
        reg.apply_hooks()
        mod = sys.modules[module]
        assert mod.CudaBackend().forward(1) == 1 and calls == []  # structural: no hook
        mod.Named().forward(1)
        assert calls == ["hook"]  # a subclass that keeps the method runs it
        (row,) = reg.status()
        assert row.state == "applied"
        assert f"{module}.Backend is a typing.Protocol" in row.reason
        assert "without subclassing it runs its own forward, never this hook" in row.reason
        assert reg.bypassing() == {
            f"{module}.Backend.forward": [
                f"any class conforming to {module}.Backend without subclassing it"
            ]
        }
        report = reg._bypass_report()[f"{module}.Backend.forward"]
        assert "hook the forward of the classes that implement the Protocol" in report[2]
    finally:
        reg.unapply()


def test_a_plain_class_method_is_not_taken_for_a_protocols(module: str) -> None:
    reg = HookRegistry(name=f"{module}-plain")
    reg.register(f"{module}.Plain.forward", _around([]), HookType.AROUND)
    try:
        reg.apply_hooks()
        (row,) = reg.status()
        assert (row.state, row.reason) == ("applied", "")
        assert reg.bypassing() == {}
    finally:
        reg.unapply()
