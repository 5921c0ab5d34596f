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
    import ctypes, os, signal, sys, time

    def register():
        kind = os.environ.get("{prefix}_CRASH", "")
        if kind == "hang":  # a worker still starting when its warm server ends
            time.sleep(60)
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
        modules={
            f"crashplug_{found.eng}": found.fmt(CRASH_PLUGIN),
            f"late_{found.eng}": LATE_TARGET,
            f"ending_{found.eng}": ENDING_SERVER,
        },
    )
    return found


#: A target whose module raises as a child imports it (the parent imported it fine): the child
#: loads its target after the hooks, past every stage.
LATE_TARGET = """
import multiprocessing

if multiprocessing.parent_process() is not None:
    raise RuntimeError("late module refuses to load in a child")

def late_square(x):
    return x * x
"""


#: A preload: its warm server, sent SIGTERM, ends as a SIGKILLed process does, only slower:
#: its descriptors (its workers' status pipes) close first, and it is reapable only after.
ENDING_SERVER = """
import os, signal, time

def _end(signum, frame):
    os.closerange(3, 1 << 16)
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)

signal.signal(signal.SIGTERM, _end)
"""


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


NO_WORD = """
    import json, os, threading
    from concurrent.futures import ProcessPoolExecutor
    import spawnkit
    from {eng}.ns import NS
    from crashplug_{eng} import square

    def pool(ctx):
        p = ctx.Pool(2)
        try:
            p.map_async(square, range(4), chunksize=1).get(timeout=30)
            return {{"error": "none"}}
        except Exception as exc:
            return {{"error": type(exc).__name__, "text": str(exc),
                    "stage": getattr(exc, "stage", ""), "signal": getattr(exc, "signal_name", "")}}
        finally:
            ended = threading.Thread(target=p.terminate, daemon=True)
            ended.start()
            ended.join(30)

    def executor(ctx):
        ex = ProcessPoolExecutor(1, mp_context=ctx)
        try:
            ex.submit(square, 3).result(timeout=30)
            return {{"error": "none"}}
        except Exception as exc:
            return {{"error": type(exc).__name__, "cause": str(exc.__cause__)}}
        finally:
            ex.shutdown(wait=False, cancel_futures=True)

    if __name__ == "__main__":
        out = {{}}
        for kind, method in (("segv", "spawn"), ("oexit0", "spawn"), ("segv", "fork")):
            os.environ["{prefix}_CRASH"] = kind
            ctx = spawnkit.get_context(method, namespace=NS)
            out[f"{{kind}} {{method}} pool"] = pool(ctx)
            out[f"{{kind}} {{method}} executor"] = executor(ctx)
        print(json.dumps(out))
        os._exit(0)  # the old pool's endless workers must not hold the script up
    """


def test_a_bootstrap_that_ends_with_no_word_fails_the_pool_and_the_executor(
    engine: Engine,
) -> None:
    """A plugin that segfaults (or calls ``os._exit``) as it loads: the pool replaced its
    dying workers forever (``map()`` never returned), the executor's ``BrokenProcessPool``
    had no cause, and the child's stack was seen nowhere."""
    out, _ = engine.run(NO_WORD, timeout=280)
    for method in ("spawn", "fork"):
        pool = out[f"segv {method} pool"]
        assert pool["error"] == "ChildExitedError", (method, pool)
        assert pool["stage"] == "load_plugins" and pool["signal"] == "SIGSEGV", (method, pool)
        assert "killed by SIGSEGV in stage 'load_plugins'" in pool["text"], pool
        # faulthandler's stack, from the early-error pipe: the plugin's own frame is in it
        assert f"crashplug_{engine.eng}.py" in pool["text"] and "in register" in pool["text"]
        executor = out[f"segv {method} executor"]
        assert executor["error"] == "BrokenProcessPool", (method, executor)
        assert "killed by SIGSEGV in stage 'load_plugins'" in executor["cause"], executor
        assert f"crashplug_{engine.eng}.py" in executor["cause"], executor
    exited = out["oexit0 spawn pool"]
    assert exited["error"] == "ChildExitedError", exited
    assert "exited with code 0 in stage 'load_plugins'" in exited["text"], exited
    assert "exited with code 0" in out["oexit0 spawn executor"]["cause"], out


OWN_ENDS = """
    import json, os
    import spawnkit
    from {eng}.ns import NS
    from crashplug_{eng} import crash, exit_with, square

    if __name__ == "__main__":
        out = {{}}
        ctx = spawnkit.get_context("spawn", namespace=NS)
        for name, target, args in (("exit70", exit_with, (70,)), ("crash", crash, ()),
                                   ("exit0", exit_with, (0,))):
            p = ctx.Process(target=target, args=args)
            p.start()
            p.join(60)
            out[name] = [p.exitcode, repr(p.bootstrap_error())]
        with ctx.Pool(2) as pool:
            out["pool"] = pool.map_async(square, range(4)).get(timeout=60)
        print(json.dumps(out))
    """


def test_a_targets_own_exit_or_crash_after_the_bootstrap_is_no_bootstrap_failure(
    engine: Engine,
) -> None:
    """Control: the target ran, so how it ended is its own (multiprocessing's semantics),
    even an exit with the bootstrap's own status 70."""
    out, _ = engine.run(OWN_ENDS, timeout=240)
    assert out["exit70"] == [70, "None"], out
    assert out["crash"] == [-11, "None"], out
    assert out["exit0"] == [0, "None"], out
    assert out["pool"] == [0, 1, 4, 9], out


LATE = """
    import json
    import spawnkit
    from {eng}.ns import NS

    if __name__ == "__main__":  # (the child re-runs the script: it imports late_ only here)
        from late_{eng} import late_square

        p = spawnkit.get_context("spawn", namespace=NS).Process(target=late_square, args=(2,))
        p.start()
        p.join(60)
        err = p.bootstrap_error()
        print(json.dumps({{"exitcode": p.exitcode, "type": type(err).__name__,
                          "stage": getattr(err, "stage", None), "text": str(err)}}))
    """


def test_a_target_whose_module_raises_as_the_child_loads_it_is_said_with_its_error(
    engine: Engine,
) -> None:
    """The child loads its target after the hooks: a module that raised there ended the child
    with code 1, told as an exit "without raising a Python exception" in stage apply_hooks,
    the error itself only on the child's stderr."""
    out, _ = engine.run(LATE, timeout=240)
    assert out["exitcode"] == 70, out
    assert (out["type"], out["stage"]) == ("ChildRaisedError", "resolve_entry"), out
    assert "late module refuses to load in a child" in out["text"], out


SERVER_ENDS = """
    import json, os, signal, time
    import spawnkit
    from spawnkit.protocol import warm
    from {eng}.ns import NS
    from crashplug_{eng} import square

    def started(ctx):
        p = ctx.Process(target=square, args=(2,))
        p.start()
        return p

    def told(p):
        p.join(30)  # its status pipe: a status, or EOF
        began = time.monotonic()
        err = p.bootstrap_error()
        return {{"error": type(err).__name__, "text": str(err).splitlines()[0],
                "cause": type(err.__cause__).__name__, "s": time.monotonic() - began}}

    if __name__ == "__main__":
        os.environ[warm.MODE_VAR] = "worker"  # each worker loads its plugins itself
        out = {{}}
        os.environ["{prefix}_CRASH"] = "hang"  # still in its bootstrap when its server ends
        ctx = spawnkit.get_context("forkserver", namespace=NS, preload=["ending_{eng}"])
        p = started(ctx)
        os.kill(ctx.Process._spawnkit_server.pid, signal.SIGTERM)
        out["ended"] = told(p)
        os.kill(p.pid, signal.SIGKILL)  # (p.kill() sends nothing once its exit code is set)
        os.environ["{prefix}_CRASH"] = "segv"  # control: the server is fine, the child is not
        ctx = spawnkit.get_context("forkserver", namespace=NS)
        p = started(ctx)
        out["own"] = told(p)
        out["own"]["server_alive"] = ctx.Process._spawnkit_server.alive()
        print(json.dumps(out))
    """


def test_a_child_whose_warm_server_ends_is_told_the_server_ended_even_before_it_is_reapable(
    engine: Engine,
) -> None:
    """SIGKILL is asynchronous: a killed server's pipes close (its worker's status reads EOF,
    made exit code 255) a moment before ``waitpid`` can reap it.  A pool's handler thread,
    woken by that EOF, checked the server at once, found it running and told a child still
    in its bootstrap as having exited with code 255 (CI: test_context's SERVER_GONE got
    ``ChildExitedError``, about 1 run in 30).  Here the server takes 0.5 s from its pipes
    closing to its end; a child that dies on its own while its server is fine is still told
    as its own exit, at once."""
    out, _ = engine.run(SERVER_ENDS, timeout=240)
    ended = out["ended"]
    assert ended["error"] == "ForkServerError", out
    assert "could not start a worker: it ended before process" in ended["text"], out
    assert "it was killed by SIGKILL" in ended["text"], out
    assert ended["cause"] == "ChildExitedError" and ended["s"] < 30, out
    own = out["own"]
    assert own["error"] == "ChildExitedError" and own["server_alive"], out
    assert "killed by SIGSEGV in stage 'load_plugins'" in own["text"], out
    assert own["s"] < 2.0, out  # no wait for a server that is not ending (_ENDING_WAIT)


SERVER_REPLACED = """
    import json, os, signal, time
    import spawnkit
    from spawnkit.protocol import warm
    from {eng}.ns import NS
    from crashplug_{eng} import square

    def state(pid):
        with open(f"/proc/{{pid}}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]

    def told(p, pid):
        err = p.bootstrap_error()
        os.kill(p.pid, signal.SIGKILL)
        return {{"error": type(err).__name__, "text": str(err).splitlines()[0],
                "server_pid": getattr(err, "server_pid", None), "pid": pid}}

    if __name__ == "__main__":
        os.environ[warm.MODE_VAR] = "worker"  # each worker loads its plugins itself
        os.environ["{prefix}_CRASH"] = "hang"  # still in its bootstrap when its server ends
        out = {{}}
        ctx = spawnkit.get_context("forkserver", namespace=NS)
        pid = ctx.Process._spawnkit_server.pid
        p = ctx.Process(target=square, args=(2,))
        p.start()
        os.kill(pid, signal.SIGKILL)
        p.join(30)
        deadline = time.monotonic() + 30
        while state(pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        spawnkit.get_context("forkserver", namespace=NS)  # a later launch replaces it
        out["replaced"] = told(p, pid)
        ctx = spawnkit.get_context("forkserver", namespace=NS, preload=["ending_{eng}"])
        pid = ctx.Process._spawnkit_server.pid
        p = ctx.Process(target=square, args=(2,))
        p.start()
        os.kill(pid, signal.SIGTERM)  # it ends as a killed server, only slower
        p.join(30)
        warm.shutdown_forkservers()  # as it ends: not yet reapable, gone by its wait's end
        out["stopped"] = told(p, pid)
        print(json.dumps(out))
    """


def test_a_child_whose_killed_server_was_stopped_or_replaced_since_names_it_and_its_signal(
    engine: Engine,
) -> None:
    """A killed server that a later launch replaced (``get_server``: ``alive()`` reaped it)
    was said to have "exited with code 0", as "(pid None)"; one stopped while its SIGKILL
    was on its way (``stop()``: not yet reapable when it looked) left no code at all, and
    its worker was told as having exited on its own (``ChildExitedError``)."""
    out, _ = engine.run(SERVER_REPLACED, timeout=240)
    for case in ("replaced", "stopped"):
        told = out[case]
        assert told["error"] == "ForkServerError", (case, out)
        assert f"fork server (pid {told['pid']}) could not start" in told["text"], out
        assert "it was killed by SIGKILL" in told["text"] and told["server_pid"] == told["pid"]
