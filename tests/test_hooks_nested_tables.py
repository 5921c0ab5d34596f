"""A hooked original kept in a table deeper than the sweep's one level: set, never silent.

Engines register their functions in tables as the module runs: ``@OPS.register("tok")``
into ``class OpRegistry(dict)`` (whose ``__setitem__`` refuses a name twice), a list of
records (``RECORDS.append({"name": n, "fn": fn})``), a table per device
(``KERNELS["cuda"]["tok"]``), a ``deque``, a ``MappingProxyType``.  The sweep reads exact
``dict``/``list`` globals one level down; every call through these ran the original while
``status()`` said applied, with no finding, even where no module was imported early.  Now
the reference search (``hooks/_hidden.py``), which the unexplained count starts, sets the
item that holds the original, journaled (``unapply()`` puts it back).  A decorator's
wrapper kept in a table is named as one kept by a global is; a tuple inside a table is
neither (torch pairs each function with its op name in one: a lookup by identity).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from _hooks_support import Modules
from _plugin_app import LAUNCH, MAIN, run_script, write_app
from spawnkit.hooks import HookRegistry, HookType

_OPS = """
import collections
import types

class OpRegistry(dict):
    def __setitem__(self, name, fn):
        if name in self:
            raise KeyError(f"{name!r} is already registered")
        super().__setitem__(name, fn)

    def register(self, name):
        def add(fn):
            self[name] = fn
            return fn
        return add

OPS = OpRegistry()
RECORDS = []
KERNELS = {"cuda": {}}
QUEUE = collections.deque()

@OPS.register("tok")
def tokenize():
    return "orig"

RECORDS.append({"name": "tok", "fn": tokenize})
KERNELS["cuda"]["tok"] = tokenize
QUEUE.append(tokenize)
FROZEN = types.MappingProxyType({"tok": tokenize})
PAIRS = [("tok", tokenize)]  # a tuple inside a table: a lookup, left alone
PLAIN = {"tok": tokenize}  # the sweep's own level (the control)

def calls():
    return {
        "OPS": OPS["tok"](),
        "RECORDS": RECORDS[0]["fn"](),
        "KERNELS": KERNELS["cuda"]["tok"](),
        "QUEUE": QUEUE[0](),
        "FROZEN": FROZEN["tok"](),
        "PLAIN": PLAIN["tok"](),
    }
"""


def _hooked() -> str:
    return "hooked"


def test_tables_below_the_sweeps_level_call_the_hook_and_unapply_puts_them_back(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    ops = mods.write("ops", _OPS)
    registry.register(f"{ops}.tokenize", _hooked, HookType.REPLACE)
    registry.apply_hooks()  # imports the module: every table is filled before the hook
    module = mods.load("ops")
    assert module.calls() == dict.fromkeys(module.calls(), "hooked")
    assert module.PAIRS[0][1]() == "orig"  # not set, and not named
    assert registry.stale_holders() == []
    assert {row.target: row.state for row in registry.status()} == {f"{ops}.tokenize": "applied"}
    registry.unapply()
    assert module.calls() == dict.fromkeys(module.calls(), "orig")
    assert list(module.OPS) == ["tok"]  # set in place through dict's own method


def test_a_decorators_wrapper_kept_in_a_table_is_named(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    src = (
        "def tokenize():\n    return 'orig'\n\n"
        "def traced(fn):\n    def wrapper():\n        return fn()\n    return wrapper\n\n"
        "HANDLERS = {'tok': traced(tokenize)}\n"
    )
    ops = mods.write("ops", src)
    registry.register(f"{ops}.tokenize", _hooked, HookType.REPLACE)
    registry.apply_hooks()
    assert mods.load("ops").HANDLERS["tok"]() == "orig"  # what is named
    assert [(h["name"], h["kind"]) for h in registry.stale_holders()] == [
        ("HANDLERS['tok']() closure", "closure variable")
    ]


def test_a_named_tuple_global_is_named_as_a_tuple_global_is(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    src = (
        "from typing import NamedTuple\n\n"
        "def tokenize():\n    return 'orig'\n\n"
        "class Pair(NamedTuple):\n    fn: object\n\n"
        "NTI = Pair(tokenize)\nTUP = (tokenize,)\n"
    )
    ops = mods.write("ops", src)
    registry.register(f"{ops}.tokenize", _hooked, HookType.REPLACE)
    registry.apply_hooks()
    assert mods.load("ops").NTI.fn() == "orig"  # what is named
    assert sorted((h["name"], h["kind"]) for h in registry.stale_holders()) == [
        ("NTI[0]", "tuple item"),
        ("TUP[0]", "tuple item"),
    ]


_ENTRY = """
from {pkg} import ops

def main():
    return ops.tokenize(), ops.calls()
"""

_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def hooked():
    return "hooked"

def register():
    get_namespace({tag!r}).hooks.register("{pkg}.ops.tokenize", hooked, HookType.REPLACE)
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_worker_calls_the_hook_through_the_engines_registries(
    tmp_path: Path, method: str
) -> None:
    """No module imported early: ``apply_hooks()`` imports the target's module, whose own
    decorator fills the registries."""
    modules = {
        "ops": _OPS.replace("{", "{{").replace("}", "}}"),
        "entry": _ENTRY,
        "plugin": _PLUGIN,
    }
    app = write_app(tmp_path, "tables", LAUNCH + MAIN, {"p": "plugin:register"}, modules)
    done = run_script(app.script, method)
    assert done.returncode == 0, done.stderr
    direct, through = ast.literal_eval(done.stdout.strip().splitlines()[-1])[0]
    assert direct == "hooked"
    assert through == dict.fromkeys(through, "hooked")
