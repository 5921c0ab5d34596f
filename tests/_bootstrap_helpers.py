"""Shared by the bootstrap/plugin tests: a throwaway engine + real plugin distributions, and
child-process targets run through spawnkit's guarded spawn context.

This module is imported in the spawned children too (they inherit ``sys.path``),
so it imports only spawnkit and the standard library at module level.
"""

from __future__ import annotations

import contextlib
import pickle
import sys
import textwrap
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spawnkit.namespace import Namespace
from spawnkit.spec import Payload, ProcessSpec
from spawnkit.testing import write_distribution

CHILD_TIMEOUT = 90.0

ENGINE_MODULES = {
    "{eng}.events": "EVENTS = []\n",
    "{eng}.sched": """
        from {eng}.events import EVENTS
        EVENTS.append("import sched")

        class Scheduler:
            def run(self):
                return "orig"
        """,
    "{eng}.config": """
        from {eng}.events import EVENTS

        class ServerArgs:
            def __init__(self, n):
                self.n = n

            def __setstate__(self, state):
                # What a real config graph does on unpickling: import engine modules.
                from {eng}.sched import Scheduler
                EVENTS.append("unpickle:" + Scheduler().run())
                self.__dict__.update(state)
        """,
    "{eng}.worker": """
        from {eng}.events import EVENTS

        def main(args=None):
            from spawnkit.bootstrap import current_report, current_spec
            from {eng}.sched import Scheduler
            EVENTS.append("entry")
            report = current_report()
            return {{
                "result": Scheduler().run(),
                "events": list(EVENTS),
                "payload": None if args is None else args.n,
                "report": report.to_dict() if report is not None else None,
                "rank": current_spec().rank,
            }}

        def boom(args=None):
            raise KeyError("entry failed on purpose")

        NOT_CALLABLE = 3
        """,
}

PLATFORM_MODULES = {
    "{plat}.__init__": """
        def activate():
            return "{plat}.platform.TestPlatform"
        """,
    "{plat}.platform": """
        from spawnkit.platforms.interface import Platform, PlatformEnum

        class TestPlatform(Platform):
            _enum = PlatformEnum.OOT
            device_name = "testdev"
            device_type = "cpu"

            def init_backend(self):
                import os
                from {eng}.events import EVENTS
                EVENTS.append("platform init")
                if os.environ.get("{PREFIX}_TEST_IMPORT_TARGET_IN_INIT"):
                    import {eng}.sched  # a platform importing a hook target too early
        """,
}

#: The default general plugin: AROUND hook on Scheduler.run, given as a string.
AROUND_PLUGIN = """
    import sys
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    from {eng}.events import EVENTS

    NS = Namespace("{ns}", "{PREFIX}")

    def around(original, self, *args, **kwargs):
        return "patched:" + original(self, *args, **kwargs)

    def register():
        EVENTS.append(("plugin {name}", "{eng}.sched" in sys.modules))
        NS.hooks.register("{eng}.sched.Scheduler.run", "{mod}:around", HookType.AROUND)
    """


@dataclass
class World:
    """An engine package, its namespace and the plugin distributions written for one test."""

    root: Path
    ns: Namespace
    eng: str
    plat: str
    prefix: str
    plugins: dict[str, str] = field(default_factory=dict)  # entry name -> module

    def fmt(self, text: str, **extra: str) -> str:
        return textwrap.dedent(text).format(
            eng=self.eng, plat=self.plat, ns=self.ns.name, PREFIX=self.prefix, **extra
        )

    def add_plugin(
        self,
        name: str,
        source: str = AROUND_PLUGIN,
        *,
        dist: str | None = None,
        version: str = "1.0",
        value: str | None = None,
        extra_modules: dict[str, str] | None = None,
        platform_entry: str | None = None,
    ) -> str:
        """Write a real distribution providing plugin ``name``; returns its module name."""
        mod = f"{self.eng}_plug_{name}"
        dist = dist or f"{mod.replace('_', '-')}"
        modules = {mod: self.fmt(source, name=name, mod=mod)}
        for key, text in (extra_modules or {}).items():
            modules[key.format(mod=mod)] = self.fmt(text, name=name, mod=mod)
        eps: dict[str, dict[str, str]] = {
            self.ns.config.plugin_group: {name: value or f"{mod}:register"}
        }
        if platform_entry is not None:
            eps[self.ns.config.platform_group] = {platform_entry: f"{self.plat}:activate"}
        write_distribution(
            self.root / f"d_{name}", dist, version, entry_points=eps, modules=modules
        )
        sys.path.insert(0, str(self.root / f"d_{name}"))
        self.plugins[name] = mod
        return mod

    def spec(self, **changes: Any) -> ProcessSpec:
        base: dict[str, Any] = {
            "entry": f"{self.eng}.worker:main",
            "namespace": self.ns.config,
            "platform": "testdev",
        }
        base.update(changes)
        return ProcessSpec(**base)

    def payload(self, n: int) -> Payload:
        """A ``ServerArgs`` payload; its unpickling in the child imports the hook target."""
        import importlib

        return Payload.capture(importlib.import_module(f"{self.eng}.config").ServerArgs(n))


@contextlib.contextmanager
def isolated_imports() -> Iterator[None]:
    """Restore ``sys.path`` and drop modules imported meanwhile (test engines and plugins)."""
    from spawnkit import _metadata

    saved_path = list(sys.path)
    saved_modules = set(sys.modules)
    try:
        yield
    finally:
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_modules:
            if name.split(".")[0].startswith(("eng_", "plat_")):
                del sys.modules[name]
        _metadata.clear_cache()


def make_world(tmp_path: Path, *, platform: bool = True) -> World:
    """Write the engine (and a platform plugin distribution) under ``tmp_path``; extend sys.path.

    Callers restore ``sys.path``/``sys.modules`` with the ``restore_imports`` fixture.
    """
    uid = uuid.uuid4().hex[:8]
    eng, plat, prefix = f"eng_{uid}", f"plat_{uid}", f"T_{uid.upper()}"
    ns = Namespace(f"t_{uid}", prefix)
    world = World(tmp_path, ns, eng, plat, prefix)
    engine_root = tmp_path / "engine"
    modules = {k.format(eng=eng): world.fmt(v) for k, v in ENGINE_MODULES.items()}
    write_distribution(engine_root, f"engine-{uid}", "0.1", modules=modules)
    sys.path.insert(0, str(engine_root))
    if platform:
        pmods = {k.format(plat=plat): world.fmt(v) for k, v in PLATFORM_MODULES.items()}
        write_distribution(
            tmp_path / "platform",
            f"plat-{uid}",
            "2.0",
            entry_points={ns.config.platform_group: {"testdev": f"{plat}:activate"}},
            modules=pmods,
        )
        sys.path.insert(0, str(tmp_path / "platform"))
    return world


# ----------------------------------------------------------- child targets
class RecordingListener:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def stage_started(self, stage: str) -> None:
        self.events.append(("started", stage))

    def stage_finished(self, stage: str, seconds: float) -> None:
        self.events.append(("finished", stage))

    def ready(self, report: Any) -> None:
        self.events.append(("ready", report.to_dict()))


def _safe_exc(exc: BaseException) -> Any:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return None
    return exc


def child_bootstrap(spec: ProcessSpec, conn: Any) -> None:
    """Run the whole bootstrap; send ``(status, value, listener events, traceback)``."""
    from spawnkit.bootstrap import bootstrap_process

    listener = RecordingListener()
    try:
        result = bootstrap_process(spec, listener=listener)
    except BaseException as exc:
        conn.send(("error", _safe_exc(exc), listener.events, traceback.format_exc()))
    else:
        conn.send(("ok", result, listener.events, ""))
    conn.close()


def child_stages(spec: ProcessSpec, conn: Any, calls: list[str]) -> None:
    """Call Bootstrapper methods (or ``payload`` / ``lazy:<ref>``) in the given order.

    Sends one outcome per call: ``("ok", None)`` or ``("error", exception)``.
    """
    from spawnkit.bootstrap import Bootstrapper, lazy

    boot = Bootstrapper(spec)
    outcomes: list[Any] = []
    for call in calls:
        try:
            if call == "payload":
                assert spec.payload is not None
                spec.payload.materialize()
            elif call.startswith("lazy:"):
                lazy(call[5:]).__name__  # noqa: B018 - reading it is the test
            else:
                getattr(boot, call)()
        except Exception as exc:
            outcomes.append(("error", _safe_exc(exc) or repr(exc)))
        else:
            outcomes.append(("ok", None))
    conn.send(outcomes)
    conn.close()


def run_child(target: Any, *args: Any, timeout: float = CHILD_TIMEOUT) -> Any:
    """Start ``target(*args, conn)`` in a guarded spawned child; bounded wait; never leaks it."""
    from spawnkit.protocol.popen import spawn_context

    ctx = spawn_context()
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(*args[:1], writer, *args[1:]), daemon=True)
    proc.start()
    writer.close()
    try:
        if not reader.poll(timeout):
            raise TimeoutError(f"child {proc.pid} sent nothing within {timeout}s")
        return reader.recv()
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=10)
        reader.close()
