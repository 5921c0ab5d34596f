"""A plain spawn or forkserver child of a bootstrapped worker starts without its plugins: said.

An engine's scheduler (a spawnkit worker) that starts its detokenizer or a pool through
``multiprocessing.get_context("spawn")`` gives that child a fresh interpreter with no plugin
and no hook, where the hook runs in the scheduler (SGLang's detokenizer, vLLM's EngineCore).
Real launchers, a real installed plugin, real spawned grandchildren.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from _plugin_app import LAUNCH, louder_plugin, run_script, warned, write_app

_MAIN = """
if __name__ == "__main__":
    import sys
    how = sys.argv[1]
    print(launch("engine:schedule", sys.argv[2], nprocs=1, payload=how))
"""

_ENGINE = """
import multiprocessing
import sys

import spawnkit

from multiprocessing.managers import BaseManager

from {pkg}.target import Words


class EngManager(BaseManager):
    pass


EngManager.register("Words", Words)


def detokenize(q):
    from {pkg}.target import word
    q.put(word())

def square(x):
    return x * x

def call_word():
    from {pkg}.target import word
    return word()

def torch_child(i, q):
    from {pkg}.target import word
    q.put(word())

class Detok(multiprocessing.get_context("spawn").Process):  # an engine's own subclass
    def __init__(self, q):
        super().__init__()
        self.q = q

    def run(self):
        detokenize(self.q)

def schedule(how):
    from {pkg}.target import word
    if how == "manager":  # multiprocessing's own server process: it runs no engine code
        with multiprocessing.get_context("spawn").Manager() as manager:
            return word(), manager.list([word()])[0]
    if how == "engmanager":  # a manager whose registered callable is the engine's own
        with EngManager(ctx=multiprocessing.get_context("spawn")) as manager:
            return word(), manager.Words().get()
    if how == "pool":
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            return word(), pool.map(square, [1, 2, 3])
    if how.startswith("loky"):  # loky imported by the entry, after the hooks (joblib's way)
        assert "loky" not in sys.modules, "imported before the entry ran"
        import loky

        ctx = spawnkit.get_context("spawn", namespace={tag!r}) if how == "loky-spawnkit" else None
        executor = loky.get_reusable_executor(max_workers=1, context=ctx)
        try:
            return word(), executor.submit(call_word).result(timeout=60)
        finally:
            executor.shutdown(wait=True)
    if how.startswith("joblib"):  # joblib.Parallel's default backend: its vendored loky
        assert "joblib" not in sys.modules, "imported before the entry ran"
        import joblib

        calls = [joblib.delayed(call_word)() for _ in range(2)]
        ctx = spawnkit.get_context("spawn", namespace={tag!r})
        if how == "joblib-threads":  # no process at all
            return word(), joblib.Parallel(n_jobs=2, prefer="threads")(calls)
        if how == "joblib-spawnkit":  # the fix joblib takes: its multiprocessing backend on ctx
            return word(), joblib.Parallel(n_jobs=2, backend=ctx)(calls)
        if how == "joblib-executor":  # the vendored loky's executor, given the context
            from joblib.externals import loky as vendored

            executor = vendored.get_reusable_executor(max_workers=1, context=ctx)
            try:
                return word(), executor.submit(call_word).result(timeout=60)
            finally:
                executor.shutdown(wait=True)
        results = joblib.Parallel(n_jobs=2)(calls)  # the line the warning must point at
        joblib.externals.loky.get_reusable_executor().shutdown(wait=True)
        return word(), results
    if how == "torch":  # torch.multiprocessing.spawn: its _wrap(fn, i, args, ...) is the target
        import torch.multiprocessing

        q = multiprocessing.get_context("spawn").SimpleQueue()
        torch.multiprocessing.spawn(torch_child, args=(q,), nprocs=1)
        return word(), q.get()
    if how == "default":  # the default context's Process (spawn in a spawned worker)
        q = multiprocessing.Queue()
        p = multiprocessing.Process(target=detokenize, args=(q,))
        p.start()  # the line the warning must point at
        got = q.get(timeout=60)
        p.join(60)
        return multiprocessing.get_start_method(), word(), got
    if how == "subclass":
        q = multiprocessing.get_context("spawn").Queue()
        p = Detok(q)
        p.start()
        got = q.get(timeout=60)
        p.join(60)
        return word(), got
    if how == "spawnkit":
        ctx = spawnkit.get_context("spawn", namespace={tag!r})
    elif how.startswith("late-"):  # multiprocess imported after the hooks (datasets' map)
        assert "multiprocess" not in sys.modules, "imported before the entry ran"
        import multiprocess

        if how == "late-dill":
            ctx = multiprocess.get_context("spawn")
        else:
            ctx = spawnkit.get_context("spawn", context="multiprocess", namespace={tag!r})
    elif how == "untouched":  # a worker that never imports multiprocess: nothing imports it
        return word(), "multiprocess" in sys.modules
    else:
        ctx = multiprocessing.get_context(how)
    q = ctx.Queue()
    p = ctx.Process(target=detokenize, args=(q,))
    p.start()
    got = q.get(timeout=60)
    p.join(60)
    return word(), got
"""

_TARGET = """
def word():
    return "hi"


class Words:
    def get(self):
        return word()
"""


@pytest.fixture
def app(tmp_path: Path):  # type: ignore[no-untyped-def]
    modules = {"engine": _ENGINE, "target": _TARGET, "plugin": louder_plugin("target.word")}
    return write_app(tmp_path, "plain", LAUNCH + _MAIN, {"loud": "plugin:register"}, modules)


@pytest.mark.parametrize("worker_start", ["spawn", "forkserver"])
def test_a_plain_spawn_child_of_a_worker_is_named_with_the_fix(app, worker_start: str) -> None:  # type: ignore[no-untyped-def]
    proc = run_script(app.script, "spawn", worker_start)  # the worker spawned, then warm
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The hook runs in the worker and not in its plain child: before, with nothing said.
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'hi')]", proc.stdout
    lines = warned(proc, "PlainChildWarning")
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert f"'spawn' process with target {app.pkg}.engine.detokenize" in line, line
    assert f"plugins of namespace {app.tag!r} (loud)" in line
    assert f"spawnkit.get_context('spawn', namespace={app.tag!r})" in proc.stderr


def test_a_plain_pool_warns_once_for_its_workers(app) -> None:  # type: ignore[no-untyped-def]
    proc = run_script(app.script, "pool", "spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', [1, 4, 9])]"
    lines = warned(proc, "PlainChildWarning")
    assert len(lines) == 1 and "multiprocessing.pool.worker" in lines[0], proc.stderr


@pytest.mark.parametrize("how", ["spawnkit", "fork", "manager"])
def test_children_that_get_the_plugins_are_not_named(app, how: str) -> None:  # type: ignore[no-untyped-def]
    """spawnkit's context and fork children have the hooks; a manager's process runs none."""
    proc = run_script(app.script, how, "spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'hi!')]", proc.stdout
    assert not warned(proc, "PlainChildWarning"), proc.stderr


@pytest.mark.parametrize("worker_start", ["spawn", "forkserver"])
def test_a_plain_child_of_multiprocess_imported_after_the_hooks_is_named(  # type: ignore[no-untyped-def]
    app, worker_start: str
) -> None:
    """``multiprocess`` (dill's fork of multiprocessing) imported only by the entry, as
    ``datasets`` imports it inside ``map(num_proc=)``: its classes did not exist when the
    hooks were applied, and its spawn child ran without them, unsaid."""
    proc = run_script(app.script, "late-dill", worker_start)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'hi')]", proc.stdout
    lines = warned(proc, "PlainChildWarning")
    assert len(lines) == 1, proc.stderr
    assert f"'spawn' process with target {app.pkg}.engine.detokenize" in lines[0], lines[0]
    assert f"plugins of namespace {app.tag!r} (loud)" in lines[0]


def test_spawnkit_multiprocess_context_imported_after_the_hooks_is_not_named(app) -> None:  # type: ignore[no-untyped-def]
    proc = run_script(app.script, "late-spawnkit", "spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'hi!')]", proc.stdout
    assert not warned(proc, "PlainChildWarning"), proc.stderr


def test_a_worker_that_never_imports_multiprocess_is_left_without_it(app) -> None:  # type: ignore[no-untyped-def]
    """Waiting for ``multiprocess`` imports nothing: a worker without it stays without it."""
    proc = run_script(app.script, "untouched", "spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', False)]", proc.stdout
    assert not warned(proc, "PlainChildWarning"), proc.stderr


_WATCH_ENDS = """
import sys
from spawnkit.bootstrap import _plain_children
from spawnkit.hooks import _on_import

_plain_children.arm_launcher("eng", ("loud",), {"eng"})
assert not {"multiprocess", "loky", "joblib"} & set(sys.modules), "imported by arming"
assert _on_import.installed() and not _on_import.waiting()  # no hook awaits them
import multiprocess.context as c

assert _on_import.installed(), "the finder left while loky was still awaited"
assert c.SpawnProcess._Popen.__module__ == _plain_children.__name__
assert c.ForkServerProcess._Popen.__module__ == _plain_children.__name__
import loky.backend.process as lp

assert _on_import.installed(), "the finder left while joblib's loky was still awaited"
assert lp.LokyProcess._Popen.__module__ == _plain_children.__name__
import joblib.externals.loky.backend.process as jp

assert not _on_import.installed(), "the finder stayed after all were imported"
assert jp.LokyProcess._Popen.__module__ == _plain_children.__name__
print("ok")
"""


def test_the_watch_for_multiprocess_ends_as_it_is_imported() -> None:
    """Nothing is imported to arm it; the finder leaves ``sys.meta_path`` once each watch
    fired (no module of this process is patched), and a launcher's lifelong watch is no
    pending hook."""
    pytest.importorskip("loky")
    pytest.importorskip("joblib")
    proc = subprocess.run(
        [sys.executable, "-c", _WATCH_ENDS], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_a_manager_serving_the_engines_own_callable_is_named(app) -> None:  # type: ignore[no-untyped-def]
    """Its server process runs ``Words`` (the engine's) without the plugins: the manager
    exemption holds only for the standard library's callables."""
    proc = run_script(app.script, "engmanager", "spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'hi')]", proc.stdout
    lines = warned(proc, "PlainChildWarning")
    assert len(lines) == 1 and "BaseManager._run_server" in lines[0], proc.stderr


def test_the_warning_is_quiet_once_the_process_left_its_worker_phase() -> None:
    """A test that bootstrapped in its own process, then left the phase, starts plain children
    without a warning: what a child goes without is asked at each start."""
    from types import SimpleNamespace

    from spawnkit.bootstrap import _plain_children
    from spawnkit.spec import _phase

    hooks = SimpleNamespace(applied_targets=lambda: ["t"])
    plugins = SimpleNamespace(report=SimpleNamespace(loaded=[SimpleNamespace(name="loud")]))
    loss = _plain_children._loss_of(SimpleNamespace(name="eng", hooks=hooks, plugins=plugins))
    saved = _phase.snapshot()
    try:
        _phase.restore((True, True, None))
        assert "plugins of namespace 'eng' (loud)" in loss()[0]
        hooks.applied_targets, plugins.report.loaded = lambda: [], []  # unapplied, unloaded
        assert loss()[0] == ""
        hooks.applied_targets = lambda: ["t"]
        _phase.restore((False, False, None))  # left the worker phase
        assert loss() == ("", "eng")
    finally:
        _phase.restore(saved)


_LAUNCHER_MAIN = """
if __name__ == "__main__":
    import multiprocessing, sys
    from {pkg} import engine
    print(launch("engine:square", "spawn", nprocs=1, payload=3))  # the schedulers
    # then, as SGLang's launcher does, its detokenizer through plain multiprocessing
    if sys.argv[1] == "late":  # or dill's, imported only after the workers were started
        assert "multiprocess" not in sys.modules, "imported before the launch"
        import multiprocess

        ctx = multiprocess.get_context("spawn")
    else:
        ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    target = print if sys.argv[1] == "other" else engine.detokenize
    p = ctx.Process(target=target, args=(q,) if target is engine.detokenize else ("x",))
    p.start()
    print(q.get(timeout=60) if target is engine.detokenize else "none")
    p.join(60)
"""


@pytest.mark.parametrize("target", ["engine", "other", "late"])
def test_a_launchers_plain_child_running_engine_code_is_named(tmp_path: Path, target: str) -> None:
    """The launcher applies no hooks (its workers do), so a plain child of it was never
    named: a detokenizer started through plain multiprocessing beside spawnkit's workers
    ran without the plugins, unsaid.  Not for a child running code outside the engine.
    ``late``: through ``multiprocess``, first imported after the launch."""
    modules = {"engine": _ENGINE, "target": _TARGET, "plugin": louder_plugin("target.word")}
    app = write_app(
        tmp_path, "plainl", LAUNCH + _LAUNCHER_MAIN, {"loud": "plugin:register"}, modules
    )
    proc = run_script(app.script, target)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = warned(proc, "PlainChildWarning")
    if target == "other":
        assert not lines, proc.stderr
        return
    assert proc.stdout.strip().splitlines()[-1] == "hi"  # no hook there: what is named
    assert len(lines) == 1, proc.stderr
    assert f"'spawn' process with target {app.pkg}.engine.detokenize" in lines[0]
    assert "the plugins its workers load (loud" in lines[0]


@pytest.mark.parametrize("worker_start", ["spawn", "forkserver"])
def test_a_loky_executors_worker_is_named_with_a_fix_loky_takes(  # type: ignore[no-untyped-def]
    app, worker_start: str
) -> None:
    """loky's reusable executor (imported by the entry, after the hooks) starts its workers as
    ``LokyProcess``, no multiprocessing class: they ran without the hooks, unsaid."""
    pytest.importorskip("loky")
    proc = run_script(app.script, "loky", worker_start)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'hi')]", proc.stdout
    lines = warned(proc, "PlainChildWarning")
    assert len(lines) == 1, proc.stderr
    assert "'loky' process with target loky.process_executor._process_worker" in lines[0]
    assert f"plugins of namespace {app.tag!r} (loud)" in lines[0]
    assert "loky.get_reusable_executor(context=ctx)" in lines[0], lines[0]
    assert f"spawnkit.get_context('spawn', namespace={app.tag!r})" in lines[0]


def test_a_loky_executor_on_a_spawnkit_context_is_hooked_and_not_named(app) -> None:  # type: ignore[no-untyped-def]
    """The warning's fix works: loky's workers started from the context run the hook."""
    pytest.importorskip("loky")
    proc = run_script(app.script, "loky-spawnkit", "spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'hi!')]", proc.stdout
    assert not warned(proc, "PlainChildWarning"), proc.stderr


@pytest.mark.parametrize("worker_start", ["spawn", "forkserver"])
def test_joblib_parallels_loky_workers_are_named_with_a_fix_joblib_takes(  # type: ignore[no-untyped-def]
    app, worker_start: str
) -> None:
    """``joblib.Parallel(n_jobs=2)`` (its default backend: joblib's own copy of loky,
    ``joblib.externals.loky``) ran the engine's function in workers without the hooks, unsaid:
    only the standalone loky's ``LokyProcess`` was stood in for."""
    pytest.importorskip("joblib")
    proc = run_script(app.script, "joblib", worker_start)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', ['hi', 'hi'])]", proc.stdout
    lines = warned(proc, "PlainChildWarning")
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    target = "joblib.externals.loky.process_executor._process_worker"
    assert f"'loky' process with target {target} was started through joblib's" in line, line
    assert f"plugins of namespace {app.tag!r} (loud)" in line
    assert "joblib.Parallel(n_jobs=N, backend=ctx)" in line, line
    assert f"spawnkit.get_context('spawn', namespace={app.tag!r})" in line
    engine = Path(app.script).parent / "site" / app.pkg / "engine.py"
    start = next(
        i for i, t in enumerate(engine.read_text().splitlines(), 1) if "# the line the" in t
    )
    assert line.startswith(f"{engine}:{start}: PlainChildWarning"), line  # past joblib's frames


@pytest.mark.parametrize("how", ["joblib-spawnkit", "joblib-executor", "joblib-threads"])
def test_joblib_on_a_spawnkit_context_or_threads_is_hooked_and_not_named(  # type: ignore[no-untyped-def]
    app, how: str
) -> None:
    """The warning's fixes work (``Parallel(backend=ctx)``, the vendored executor given the
    context: the hook runs there), and threads start no process: all quiet under ``-W error``."""
    pytest.importorskip("joblib")
    flags = ("-W", "error::spawnkit.PlainChildWarning")
    proc = run_script(app.script, how, "spawn", flags=flags)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = "'hi!'" if how == "joblib-executor" else "['hi!', 'hi!']"
    assert proc.stdout.strip().splitlines()[-1] == f"[('hi!', {got})]", proc.stdout
    assert not warned(proc, "PlainChildWarning"), proc.stderr


_HERE_SCRIPT = """
import sys
sys.path.insert(0, {site!r})
import multiprocessing
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})
TOP
def child(q):
    from {pkg}.target import word
    q.put(word())

if __name__ == "__main__":
    GUARDED
    from {pkg}.target import word
    ctx = multiprocessing.get_context(sys.argv[1])
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    print(word(), q.get(timeout=60))
    p.join(60)
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
@pytest.mark.parametrize("where", ["top", "guarded"])
def test_a_child_that_re_runs_the_scripts_bootstrap_here_is_not_named(
    tmp_path: Path, method: str, where: str
) -> None:
    """README's pattern 3: ``bootstrap_here(NS)`` in the entry script's own body.  A plain
    spawn or forkserver child re-runs that body as ``__mp_main__``, so it is hooked; it was
    named as running without the hooks all the same, and ``-W error`` refused it.  Under
    ``if __name__ == "__main__":`` the child does not run the call: still named."""
    call = "spawnkit.bootstrap_here(NS)"
    source = _HERE_SCRIPT.replace("TOP", call if where == "top" else "")
    source = source.replace("GUARDED", call if where == "guarded" else "pass")
    modules = {"target": _TARGET, "plugin": louder_plugin("target.word")}
    app = write_app(tmp_path, "here", source, {"loud": "plugin:register"}, modules)
    if where == "top":
        proc = run_script(app.script, method, flags=("-W", "error::spawnkit.PlainChildWarning"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.strip().splitlines()[-1] == "hi! hi!", proc.stdout  # hooked there
        assert not warned(proc, "PlainChildWarning"), proc.stderr
        return
    proc = run_script(app.script, method)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "hi! hi", proc.stdout  # no hook there
    lines = warned(proc, "PlainChildWarning")
    assert len(lines) == 1 and "target __main__.child" in lines[0], proc.stderr


@pytest.mark.needs_torch
def test_torch_spawn_names_the_users_function_and_a_fix_its_api_takes(app) -> None:  # type: ignore[no-untyped-def]
    """``torch.multiprocessing.spawn`` starts ``_wrap(fn, i, args, ...)``: the warning named
    ``torch.multiprocessing.spawn._wrap`` and advised a context, which torch's spawn (a start
    method string only) cannot take."""
    pytest.importorskip("torch")
    proc = run_script(app.script, "torch", "spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'hi')]", proc.stdout
    lines = warned(proc, "PlainChildWarning")
    assert len(lines) == 1, proc.stderr
    fn = f"{app.pkg}.engine.torch_child"
    assert f"'spawn' process of torch.multiprocessing.spawn running {fn} " in lines[0], lines[0]
    assert "_wrap" not in lines[0]
    assert f"spawnkit.spawn_with_plugins({fn}, payload, nprocs=N, namespace={app.tag!r}" in lines[0]


def test_a_plain_subclass_overriding_run_is_named_with_its_class(app) -> None:  # type: ignore[no-untyped-def]
    proc = run_script(app.script, "subclass", "spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'hi')]", proc.stdout
    lines = warned(proc, "PlainChildWarning")
    assert len(lines) == 1, proc.stderr
    assert f"'spawn' process running {app.pkg}.engine.Detok.run() was" in lines[0], lines[0]


@pytest.mark.parametrize("flags", [(), ("-W", "ignore::spawnkit.PlainChildWarning:MODULE")])
def test_the_warning_points_at_the_users_line_for_a_module_filter(  # type: ignore[no-untyped-def]
    app, flags: tuple[str, ...]
) -> None:
    """The default context's ``multiprocessing.Process`` goes through one more frame
    (``Process._Popen``): the warning pointed at ``multiprocessing/process.py``, so the
    module-scoped filter README suggests never matched the engine's module."""
    module = f"{app.pkg}.engine"
    proc = run_script(
        app.script, "default", "spawn", flags=tuple(f.replace("MODULE", module) for f in flags)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('spawn', 'hi!', 'hi')]", proc.stdout
    lines = warned(proc, "PlainChildWarning")
    if flags:
        assert not lines, proc.stderr  # the filter on the engine's module matched
        return
    assert len(lines) == 1, proc.stderr
    engine = Path(app.script).parent / "site" / app.pkg / "engine.py"
    start = next(
        i for i, t in enumerate(engine.read_text().splitlines(), 1) if "p.start()  # the line" in t
    )
    assert lines[0].startswith(f"{engine}:{start}: PlainChildWarning"), lines[0]
