"""Failures before a worker's bootstrap are typed in the parent (issue 20, items 3 and 4).

A worker re-imports the launching script and unpickles its spec before
spawnkit's own code runs.  An exception there travels over the early-error
pipe as a failure record, so the parent's ``ChildRaisedError`` has it as
``child_exception`` (and ``__cause__``) under spawn and under forkserver.  Ray
actors and torchrun ranks are "before hooks" from their first statement too.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from _context_support import Engine, make_engine


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    yield make_engine(tmp_path)


LAUNCH = """
    import json, os
    import spawnkit
    TOP

    if __name__ == "__main__":
        from {eng}.ns import NS

        out = {{}}
        try:
            with spawnkit.spawn_with_plugins("{eng}.procs:scheduler", namespace=NS,
                                             start_method=os.environ["START"],
                                             ready_timeout=120) as group:
                group.results(timeout=120)
        except spawnkit.ChildRaisedError as exc:
            try:
                raise exc.child_exception
            except spawnkit.LazyProxyError as proxy:
                out["caught"] = "LazyProxyError"
                out["proxy_line"] = proxy.lineno
            except ImportError as imp:
                out["caught"] = type(imp).__name__
                out["name"] = imp.name
            except TypeError:  # child_exception is None: nothing to raise
                out["caught"] = None
            out["cause_is_child"] = exc.__cause__ is exc.child_exception
            out["message"] = str(exc)
        print(json.dumps(out))
    """

PROXY_AT_SCRIPT_SCOPE = """
Tok = spawnkit.lazy("{eng}.work:tokenize")
NAME = Tok.__name__
"""

IMPORT_AT_SCRIPT_SCOPE = """
if __name__ == "__mp_main__":
    import no_such_module_for_spawnkit_tests
"""


def _launch(top: str) -> str:
    return textwrap.dedent(LAUNCH).replace("TOP\n", top.lstrip("\n"))


@pytest.mark.parametrize(
    "start",
    [{"START": "spawn"}, {"START": "forkserver", "SPAWNKIT_WARM_BOOTSTRAP": "worker"}],
    ids=["spawn", "forkserver"],
)
def test_except_lazy_proxy_error_catches_a_proxy_at_script_scope(
    engine: Engine, start: dict[str, str]
) -> None:
    out, _ = engine.run(_launch(PROXY_AT_SCRIPT_SCOPE), env=start)
    assert out["caught"] == "LazyProxyError", out
    assert out["proxy_line"] == 6  # NAME = Tok.__name__, in the launching script
    assert out["cause_is_child"] is True
    head = out["message"].splitlines()[0]
    # The headline keeps the whole first line of the child's message, its fix included.
    assert "stage 'process_start'" in head and "Fix: " in head and head.rstrip().endswith(".")


@pytest.mark.parametrize("start", ["spawn", "forkserver"])
def test_an_import_error_while_reimporting_the_script_is_the_child_exception(
    engine: Engine, start: str
) -> None:
    """Under forkserver the default (pre-bootstrapped) warm worker has the same channel."""
    out, _ = engine.run(_launch(IMPORT_AT_SCRIPT_SCOPE), env={"START": start})
    assert out["caught"] == "ModuleNotFoundError", out
    assert out["name"] == "no_such_module_for_spawnkit_tests"
    assert "process_start" in out["message"]


TORCHRUN_SPEC = """
    import json, os, subprocess, sys

    if __name__ == "__main__":
        from spawnkit import build_spec
        from spawnkit.spec.signing import write_spec_file
        from {eng}.ns import NS
        from {eng}.probe import Probe

        probe = Probe()
        probe.x = 1
        spec = build_spec("{eng}.procs:scheduler", namespace=NS).replace(extra={{"probe": probe}})
        write_spec_file(spec, "spec.bin", "k" * 64)
        path = os.pathsep.join([sys.path[0], os.environ.get("PYTHONPATH", "")])
        env = {{**os.environ, "SPAWNKIT_SPEC_KEY": "k" * 64, "PYTHONPATH": path}}
        proc = subprocess.run([sys.executable, "-m", "spawnkit.run", "--spec", "spec.bin"],
                              capture_output=True, text=True, timeout=120, env=env)
        print(json.dumps({{"code": proc.returncode, "stderr": proc.stderr}}))
    """


def test_a_torchrun_rank_refuses_a_proxy_touched_while_its_spec_is_unpickled(
    engine: Engine,
) -> None:
    out, _ = engine.run(TORCHRUN_SPEC)
    assert out["code"] == 1, out
    assert "LazyProxyError" in out["stderr"], out["stderr"]
    assert "read_spec" in out["stderr"] and "while the worker unpickled" in out["stderr"]


RAY_ACTOR = """
    import json, os, pickle, sys

    if __name__ == "__main__":
        sys.modules["ray"] = None  # the actor's own code, outside Ray: no cluster is started
        from spawnkit import build_spec
        from spawnkit.scaleout._ray_actor import RankActor
        from {eng}.ns import NS
        from {eng}.probe import Probe

        probe = Probe()
        probe.x = 1
        spec = build_spec("{eng}.procs:scheduler", namespace=NS).replace(extra={{"probe": probe}})
        data = pickle.dumps(spec)
        actor = RankActor()   # what Ray constructs first in the actor's fresh process
        outcome = actor.run(0, data)
        failure = outcome.get("failure")
        print(json.dumps({{"status": outcome["status"],
                          "exc_type": failure.exc_type if failure else ""}}), flush=True)
        os._exit(0)  # before the failed rank's own delayed exit(1)
    """


def test_a_ray_rank_refuses_a_proxy_touched_while_its_arguments_are_unpickled(
    engine: Engine,
) -> None:
    out, _ = engine.run(RAY_ACTOR)
    assert out == {"status": "failed", "exc_type": "spawnkit.errors.LazyProxyError"}


def test_a_worker_that_cannot_import_spawnkit_sends_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command line's first import fails (another PYTHONPATH, a broken install): before
    any of spawnkit runs in the child, its traceback still reaches the parent's error."""
    from spawnkit import spawn_with_plugins
    from spawnkit.errors import ChildRaisedError

    planted = tmp_path / "planted" / "spawnkit"
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text('raise ImportError("planted: not this spawnkit")\n')
    monkeypatch.setenv("PYTHONPATH", str(planted.parent))  # the child's; ours is imported
    group = spawn_with_plugins("os:getpid", start_method="spawn", ready_timeout=60)
    with group, pytest.raises(ChildRaisedError) as info:
        group.join(60)
    text = str(info.value)
    assert "failed in stage 'process_start': ImportError: planted: not this spawnkit" in text
    assert "It failed importing spawnkit itself" in text and "PYTHONPATH" in text
    assert 'File "<string>"' in info.value.traceback_text
