"""An object that keeps a hooked original deeper than any sweep reads: named, never silent.

A web framework's route (``@app.get("/health")`` keeps the endpoint in a route object in
a list in a router in the app), a thread's target, a slotted registry entry: each keeps the
function it was handed as the target's module ran.  The sweep reads module globals, their
containers, classes and the module-level objects of the targets' own package, one level
down; every call through such an object ran the original while ``status()`` said applied.
Now a reference count the sweep's finds do not explain starts a search by reference
(``hooks/_hidden.py``): each path through an object's attribute is a stale holder, so
``status()`` says partial, a worker stops with ``ImportGuardError`` (a warning under
``<PREFIX>_IMPORT_GUARD=warn``).  Lookups (set members, dict and ``lru_cache`` keys), the
hook modules' own copies, a running frame's locals and what the sweep named are not.
The registry here; spawned and warm workers at the end; a real FastAPI app in the slow test.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from _hooks_support import Modules
from _plugin_app import LAUNCH, MAIN, guard_stops_then_warns, write_app
from spawnkit.hooks import HookRegistry, HookType
from spawnkit.hooks._stale import HIDDEN, WEAK

# A web framework of its own top-level package (so no sweep reads its objects' attributes).
_WEB = """
import functools
import threading

WORKERS = []

def background(fn):
    WORKERS.append(threading.Thread(target=fn, daemon=True))  # made, never started
    return fn

class Route:
    def __init__(self, path, endpoint):
        self.path, self.endpoint = path, endpoint

class Router:
    def __init__(self):
        self.routes = []

class App:
    def __init__(self):
        self.router = Router()

    def get(self, path):
        def add(fn):
            self.router.routes.append(Route(path, fn))
            return fn
        return add

    def call(self, path):
        return next(r.endpoint() for r in self.router.routes if r.path == path)

class Slot:
    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

@functools.lru_cache(None)
def is_plain(fn):
    return True

class Lazy:  # a proxy that loads what it stands for when asked anything, and cannot
    __slots__ = ("_target",)
    asked = []

    def __init__(self, target):
        object.__setattr__(self, "_target", target)

    @property
    def __class__(self):
        Lazy.asked.append("__class__")
        raise ImportError("loading")

    def __getattr__(self, name):
        Lazy.asked.append(name)
        raise ImportError("loading")

class BadKey:
    def __repr__(self):
        raise RuntimeError("no repr")

class Registry:
    def __init__(self):
        self.table = {}

REGISTRY = Registry()
PROXIES = []

def keep(fn):
    PROXIES.append(Lazy(fn))
    REGISTRY.table[BadKey()] = fn
    return fn
"""

_HTTP = """
from WEB import App, Slot, background, is_plain

app = App()

@app.get("/health")
def health():
    return "orig"

@background
def loop():
    return "orig"

SLOT = Slot(loop)
"""


@pytest.fixture
def web(tmp_path: Path, mods: Modules) -> Iterator[Modules]:
    """A second unique top-level package beside ``mods``, for the framework."""
    other = Modules(tmp_path)
    try:
        yield other
    finally:
        other.cleanup()


def _http(mods: Modules, web: Modules, extra: str = "") -> str:
    web.write("fw", _WEB)
    return mods.write("http", _HTTP.replace("WEB", web.name("fw")) + extra)


def _hooked() -> str:
    return "hooked"


def _hidden(registry: type[HookRegistry]) -> dict[str, str]:
    return {
        f"{h['module']}.{h['name']}": h["target"]
        for h in registry.stale_holders()
        if h["kind"] == HIDDEN
    }


@pytest.mark.parametrize("on_import", [False, True])
def test_a_route_thread_and_slot_keeping_the_original_are_named(
    mods: Modules, web: Modules, registry: type[HookRegistry], on_import: bool
) -> None:
    http = _http(mods, web)
    registry.register(f"{http}.health", _hooked, HookType.REPLACE, on_import=on_import)
    registry.register(f"{http}.loop", _hooked, HookType.REPLACE, on_import=on_import)
    registry.apply_hooks()  # imports the module: the route is made before the hook exists
    module = mods.load("http")  # (or its first import applies them, once it has run)
    assert module.health() == "hooked"
    assert module.app.call("/health") == "orig"  # what is named: the route runs the original
    assert _hidden(registry) == {
        f"{http}.app.router.routes[0].endpoint": f"{http}.health",
        f"{web.name('fw')}.WORKERS[0]._target": f"{http}.loop",
        f"{http}.SLOT.fn": f"{http}.loop",
    }
    assert {row.target: row.state for row in registry.status()} == {
        f"{http}.health": "partial",
        f"{http}.loop": "partial",
    }


_METHODS = """
from WEB import Slot

class Engine:
    @staticmethod
    def pick():
        return "orig"

    @classmethod
    def build(cls):
        return "orig"

    @classmethod
    def alone(cls):
        return "orig"

    again = alone  # a copy in its class: the sweep rebinds it

PICKERS = Slot(Engine.pick)  # the function itself
BUILDERS = Slot(Engine.build)  # a bound method of the class: it calls the function
"""


def test_a_static_or_class_method_kept_by_an_object_is_named(
    mods: Modules, web: Modules, registry: type[HookRegistry]
) -> None:
    web.write("fw", _WEB)
    eng = mods.write("eng", _METHODS.replace("WEB", web.name("fw")))
    registry.register(f"{eng}.Engine.pick", _hooked, HookType.REPLACE)
    for name in ("build", "alone"):
        registry.register(f"{eng}.Engine.{name}", lambda cls: "hooked", HookType.REPLACE)
    registry.apply_hooks()
    module = sys.modules[eng]
    assert (module.Engine.pick(), module.PICKERS.fn()) == ("hooked", "orig")
    assert (module.Engine.build(), module.BUILDERS.fn()) == ("hooked", "orig")
    assert module.Engine.again() == "hooked"
    assert _hidden(registry) == {
        f"{eng}.PICKERS.fn": f"{eng}.Engine.pick",
        f"{eng}.BUILDERS.fn.__func__": f"{eng}.Engine.build",
    }
    states = {row.target.rpartition(".")[2]: row.state for row in registry.status()}
    assert states == {"pick": "partial", "build": "partial", "alone": "applied"}


def test_a_pydantic_validator_is_named(mods: Modules, registry: type[HookRegistry]) -> None:
    """pydantic compiles a validator into its model's schema as the class is made."""
    pytest.importorskip("pydantic")
    config = mods.write(
        "config",
        """
        from pydantic import BaseModel, field_validator

        class ServerArgs(BaseModel):
            port: int = 30000

            @field_validator("port")
            @classmethod
            def check_port(cls, v):
                if v < 1024:
                    raise ValueError("the original refuses it")
                return v
        """,
    )
    registry.register(f"{config}.ServerArgs.check_port", lambda cls, v: v, HookType.REPLACE)
    registry.apply_hooks()
    with pytest.raises(ValueError, match="the original refuses it"):
        sys.modules[config].ServerArgs(port=80)  # what is named: validation runs the original
    # the compiled validator, or the decorator record it was built from: a path each
    ((path, target),) = _hidden(registry).items()
    assert target == f"{config}.ServerArgs.check_port"
    assert path.startswith(f"{config}.ServerArgs.__pydantic_") and path.endswith(".__func__")


def test_a_proxy_is_never_asked_and_a_key_without_repr_is_shown_by_type(
    mods: Modules, web: Modules, registry: type[HookRegistry]
) -> None:
    web.write("fw", _WEB)
    source = f"from {web.name('fw')} import keep\n@keep\ndef fn():\n    return 1\n"
    kept = mods.write("kept", source)
    registry.register(f"{kept}.fn", lambda: 2, HookType.REPLACE)
    registry.apply_hooks()
    fw = web.name("fw")
    assert _hidden(registry) == {
        f"{fw}.PROXIES[0]._target": f"{kept}.fn",
        f"{fw}.REGISTRY.table[<BadKey key>]": f"{kept}.fn",
    }
    assert sys.modules[fw].Lazy.asked == []  # the search read its slot, never asked it


_TABLES = """
import functools

def scale(x, factor):
    return x * factor

class Engine:
    def run(self):
        return "orig"

ENGINE = Engine()
ACTS = {"double": functools.partial(scale, factor=2)}  # a partial in a dict
HANDLERS = [ENGINE.run]  # a bound method in a list
RUN = ENGINE.run  # a bound method global: the sweep names it
"""


def test_a_partial_or_bound_method_in_a_container_is_named(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    eng = mods.write("tables", _TABLES)
    registry.register(f"{eng}.scale", lambda x, factor: -1, HookType.REPLACE)
    registry.register(f"{eng}.Engine.run", lambda self: "hooked", HookType.REPLACE)
    registry.apply_hooks()
    module = sys.modules[eng]
    assert (module.ACTS["double"](3), module.HANDLERS[0](), module.RUN()) == (6, "orig", "orig")
    assert _hidden(registry) == {
        f"{eng}.ACTS['double'].func": f"{eng}.scale",
        f"{eng}.HANDLERS[0].__func__": f"{eng}.Engine.run",
    }
    kinds = {h["name"]: h["kind"] for h in registry.stale_holders()}
    assert kinds["RUN"] == "bound method"  # once, as the sweep names it


_HUB = """
class Registry:
    def __init__(self):
        self._obj_map = {}

    def register(self, name):
        def add(cls):
            self._obj_map[name] = cls
            return cls
        return add

class Hub:
    def __init__(self):
        self.models = Registry()

HUB = Hub()  # the registry two levels down: no sweep reads it

def register_model(name):
    return HUB.models.register(name)
"""

_MODELS = """
import dataclasses
import typing
from HUBMOD import register_model

@register_model("llama")
class Llama:
    def forward(self):
        return "original"

class Sub(Llama):  # a subclass, an instance, annotations, an alias: types named, not kept
    pass

INSTANCE = Llama()

@dataclasses.dataclass
class Config:
    model: Llama = None
    models: typing.List[Llama] = dataclasses.field(default_factory=list)

ALIAS = typing.Optional[Llama]

class Pair:
    def __init__(self):
        self.kinds = (Llama, Sub)  # a tuple: a type check's operand

PAIR = Pair()
"""


def test_a_replaced_class_kept_by_a_registry_is_named(
    mods: Modules, web: Modules, registry: type[HookRegistry]
) -> None:
    hub = web.write("hub", _HUB)
    models = mods.write("models", _MODELS.replace("HUBMOD", hub))
    module = mods.load("models")
    replacement = type("Mine", (module.Llama,), {"forward": lambda self: "mine"})
    registry.register(f"{models}.Llama", replacement, HookType.REPLACE)
    registry.apply_hooks()
    kept = sys.modules[hub].HUB.models._obj_map["llama"]
    assert kept().forward() == "original"  # what is named: the registry makes the original
    assert _hidden(registry) == {f"{hub}.HUB.models._obj_map['llama']": f"{models}.Llama"}


# Another library's event bus keeping weak references (blinker's signals keep a weakref.ref
# of each receiver, a WeakMethod of a bound method); and weak lookups of its own.
_BUS = """
import weakref

class Signal:
    def __init__(self):
        self.receivers = {}

    def connect(self, fn):
        bound = hasattr(fn, "__self__") and hasattr(fn, "__func__")
        self.receivers[fn.__name__] = weakref.WeakMethod(fn) if bound else weakref.ref(fn)
        return fn

    def send(self, *args):
        return [ref()(*args) for ref in list(self.receivers.values()) if ref() is not None]

loaded = Signal()
step_done = Signal()
BY_NAME = weakref.WeakValueDictionary()  # a lookup that hands the function back
SEEN = weakref.WeakKeyDictionary()  # keyed by the function: a lookup, calls nothing
MEMBERS = weakref.WeakSet()  # a listener list: fire() calls each
TYPES = weakref.WeakSet()  # classes: every class is also held weakly by its subclass list


def fire(*args):
    return sorted(fn(*args) for fn in list(MEMBERS))
"""

_OBSERVED = """
import weakref
import BUS as bus

class Scheduler:
    def on_step(self, n):
        return "orig"

SCHED = Scheduler()
bus.step_done.connect(SCHED.on_step)

@bus.loaded.connect
def on_loaded(n):
    return "orig"

def by_name(n):
    return "orig"

bus.BY_NAME["by_name"] = by_name

def looked_up(n):
    return "orig"

bus.SEEN[looked_up] = 1
weakref.finalize(looked_up, int)  # calls its own function, once the original is gone
"""


def test_a_callback_registry_keeping_a_weak_reference_is_named(
    mods: Modules, web: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    """A weak reference is not counted: the count explained every strong one, and nothing
    was named while the signal went on calling the originals."""
    bus = web.write("bus", _BUS)
    eng = mods.write("observed", _OBSERVED.replace("BUS", bus))
    for name in ("Scheduler.on_step", "on_loaded", "by_name", "looked_up"):
        registry.register(f"{eng}.{name}", lambda r, *a: "hooked", HookType.AFTER)
    registry.apply_hooks()
    module, signals = sys.modules[eng], sys.modules[bus]
    assert (module.on_loaded(1), module.SCHED.on_step(1)) == ("hooked", "hooked")
    assert signals.loaded.send(1) == signals.step_done.send(1) == ["orig"]  # what is named
    assert signals.BY_NAME["by_name"](1) == "orig"
    weak = {
        f"{h['module']}.{h['name']}": h["target"]
        for h in registry.stale_holders()
        if h["kind"] == WEAK
    }
    assert weak == {
        f"{bus}.loaded.receivers['on_loaded']": f"{eng}.on_loaded",
        f"{bus}.step_done.receivers['on_step']._func_ref": f"{eng}.Scheduler.on_step",
        f"{bus}.BY_NAME.data['by_name']": f"{eng}.by_name",
    }
    states = {row.target.rpartition(".")[2]: row.state for row in registry.status()}
    assert states == {
        "on_step": "partial", "on_loaded": "partial", "by_name": "partial", "looked_up": "applied",
    }  # fmt: skip
    assert "connect the handler after the hooks are applied" in caplog.text
    signals.loaded.connect(module.on_loaded)  # the fix: connected after the hooks
    assert signals.loaded.send(1) == ["hooked"]


# A target module that adds its listeners to another library's ``weakref.WeakSet`` as it is
# imported: the bus calls every member, so a function kept there runs the original.
_LISTENING = """
import weakref
import BUS as bus

def on_step(n):
    return "orig"

bus.MEMBERS.add(on_step)

class Listener:
    @staticmethod
    def on_event(n):
        return "orig"

bus.MEMBERS.add(Listener.on_event)

def looked_up(n):
    return "orig"

KNOWN = {weakref.ref(looked_up)}  # a plain set of weak references: asked, never called

class Plugin:
    pass

bus.TYPES.add(Plugin)
"""


def test_a_weak_set_of_listeners_is_named_but_a_set_of_weak_references_or_a_class_is_not(
    mods: Modules, web: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    """A ``WeakSet``'s members were left out as lookups, so a function a target module added
    to a listener list as it ran was called by the bus unhooked, with ``status()`` applied."""
    bus = web.write("bus", _BUS)
    eng = mods.write("listening", _LISTENING.replace("BUS", bus))
    for name in ("on_step", "Listener.on_event", "looked_up"):
        registry.register(f"{eng}.{name}", lambda r, *a: "hooked", HookType.AFTER)
    module, signals = importlib.import_module(eng), sys.modules[bus]
    mine = type("Mine", (module.Plugin,), {})
    registry.register(f"{eng}.Plugin", mine, HookType.REPLACE)
    registry.apply_hooks()
    assert module.on_step(1) == module.Listener.on_event(1) == "hooked"
    assert signals.fire(1) == ["orig", "orig"]  # what is named: the bus calls the originals
    weak = {
        f"{h['module']}.{h['name']}": h["target"]
        for h in registry.stale_holders()
        if h["kind"] == WEAK
    }
    assert weak == {
        f"{bus}.MEMBERS.data{{on_step}}": f"{eng}.on_step",
        f"{bus}.MEMBERS.data{{Listener.on_event}}": f"{eng}.Listener.on_event",
    }
    states = {row.target.rpartition(".")[2]: row.state for row in registry.status()}
    assert states == {
        "on_step": "partial", "on_event": "partial", "looked_up": "applied", "Plugin": "applied",
    }  # fmt: skip
    assert "a `weakref.WeakSet` of listeners), connect the handler after" in caplog.text
    signals.MEMBERS.clear()  # the fix: the listener added after the hooks
    signals.MEMBERS.add(module.on_step)
    assert signals.fire(1) == ["hooked"]


def test_lookups_copies_and_what_the_sweep_names_are_not(
    mods: Modules, web: Modules, registry: type[HookRegistry]
) -> None:
    extra = textwrap.dedent("""
        import functools
        KNOWN = {health}  # a membership table
        NAMES = {health: "health"}  # a dict key: looked up, never called
        is_plain(health)  # an lru_cache key
        def trace(fn):
            @functools.wraps(fn)  # closure and __wrapped__: the sweep names the wrapper
            def wrapper(*a):
                return fn(*a)
            return wrapper
        TRACED = trace(health)
    """)
    http = _http(mods, web, extra)
    module = mods.load("http")
    mods.write("plug", f"from {http} import health as _orig\ndef hook():\n    return 'hooked'\n")
    original = module.health  # a local of running code: it ends
    registry.register(f"{http}.health", f"{mods.name('plug')}:hook", HookType.REPLACE)
    registry.apply_hooks()
    found = {h["name"]: h["kind"] for h in registry.stale_holders()}
    assert found == {
        "app.router.routes[0].endpoint": HIDDEN,
        "TRACED() closure": "closure variable",
    }
    assert original() == "orig"


def test_counts_that_explain_every_reference_search_nothing(tmp_path: Path) -> None:
    """The search is paid for only where a count is left over: not for copies the sweep
    rebinds, in a process of its own so that no other test imported the module before."""
    (tmp_path / "eng_counts").mkdir()
    (tmp_path / "eng_counts" / "__init__.py").write_text("")
    (tmp_path / "eng_counts" / "ops.py").write_text("def tok():\n    return 1\n")
    (tmp_path / "eng_counts" / "user.py").write_text(
        "from eng_counts.ops import tok\nTABLE = {'t': tok}\nLIST = [tok]\n"
    )
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import eng_counts.user
        from spawnkit.hooks import HookRegistry, HookType
        HookRegistry.register("eng_counts.ops.tok", lambda: 2, HookType.REPLACE)
        HookRegistry.apply_hooks()
        u = eng_counts.user
        print([u.tok(), u.TABLE["t"](), u.LIST[0](), "spawnkit.hooks._hidden" in sys.modules])
    """)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert ast.literal_eval(out.stdout.strip()) == [2, 2, 2, False]


_ROUTES = """
from {pkg}.fw import App

app = App()

@app.get("/health")
def health():
    return "orig"
"""

_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace


def register():
    get_namespace({tag!r}).hooks.register(
        "{pkg}.routes.health", lambda: "hooked", HookType.REPLACE
    )
"""

_ENTRY = """
from {pkg} import routes


def main():
    return routes.health(), routes.app.call("/health")
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_worker_stops_naming_the_route_or_warns(tmp_path: Path, method: str) -> None:
    modules = {
        "fw": _WEB.replace("{", "{{").replace("}", "}}"),  # (formatted with pkg and tag)
        "routes": _ROUTES,
        "entry": _ENTRY,
        "plugin": _PLUGIN,
    }
    app = write_app(tmp_path, "hidden", LAUNCH + MAIN, {"p": "plugin:register"}, modules)
    stopped, results, _ = guard_stops_then_warns(app, method)
    holder = f"{app.pkg}.routes.app.router.routes[0].endpoint ({HIDDEN})"
    assert f"{holder} holds '{app.pkg}.routes.health'" in stopped
    assert "hook a function or method it calls at each use instead" in stopped
    assert results == [("hooked", "orig")]  # the route still runs the original


_SIGNALLED = """
from {pkg} import bus


@bus.loaded.connect
def on_loaded(n):
    return "orig"
"""

_SIGNAL_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace


def register():
    get_namespace({tag!r}).hooks.register(
        "{pkg}.signalled.on_loaded", lambda n: "hooked", HookType.REPLACE
    )
"""

_SIGNAL_ENTRY = """
from {pkg} import bus, signalled


def main():
    return signalled.on_loaded(1), bus.loaded.send(1)
"""


def test_a_worker_stops_naming_a_weak_reference_or_warns(tmp_path: Path) -> None:
    modules = {
        "bus": _BUS.replace("{", "{{").replace("}", "}}"),  # (formatted with pkg and tag)
        "signalled": _SIGNALLED,
        "entry": _SIGNAL_ENTRY,
        "plugin": _SIGNAL_PLUGIN,
    }
    app = write_app(tmp_path, "weak", LAUNCH + MAIN, {"p": "plugin:register"}, modules)
    stopped, results, _ = guard_stops_then_warns(app, "spawn")
    holder = f"{app.pkg}.bus.loaded.receivers['on_loaded'] ({WEAK})"
    assert f"{holder} holds '{app.pkg}.signalled.on_loaded'" in stopped
    assert "connect the handler after the hooks are applied" in stopped
    assert results == [("hooked", ["orig"])]  # the signal still calls the original


_FASTAPI = """
from fastapi import FastAPI

app = FastAPI()


@app.get("/health")
async def health():
    return {{"ok": "orig"}}
"""

_FASTAPI_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace


async def health():
    return {{"ok": "hooked"}}


def register():
    get_namespace({tag!r}).hooks.register("{pkg}.http.health", health, HookType.REPLACE)
"""

_FASTAPI_ENTRY = """
import asyncio
from {pkg} import http


def main():
    (route,) = [r for r in http.app.router.routes if getattr(r, "path", "") == "/health"]
    direct = asyncio.run(http.health())["ok"]
    return direct, asyncio.run(route.endpoint())["ok"], asyncio.run(route.dependant.call())["ok"]
"""


@pytest.mark.slow
def test_a_real_fastapi_route_is_named(tmp_path: Path) -> None:
    """FastAPI, downloaded now: the endpoint a plugin hooked is named in the worker's error;
    allowed to run, the route's own handler (``dependant.call``) runs the original."""
    from spawnkit.testing import make_venv, pip_install

    wheels = tmp_path / "wheels"
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "-d", str(wheels), "fastapi==0.165.0"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if got.returncode != 0:
        pytest.skip(f"fastapi==0.165.0 is not downloadable here: {got.stderr[-500:]}")
    python = make_venv(tmp_path / "venv")
    pip_install(python, "fastapi==0.165.0", args=("--find-links", str(wheels)))
    modules = {
        "http": _FASTAPI,
        "entry": _FASTAPI_ENTRY,
        "plugin": _FASTAPI_PLUGIN,
    }
    app = write_app(tmp_path, "fastapi", LAUNCH + MAIN, {"p": "plugin:register"}, modules)

    def run(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(python), str(app.script), "spawn"], capture_output=True, text=True,
            timeout=300, cwd=tmp_path, env={**os.environ, **env},
        )  # fmt: skip

    proc = run()
    assert proc.returncode != 0
    assert "ImportGuardError" in proc.stderr, proc.stderr
    assert re.search(
        rf"{app.pkg}\.http\.app\.router\.routes\[\d+\]\.endpoint \({re.escape(HIDDEN)}\) "
        rf"holds '{app.pkg}\.http\.health'",
        proc.stderr,
    ), proc.stderr
    lenient = run(**{f"{app.tag.upper()}_IMPORT_GUARD": "warn"})
    assert lenient.returncode == 0, lenient.stderr
    assert ast.literal_eval(lenient.stdout.strip().splitlines()[-1]) == [("hooked", "orig", "orig")]


# Another package's table of activations, as an Enum keeps its members' values: the class
# holds one original a level above the other (``Acts.TANH.fn``, ``Acts.RELU.fn.func``).
_ACTS = """
import functools
from OPS import relu, tanh

class Spec:
    def __init__(self, fn):
        self.fn = fn

class Acts:
    TANH = Spec(tanh)
    RELU = Spec(functools.partial(relu))
"""

_OPS = """
def relu(x):
    return ("relu", x)

def tanh(x):
    return ("tanh", x)

import CFG  # the engine's config package, imported as the apply imports this module
"""


def test_each_holder_is_named_once_when_its_class_is_met_again_a_level_higher(
    mods: Modules, web: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    """The search met ``Acts`` through ``TANH``, then again a level higher through ``RELU``:
    its module named every path it had each time, so the logged warning counted 3 references
    and listed ``Acts.TANH.fn`` twice (``stale_holders()`` was deduplicated, the log was
    not; an Enum of ``functools.partial`` and ``enum.member`` values did the same)."""
    ops, cfg = mods.name("ops"), web.name("cfg")
    web.write("cfg", _ACTS.replace("OPS", ops))
    mods.write("ops", _OPS.replace("CFG", cfg))
    registry.register(f"{ops}.relu", lambda r, x: ("hooked", r), HookType.AFTER)
    registry.register(f"{ops}.tanh", lambda r, x: ("hooked", r), HookType.AFTER)
    with caplog.at_level("WARNING", logger="spawnkit.hooks"):
        registry.apply_hooks()
    assert _hidden(registry) == {
        f"{cfg}.Acts.TANH.fn": f"{ops}.tanh",
        f"{cfg}.Acts.RELU.fn.func": f"{ops}.relu",
    }
    (message,) = [m for m in caplog.messages if "could not be rebound" in m]
    assert message.startswith("2 reference(s)"), message
    assert message.count("Acts.TANH.fn ") == message.count("Acts.RELU.fn.func ") == 1
