"""A launcher that changes ``os.environ`` between warm launches lets the server it replaced go.

The launcher's environment is part of a warm-start server's key (README's "Launch workers"), so
a long-lived launcher that set a variable before each launch (an engine's router writing a
request id, a port) got a new server every time, each launch a cold start, and kept every
earlier server alive until it exited (a whole torch process each with ``preload=("torch",)``),
with nothing said.  The server replaced is now let go once no group or context holds it, and an
INFO record (``spawnkit.warm``) names the variables that changed, never their values.  Real
launcher processes, a real installed plugin distribution, real servers checked with psutil.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil

from _plugin_app import run_script, write_app

_LAUNCHER = """
import json, logging, os, pathlib, sys, time
sys.path.insert(0, {site!r})
import psutil
import spawnkit
from spawnkit.protocol import warm

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})
GATE = pathlib.Path(sys.argv[2])
RECORDS = []

class Keep(logging.Handler):
    def emit(self, record):
        RECORDS.append(record.getMessage())

logging.getLogger("spawnkit.warm").addHandler(Keep())
logging.getLogger("spawnkit.warm").setLevel(logging.INFO)

def start(payload=None, env=None):
    return spawnkit.spawn_with_plugins(
        "{pkg}.engine:main", payload, namespace=NS, start_method="forkserver",
        ready_timeout=120, join_timeout=120, env=env,
    )

def launch(env=None):
    with start(env=env) as group:
        return group.results(timeout=120)[0]

def live():  # the warm-start server processes this launcher has, as the OS sees them
    return sorted(
        p.pid for p in psutil.Process().children() if "warm_main" in " ".join(p.cmdline())
    )

def ended(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE and "zombie"
    except psutil.NoSuchProcess:
        return True

def servers():
    return sorted(s.pid for s in warm._servers.values() if s.alive())

def {scenario}():
    out = {{}}
    if {scenario!r} == "same":
        os.environ["WENV_REQ_ID"] = "s3cr3t-one"
        out["pids"] = [launch({{"WENV_STEP": "one"}})[1], launch({{"WENV_STEP": "one"}})[1]]
        out["live"] = live()
    elif {scenario!r} == "changed":
        for i in range(3):
            os.environ["WENV_REQ_ID"] = f"s3cr3t-{{i}}"
            os.environ.pop("WENV_GONE", None) if i == 2 else os.environ.update(WENV_GONE="x")
            out.setdefault("pids", []).append(launch()[1])
        out["ended"] = [ended(pid) for pid in out["pids"][:-1]]
    elif {scenario!r} in ("env_arg", "env_arg_once"):
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i in range(4 if {scenario!r} == "env_arg" else 2):
                out.setdefault("pids", []).append(launch(env={{"WENV_STEP": f"s3cr3t-{{i}}"}})[1])
                out.setdefault("live", []).append(live())
                out.setdefault("told", []).append(
                    [str(w.message) for w in caught if w.category is spawnkit.WarmServerWarning]
                )
        out["lines"] = sorted({{(w.filename, w.lineno) for w in caught}})
        out["ended"] = [ended(pid) for pid in out["pids"][:-1]]
    elif {scenario!r} == "held":
        os.environ["WENV_REQ_ID"] = "s3cr3t-a"
        ctx = spawnkit.get_context("forkserver", namespace=NS)
        running = start(str(GATE))
        running.wait_ready(timeout=120)
        first = launch()[1]
        os.environ["WENV_REQ_ID"] = "s3cr3t-b"
        out["second"] = launch()[1]
        out["first_alive"] = not ended(first)
        # the context made before the change still starts workers from its server
        proc = ctx.Process(target=time.sleep, args=(0,))
        proc.start()
        proc.join(60)
        out["ctx_exit"] = proc.exitcode
        GATE.write_text("go")
        out["running"] = running.results(timeout=120)[0][1]
        out["first"] = first
        del ctx, proc
        import gc; gc.collect()
        os.environ["WENV_REQ_ID"] = "s3cr3t-c"
        out["third"] = launch()[1]
        out["ended"] = [ended(first), ended(out["second"])]
    out["servers"] = servers()
    out["records"] = RECORDS
    return out

if __name__ == "__main__":
    print("OUT", json.dumps({scenario}()))
"""

_ENGINE = """
import os, pathlib, time

def main(gate=None):
    if gate is not None:  # hold this worker until the launcher opens the gate
        deadline = time.monotonic() + 60
        while not pathlib.Path(gate).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    return ["engine", os.getppid()]
"""


def _run(tmp_path: Path, scenario: str, flags: tuple[str, ...] = ()) -> Any:
    app = write_app(
        tmp_path, "wenv", _LAUNCHER.replace("{scenario}", scenario).replace(
            "{scenario!r}", repr(scenario)
        ),
        plugins={}, modules={"engine": _ENGINE},
    )  # fmt: skip
    proc = run_script(app.script, scenario, str(tmp_path / "gate"), flags=flags)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.split("OUT ", 1)[1])
    for pid in out["pids"] if "pids" in out else [out["first"], out["second"], out["third"]]:
        assert not _a_server(pid), "no server outlives its launcher"
    return out


def _a_server(pid: int) -> bool:
    try:
        return "warm_main" in " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def test_a_changed_environment_lets_the_replaced_server_go_and_names_the_variables(
    tmp_path: Path,
) -> None:
    out = _run(tmp_path, "changed")
    pids = out["pids"]
    assert len(set(pids)) == 3, "a changed environment gets a new server (its key)"
    # Before: every earlier server alive until the launcher exited, three in all, unsaid.
    assert out["ended"] == [True, True], "the server replaced must exit and be reaped"
    assert out["servers"] == [pids[-1]]
    let_go = [r for r in out["records"] if "let go" in r]
    assert len(let_go) == 2
    assert f"pid {pids[0]} let go" in let_go[0] and "changed: WENV_REQ_ID" in let_go[0]
    assert "unset: WENV_GONE" in let_go[1]
    assert not any("s3cr3t" in r for r in out["records"]), "values are never printed"


def test_a_server_still_held_by_a_group_or_a_context_is_kept(tmp_path: Path) -> None:
    out = _run(tmp_path, "held")
    first, second, third = out["first"], out["second"], out["third"]
    assert first != second != third
    # A group running on the first server and a context made before the change keep it.
    assert out["first_alive"] is True
    assert out["ctx_exit"] == 0
    assert out["running"] == first
    assert any(f"pid {first} kept" in r and "WENV_REQ_ID" in r for r in out["records"])
    # Once neither holds it, the next launch that replaces a server lets both go.
    assert out["ended"] == [True, True]
    assert out["servers"] == [third]


def test_the_same_environment_keeps_one_server(tmp_path: Path) -> None:
    out = _run(tmp_path, "same")
    assert out["pids"][0] == out["pids"][1]
    assert out["servers"] == out["live"] == [out["pids"][0]]
    assert out["records"] == []


def test_a_launch_env_that_changes_keeps_one_live_server_and_warns_once(tmp_path: Path) -> None:
    """``env={"STEP": str(i)}`` at each launch: a server's env= is in its key (its bootstrap
    ran with it), so each launch got a new server, and every earlier one stayed (four launches,
    four live server processes).  The one replaced is let go as for a changed ``os.environ``,
    and the second time this launcher is told, once, that its warm starts are cold."""
    out = _run(tmp_path, "env_arg")
    pids = out["pids"]
    assert len(set(pids)) == 4, "a changed env= still gets a new server (its workers differ)"
    # Before: [[p0], [p0, p1], [p0, p1, p2], [p0, p1, p2, p3]].
    assert out["live"] == [[pid] for pid in pids]
    assert out["ended"] == [True, True, True]
    assert out["servers"] == [pids[-1]]
    let_go = [r for r in out["records"] if "let go" in r]
    assert len(let_go) == 3
    assert all("env= differs" in r and "changed: WENV_STEP" in r for r in let_go)
    # One change is one cold start, said at INFO only; the second is a pattern: one warning,
    # at the launch line, with the consequence and the fix, never repeated.
    assert [len(told) for told in out["told"]] == [0, 0, 1, 1]
    (text,) = out["told"][-1]
    assert "warm starts from this launcher are cold: 2 " in text
    assert "changed: WENV_STEP" in text and "payload or rank_extra" in text
    assert out["lines"] and all(name.endswith("launch.py") for name, _ in out["lines"])
    assert not any("s3cr3t" in r for r in out["records"] + out["told"][-1])


def test_a_single_env_change_is_not_warned_even_under_w_error(tmp_path: Path) -> None:
    out = _run(tmp_path, "env_arg_once", flags=("-W", "error::spawnkit.WarmServerWarning"))
    first, second = out["pids"]
    assert out["told"] == [[], []]
    assert out["live"] == [[first], [second]]
    assert out["ended"] == [True]
