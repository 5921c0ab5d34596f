"""Every process of an engine gets its plugins (issue 20), in real processes of a real engine.

The engine and its plugin are real distributions (``_context_support``); each
test runs a launching script in its own interpreter.  Four kinds of process:
the scheduler (``spawn_with_plugins``), the detokenizer (``ctx.Process``), a
tokenizer pool (``ProcessPoolExecutor(mp_context=ctx)``, forkserver) and a
data loader (torch ``DataLoader(multiprocessing_context=ctx)``, spawn).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import spawnkit
from _context_support import FOUR_PROCESSES, Engine, make_engine

# The data loader is torch's: without torch (the torch-free suite on other Pythons) the
# script says "no torch" for it, and the scheduler, detokenizer and pool are checked alone.
HAS_TORCH = importlib.util.find_spec("torch") is not None
KINDS = (
    ("scheduler", "detokenizer", "tokenizer", "loader")
    if HAS_TORCH
    else ("scheduler", "detokenizer", "tokenizer")
)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    yield make_engine(tmp_path)


def test_the_plugin_hook_runs_in_every_process_only_through_the_namespace_context(
    engine: Engine,
) -> None:
    out, _ = engine.run(FOUR_PROCESSES)
    ours, plain = out["spawnkit"], out["plain"]
    assert ours["scheduler"] == plain["scheduler"] == "tok:s+plugin"
    # Through the namespace context: the AFTER hook ran in each process, each has its report.
    detok, report = ours["detokenizer"]
    assert detok == "tok:d+plugin"
    assert report["namespace"] == engine.ns and "load_plugins" in report["stages"]
    assert ours["tokenizer"] == [["tok:a+plugin", True], ["tok:b+plugin", True]]
    if HAS_TORCH:
        assert ours["loader"] == [f"tok:{i}+plugin" for i in range(4)]
    else:
        assert ours["loader"] == plain["loader"] == "no torch"
    # Through multiprocessing.get_context: only the scheduler had the plugin.
    assert plain["detokenizer"] == ["tok:d", None]
    assert plain["tokenizer"] == [["tok:a", False], ["tok:b", False]]
    if HAS_TORCH:
        assert plain["loader"] == [f"tok:{i}" for i in range(4)]


def test_a_plugin_that_fails_to_load_fails_every_process_with_its_root_cause(
    engine: Engine,
) -> None:
    env = {f"{engine.prefix}_TEST_FAIL": "1", "CTX_MODES": "spawnkit"}
    out, stderr = engine.run(FOUR_PROCESSES, env=env)
    ours = out["spawnkit"]
    for kind in KINDS:
        failure = ours[kind]
        assert isinstance(failure, dict), (kind, failure)
        text = failure["text"] + failure.get("cause", "")
        assert "tokplug" in text and "load_plugins" in text, (kind, failure)
        assert "broken on purpose" in text, (kind, failure)
    assert ours["detokenizer"]["exitcode"] == 70
    assert ours["detokenizer"]["error"] == "ChildRaisedError"
    # The warm server bootstraps once for every tokenizer worker: it refuses at get_context.
    assert ours["tokenizer"]["error"] == "ForkServerError"
    # Each spawned child said it on stderr too, in one line, before its traceback.
    lines = [ln for ln in stderr.splitlines() if ln.startswith("spawnkit: process ")]
    # (the detokenizer, and with torch the loader's workers)
    assert len(lines) >= (2 if HAS_TORCH else 1), stderr
    assert all("bootstrap stage 'load_plugins' failed" in ln for ln in lines)


POOLS = """
    import json, time
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool


    if __name__ == "__main__":
        from {eng} import procs
        import spawnkit
        from {eng}.ns import NS

        ctx = spawnkit.get_context("spawn", namespace=NS)
        out = {{}}
        began = time.monotonic()
        try:
            with ProcessPoolExecutor(2, mp_context=ctx) as ex:
                ex.submit(procs.tokenizer_task, "a").result(timeout=120)
        except BrokenProcessPool as exc:
            out["executor"] = {{"message": str(exc), "cause": str(exc.__cause__)}}
        out["executor_s"] = time.monotonic() - began
        began = time.monotonic()
        with ctx.Pool(2) as pool:
            try:
                pool.map(procs.tokenizer_task, ["a", "b", "c"], chunksize=1)
            except Exception as exc:
                out["pool"] = {{"error": type(exc).__name__, "message": str(exc),
                               "child": type(exc.child_exception).__name__}}
            try:
                pool.apply_async(procs.tokenizer_task, ("d",))
            except Exception as exc:
                out["pool_after"] = type(exc).__name__
        out["pool_s"] = time.monotonic() - began
        try:
            ctx.Manager()  # its server process bootstraps first, and fails
        except Exception as exc:
            out["manager"] = {{"error": type(exc).__name__, "message": str(exc)}}
        print(json.dumps(out))
    """


def test_an_executor_and_a_pool_fail_with_the_root_cause_instead_of_respawning(
    engine: Engine,
) -> None:
    out, _ = engine.run(POOLS, env={f"{engine.prefix}_TEST_FAIL": "1"})
    cause = out["executor"]["cause"]
    assert "bootstrap stage 'load_plugins' failed" in cause and "tokplug" in cause, out
    # The standard Pool would replace its dying workers forever; this one stops at once.
    assert out["pool"]["error"] == "ChildRaisedError", out
    assert "tokplug" in out["pool"]["message"] and "load_plugins" in out["pool"]["message"]
    assert out["pool"]["child"] == "StageError[PluginError]"  # except PluginError works
    assert out["pool_after"] == "ChildRaisedError"
    assert out["pool_s"] < 120 and out["executor_s"] < 120
    # A manager's start() read a bare EOFError from its pipe, the cause only on stderr.
    assert out["manager"]["error"] == "ChildRaisedError", out
    assert "tokplug" in out["manager"]["message"] and "load_plugins" in out["manager"]["message"]


SERVER_GONE = """
    import json, os, signal, threading, time
    import spawnkit
    from {eng}.ns import NS
    from {eng}.procs import tokenizer_task

    if __name__ == "__main__":
        ctx = spawnkit.get_context("forkserver", namespace=NS)
        pool = ctx.Pool(2, maxtasksperchild=1)
        first = [r[0] for r in pool.map(tokenizer_task, "ab", chunksize=1)]
        os.kill(ctx.Process._spawnkit_server.pid, signal.SIGKILL)  # the OOM killer, say
        time.sleep(1)
        began = time.monotonic()
        try:
            pool.map_async(tokenizer_task, "cd", chunksize=1).get(timeout=60)
            second = "no error"
        except Exception as exc:
            second = type(exc).__name__
        waited = time.monotonic() - began
        ended = threading.Thread(target=pool.terminate, daemon=True)
        ended.start()
        ended.join(30)
        print(json.dumps({{"first": first, "second": second, "waited": waited,
                           "terminated": not ended.is_alive()}}))
        os._exit(0)
    """


def test_a_pool_whose_warm_server_is_gone_fails_instead_of_waiting_forever(
    engine: Engine,
) -> None:
    """A replacement worker (``maxtasksperchild``) the server can no longer fork: the pool's
    handler thread died of the error, and ``map()`` and ``terminate()`` waited forever."""
    out, _ = engine.run(SERVER_GONE)
    assert out["first"] == ["tok:a+plugin", "tok:b+plugin"]
    assert out["second"] == "ForkServerError" and out["waited"] < 30
    assert out["terminated"]


EXECUTOR_SERVER_GONE = """
    import concurrent.futures as cf
    import json, os, signal, threading, time
    import spawnkit
    from {eng}.ns import NS
    from {eng}.procs import tokenizer_task


    def alive(pid):
        try:
            with open(f"/proc/{{pid}}/stat") as f:
                return f.read().rpartition(")")[2].split()[0] != "Z"
        except FileNotFoundError:
            return False


    if __name__ == "__main__":
        ctx = spawnkit.get_context("forkserver", namespace=NS)
        ex = cf.ProcessPoolExecutor(2, mp_context=ctx)
        first = [r[0] for r in ex.map(tokenizer_task, "ab")]
        pids = list(ex._processes)
        os.kill(ctx.Process._spawnkit_server.pid, signal.SIGKILL)  # the OOM killer, say
        time.sleep(1)
        ended = threading.Thread(target=ex.shutdown, kwargs={{"cancel_futures": True}}, daemon=True)
        ended.start()
        ended.join(30)
        deadline = time.monotonic() + 10
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [p for p in pids if alive(p)]
        for p in left:  # what this test found: ended here, not left to the machine
            os.kill(p, signal.SIGKILL)
        print(json.dumps({{"first": first, "pids": pids, "left": left,
                           "shut_down": not ended.is_alive()}}))
        os._exit(0)
    """


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; pidfd")
def test_an_executor_broken_by_its_servers_death_ends_its_workers(engine: Engine) -> None:
    """``ProcessPoolExecutor(mp_context=ctx)`` whose warm server was killed: the executor broke
    and "terminated" its workers, which the package's Popen did not signal (their lost status
    read as exit code 255), so they waited for tasks forever after the launcher exited."""
    out, _ = engine.run(EXECUTOR_SERVER_GONE)
    assert out["first"] == ["tok:a+plugin", "tok:b+plugin"]
    assert out["shut_down"]
    assert len(out["pids"]) == 2
    assert out["left"] == [], f"workers {out['left']} outlived their executor's shutdown"


PLAIN_POOLS = """
    import json, os, threading, time, warnings
    import multiprocessing as mp
    import multiprocessing.pool


    def timed(out, key, call):
        began = time.monotonic()
        try:
            out[key] = call()
        except Exception as exc:
            out[key] = {{"error": type(exc).__name__, "message": str(exc)}}
        out[key + "_s"] = time.monotonic() - began


    def work(ctx, out):
        import joblib
        from {eng} import procs

        calls = [joblib.delayed(procs.tokenizer_task)(x) for x in "abcd"]
        timed(out, "joblib", lambda: joblib.Parallel(n_jobs=2, backend=ctx)(calls))
        pool = multiprocessing.pool.Pool(2, maxtasksperchild=1, context=ctx)
        timed(out, "pool", lambda: pool.map(procs.tokenizer_task, "abcd", chunksize=1))
        pool.close()
        timed(out, "join", pool.join)
        out["children"] = len(mp.active_children())


    if __name__ == "__main__":
        import spawnkit
        from {eng}.ns import NS

        ctx = spawnkit.get_context(os.environ["CTX_METHOD"], namespace=NS)
        warnings.simplefilter("error")  # users run with -W error: the pools may not warn
        out = {{}}
        worker = threading.Thread(target=work, args=(ctx, out), daemon=True)
        worker.start()
        worker.join(60)
        out["done"] = not worker.is_alive()
        print(json.dumps(out), flush=True)
        os._exit(0)
    """


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_joblib_and_a_plain_pool_on_the_context_fail_with_the_root_cause(
    engine: Engine, method: str
) -> None:
    """``joblib.Parallel(backend=ctx)`` (its ``MemmappingPool``, a plain ``Pool``) and
    ``multiprocessing.pool.Pool(context=ctx)`` replaced each worker that failed its
    bootstrap, forever: ``Parallel(...)`` and ``map()`` hung, unsaid."""
    env = {f"{engine.prefix}_TEST_FAIL": "1", "CTX_METHOD": method}
    out, stderr = engine.run(PLAIN_POOLS, env=env)
    assert out["done"], out
    for key in ("joblib", "pool"):
        assert out[key]["error"] == "ChildRaisedError", out
        assert "tokplug" in out[key]["message"] and "load_plugins" in out[key]["message"]
        assert out[key + "_s"] < 30, out
    assert out["join"] is None and out["children"] == 0, out
    # Only the workers each pool started first failed; none was started in their place.
    failed = [ln for ln in stderr.splitlines() if ln.startswith("spawnkit: process ")]
    assert 1 <= len(failed) <= 4, stderr


def test_joblib_and_a_plain_pool_on_the_context_run_with_the_plugins(engine: Engine) -> None:
    """The control: healthy workers (replaced after each task, ``maxtasksperchild=1``) run
    the hooks and nothing warns under ``-W error``."""
    out, stderr = engine.run(PLAIN_POOLS, env={"CTX_METHOD": "spawn"})
    expected = [[f"tok:{x}+plugin", True] for x in "abcd"]
    assert out["done"] and out["joblib"] == out["pool"] == expected, out
    assert out["join"] is None and out["children"] == 0, out
    assert "spawnkit" not in stderr, stderr


FORK = """
    import json, os


    def child(ctx, target):
        r, w = ctx.Pipe(duplex=False)
        p = ctx.Process(target=target, args=(w,))
        p.start()
        w.close()
        got = r.recv() if r.poll(60) else None
        p.join(30)
        return got


    if __name__ == "__main__":
        from {eng}.forked import forked
        import spawnkit
        from {eng}.ns import NS

        ctx = spawnkit.get_context("fork", namespace=NS)
        fresh = child(ctx, forked)           # this process is not bootstrapped yet
        spawnkit.bootstrap_here(NS)
        inherited = child(ctx, forked)       # now it is: the fork inherits it
        print(json.dumps({{"fresh": fresh, "inherited": inherited, "parent": os.getpid()}}))
    """


def test_fork_children_inherit_a_bootstrapped_parent_and_bootstrap_otherwise(
    engine: Engine, tmp_path: Path
) -> None:
    log = tmp_path / "register.log"
    out, _ = engine.run(FORK, env={f"{engine.prefix}_TEST_LOG": str(log)})
    fresh_tok, fresh_report, fresh_pid = out["fresh"]
    tok, report, pid = out["inherited"]
    assert fresh_tok == tok == "tok:f+plugin"
    assert fresh_report["inherited"] == {} and "load_plugins" in fresh_report["stages"]
    assert report["inherited"]["forked_from"] == out["parent"] and report["pid"] == pid
    # The plugin callback ran in the fresh child and in the parent, never in the inheriting one.
    ran = {int(x) for x in log.read_text().split()}
    assert ran == {fresh_pid, out["parent"]}


EAGER = """
    import json

    if __name__ == "__main__":
        from {eng}.eager import main
        tok, same, hooks = main()
        print(json.dumps({{"tok": tok, "same": same, "hooks": hooks}}))
    """

EAGER_TOO_LATE = """
    import json

    if __name__ == "__main__":
        try:
            import {eng}.late
        except Exception as exc:
            print(json.dumps({{"error": type(exc).__name__, "message": str(exc)}}))
    """


def test_an_eager_engine_bootstraps_its_own_process_before_importing_the_scheduler(
    engine: Engine,
) -> None:
    out, _ = engine.run(EAGER)
    assert out["tok"] == "tok:e+plugin"
    assert out["same"] is True  # a second call does nothing new
    assert out["hooks"] == [f"{engine.eng}.work.tokenize"]


def test_bootstrap_here_after_the_target_was_imported_names_the_module(engine: Engine) -> None:
    out, _ = engine.run(EAGER_TOO_LATE)
    assert out["error"] == "ImportGuardError", out
    assert f"'{engine.eng}.work'" in out["message"]
    assert "spawnkit.bootstrap_here(" in out["message"]
    assert ") came too late" in out["message"]
    assert "top of the entry module" in out["message"]


BOOTSTRAP_PARENT = """
    import json

    if __name__ == "__main__":
        import spawnkit
        from {eng}.ns import NS

        with spawnkit.spawn_with_plugins("{eng}.procs:scheduler", namespace=NS,
                                         bootstrap_parent=True, ready_timeout=120) as group:
            results = group.results(timeout=120)
        from {eng}.work import tokenize
        print(json.dumps({{"workers": results, "parent": tokenize("p")}}))
    """


def test_spawn_with_plugins_can_bootstrap_the_parent_too(engine: Engine) -> None:
    out, _ = engine.run(BOOTSTRAP_PARENT)
    assert out == {"workers": ["tok:s+plugin"], "parent": "tok:p+plugin"}


def test_get_context_refuses_an_unknown_method_in_the_parent() -> None:
    import spawnkit
    from spawnkit.errors import ConfigError

    with pytest.raises(ConfigError, match="method='threads'"):
        spawnkit.get_context("threads")
    with pytest.raises(ConfigError, match="preload"):
        spawnkit.get_context("spawn", preload=("torch",))
    assert os.getpid()  # nothing was started


def test_a_context_keeps_its_namespace_where_the_stdlib_would_leave_it() -> None:
    """``ctx.get_context("fork")`` gave the standard library's context (its processes load no
    plugin) and ``ctx.set_forkserver_preload(...)`` preloaded into a fork server this
    context's processes never use: both did their stdlib thing, unsaid."""
    import spawnkit
    from spawnkit.errors import ConfigError

    ctx = spawnkit.get_context("spawn")
    assert ctx.get_context() is ctx and ctx.get_context("spawn") is ctx
    fork = ctx.get_context("fork")
    assert repr(fork).startswith("<spawnkit bootstrapping context 'fork'")
    assert fork.namespace is ctx.namespace
    with pytest.raises(ConfigError, match="preload=") as info:
        ctx.set_forkserver_preload(["json"])
    assert info.value.setting == "preload"


DILL = """
    import json


    def main():
        from {eng} import procs
        import spawnkit
        from {eng}.ns import NS

        out = {{}}
        for method in ("spawn", "forkserver"):
            ctx = spawnkit.get_context(method, namespace=NS, context="multiprocess")
            r, w = ctx.Pipe(duplex=False)
            # A closure travels by value with dill, and still runs after the hooks.
            p = ctx.Process(target=lambda conn: conn.send(procs.work.tokenize("x")), args=(w,))
            p.start()
            w.close()
            out[method] = r.recv() if r.poll(120) else None
            p.join(60)
        return out


    if __name__ == "__main__":
        print(json.dumps(main()))
    """


def test_the_multiprocess_context_pickles_with_dill_and_bootstraps_too(engine: Engine) -> None:
    out, _ = engine.run(DILL)
    assert out == {"spawn": "tok:x+plugin", "forkserver": "tok:x+plugin"}


@pytest.mark.parametrize("name", ["get_context", "bootstrap_here"])
def test_a_former_namespace_method_says_where_it_moved(name: str) -> None:
    ns = spawnkit.Namespace("moved_methods_ns")
    moved = (
        rf"Namespace\.{name}\(\) moved to the launcher: call spawnkit\.{name}\(.*'moved_methods_ns'"
    )
    with pytest.raises(AttributeError, match=moved):
        getattr(ns, name)


DETOK = """
import os
import spawnkit
from {eng} import work
from {eng}.ns import NS

ctx = spawnkit.get_context(os.environ.get("DETOK_METHOD", "spawn"), namespace=NS)


class Detok(ctx.Process):  # an engine's own process class, with its own run()
    def __init__(self, conn, items):
        super().__init__(daemon=True)
        self.conn, self.items = conn, items  # an engine object: opaque until the hooks

    def run(self):
        super().run()  # the base's run(): the target, none here
        self.conn.send([work.tokenize("d"), len(self.items)])
        self.conn.close()
"""

SUBCLASS = """
    import json, os


    if __name__ == "__main__":
        out = {{}}
        for method in ("spawn", "forkserver", "fork"):
            os.environ["DETOK_METHOD"] = method
            import importlib, sys
            sys.modules.pop("{eng}.detok", None)
            detok = importlib.import_module("{eng}.detok")
            from {eng} import procs
            r, w = detok.ctx.Pipe(duplex=False)
            p = detok.Detok(w, procs.Items())
            p.start()
            w.close()
            got = r.recv() if r.poll(60) else None
            p.join(30)
            out[method] = [got, p.exitcode]
        print(json.dumps(out))
    """


def test_an_engines_process_subclass_runs_its_own_run_after_the_bootstrap(
    engine: Engine,
) -> None:
    """``class Detok(ctx.Process)`` with its ``run()`` (as engines subclass ``mp.Process``):
    spawned or warm, the child was rebuilt as spawnkit's own class, its ``run()`` never ran
    and it exited 0; forked, its ``run()`` ran without the plugins.  Its attributes (an
    engine object here) are unpickled after the hooks, as a target's arguments are."""
    (engine.root / "site" / engine.eng / "detok.py").write_text(engine.fmt(DETOK))
    out, _ = engine.run(SUBCLASS)
    assert out == {m: [["tok:d+plugin", 4], 0] for m in ("spawn", "forkserver", "fork")}, out
