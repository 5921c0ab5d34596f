"""How a bootstrapping context's child that never reached its target is told apart, in real
processes: a stage that raised a ``BaseException`` or called ``sys.exit()``, and a bootstrap
that ended with no word at all (a segfault in a plugin, ``os._exit``, the OOM killer).

The engine is ``_context_support``'s; a second plugin distribution (``crashplug``) does what
``<PREFIX>_CRASH`` says in its ``register()``, and holds targets that fail on their own,
after the bootstrap.  Every wait in the scripts is bounded: the old pool respawned its dying
workers forever, and a test of that must fail by its timeout, not hang the suite.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from _context_support import Engine, make_engine
from spawnkit.testing import write_distribution

CRASH_PLUGIN = """
    import ctypes, os, signal, sys

    def register():
        kind = os.environ.get("{prefix}_CRASH", "")
        if kind == "kbint":
            raise KeyboardInterrupt("crashplug interrupted")
        if kind == "exit":
            sys.exit(3)
        if kind == "oexit0":
            os._exit(0)
        if kind == "segv":
            ctypes.string_at(0)

    def exit_with(code):  # targets: what they do happens after the bootstrap
        sys.exit(code)

    def crash(x=None):
        os.kill(os.getpid(), signal.SIGSEGV)

    def square(x):
        return x * x
    """


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    found = make_engine(tmp_path)
    uid = uuid.uuid4().hex[:8]
    write_distribution(
        tmp_path / "site",
        f"crashplug-{uid}",
        "1.0",
        entry_points={f"{found.ns}.plugins": {"crashplug": f"crashplug_{found.eng}:register"}},
        modules={f"crashplug_{found.eng}": found.fmt(CRASH_PLUGIN)},
    )
    return found


STAGE_OF_AN_EXIT = """
    import json, os
    import spawnkit
    from {eng}.ns import NS
    from crashplug_{eng} import square

    if __name__ == "__main__":
        out = {{}}
        for kind in ("kbint", "exit"):
            os.environ["{prefix}_CRASH"] = kind
            p = spawnkit.get_context("spawn", namespace=NS).Process(target=square, args=(2,))
            p.start()
            p.join(60)
            err = p.bootstrap_error()
            out[kind] = {{"exitcode": p.exitcode, "stage": getattr(err, "stage", None),
                         "text": str(err).splitlines()[0] if err else ""}}
        print(json.dumps(out))
    """


def test_an_interrupt_or_exit_in_a_stage_names_that_stage(engine: Engine) -> None:
    """A ``KeyboardInterrupt`` or ``sys.exit()`` passes a stage unwrapped: it was blamed on
    ``process_start`` whatever stage raised it."""
    out, _ = engine.run(STAGE_OF_AN_EXIT, timeout=240)
    said = {"kbint": "KeyboardInterrupt: crashplug interrupted", "exit": "SystemExit: 3"}
    for kind, what in said.items():
        assert out[kind]["exitcode"] == 70, out
        assert out[kind]["stage"] == "load_plugins", out
        assert f"bootstrap stage 'load_plugins' failed: {what}" in out[kind]["text"], out
