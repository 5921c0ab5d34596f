"""Pre-bootstrapped warm start: the server runs platform, plugins and hooks once; workers inherit.

Real processes and real distributions throughout: the server is a real fork
server, plugins are ``*.dist-info`` distributions (and one real ``pip
install``), threads and signals are real.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import signal
import sys
import textwrap
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from _launcher_support import Site, gone, make_site
from spawnkit import _metadata, spawn_with_plugins
from spawnkit.errors import ForkSafetyError, ForkServerError
from spawnkit.protocol import warm as _warm_server
from spawnkit.testing import write_distribution

_PROBE = """
import os
from spawnkit.bootstrap import current_report

def run(box=None):
    from {pkg}.target import func
    report = current_report()
    return {{"hooked": func(), "ppid": os.getppid(), "report": report.to_dict(),
             "text": report.format()}}

def plain(box=None):
    return os.getppid()
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


def _probe(site: Site) -> str:
    name = f"{site.tag}_probe"
    (site.root / f"{name}.py").write_text(_PROBE.format(pkg=site.pkg))
    return name


def _launch(site: Site, entry: str, **kw: Any) -> Any:
    with spawn_with_plugins(
        entry, namespace=site.ns, start_method="forkserver", ready_timeout=60, **kw
    ) as group:
        return group.results(timeout=60)


def test_workers_inherit_platform_plugins_and_hooks_from_the_server(site: Site) -> None:
    probe = _probe(site)
    first, second = _launch(site, f"{probe}:run", nprocs=2)
    for out in (first, second):
        assert out["hooked"] == "orig+hooked"
        report = out["report"]
        inherited = report["inherited"]
        assert inherited["server_pid"] == out["ppid"]  # forked from that server
        assert set(inherited["stages"]) == {"initialize_platform", "load_plugins", "apply_hooks"}
        # This process ran only the worker's own stages; the inherited ones kept their timings.
        assert "load_plugins" not in report["stage_seconds"]
        assert "materialize_payload" in report["stage_seconds"]
        assert [p["name"] for p in report["plugins"]] == ["faultplug"]
        assert f"{site.pkg}.target.func" in report["hooks"]
        assert set(report["stage_detail"]["apply_hooks"]) == {"import_targets", "patch"}
        assert f"inherited from warm-start server pid {out['ppid']}" in out["text"]
    assert first["report"]["inherited"] == second["report"]["inherited"]


def test_a_preload_may_import_hook_targets_which_arrive_patched(site: Site) -> None:
    probe = _probe(site)
    (out,) = _launch(site, f"{probe}:run", preload=(f"{site.pkg}.target",))
    assert out["hooked"] == "orig+hooked"
    assert out["report"]["guard"]["violations"] == []


_LATE = """
from spawnkit.bootstrap import current_report
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def late(result, *args, **kwargs):
    return result + "+late"

class RegistersWhenUnpickled:
    # The payload stage of a warm worker runs after the fork: this registration is the
    # worker's own, made after the server reported its hooks.
    def __init__(self, ns):
        self.ns = ns

    def __setstate__(self, state):
        get_namespace(state["ns"]).hooks.register("{pkg}.target.func", late, HookType.AFTER)
        self.ns = state["ns"]

def run(payload=None):
    from {pkg}.target import func
    return {{"hooked": func(), "hooks": current_report().to_dict()["hooks"]}}
"""


def test_a_warm_workers_report_shows_the_hooks_it_changed_after_the_fork(site: Site) -> None:
    # A warm worker's report reuses its server's hook report only while its hooks are the
    # server's: one registered in the payload stage must be in it, applied.
    name = f"{site.tag}_late"
    (site.root / f"{name}.py").write_text(_LATE.format(pkg=site.pkg))
    late = __import__(name).RegistersWhenUnpickled(site.ns.name)
    plain, changed = _launch(site, f"{name}:run"), _launch(site, f"{name}:run", payload=late)
    target = f"{site.pkg}.target.func"
    assert plain[0]["hooked"] == "orig+hooked"
    assert [h["type"] for h in plain[0]["hooks"][target]] == ["AROUND"]
    assert changed[0]["hooked"] == "orig+hooked+late"
    rows = changed[0]["hooks"][target]
    assert [(h["type"], h["state"]) for h in rows] == [("AROUND", "applied"), ("AFTER", "applied")]


_PATCHING = """
from spawnkit.bootstrap import current_report
from {pkg} import target

def mine():
    return "mine"

target.func = mine  # the engine's own patch, made when the entry's module is imported

def run(payload=None):
    from {pkg}.target import func
    return {{"called": func(), "hooks": current_report().to_dict()["hooks"]}}
"""


def test_a_warm_workers_report_says_partial_when_its_entry_replaced_a_target(
    site: Site,
) -> None:
    # The warm worker reuses its server's hook report only while nothing changed it: a target
    # its entry's import replaced is no longer applied there (guard policy warn: it runs on).
    name = f"{site.tag}_patching"
    (site.root / f"{name}.py").write_text(_PATCHING.format(pkg=site.pkg))
    env = {site.ns.config.guard_var: "warn"}
    (out,) = _launch(site, f"{name}:run", env=env)
    assert out["called"] == "mine"
    (row,) = out["hooks"][f"{site.pkg}.target.func"]
    assert row["state"] == "partial" and "replaced after apply_hooks()" in row["reason"]
    assert f"now {name}:mine (" in row["reason"]


def test_changed_plugin_set_or_env_overrides_start_a_new_server(site: Site) -> None:
    probe = _probe(site)
    extra = f"{site.tag}_extra"
    write_distribution(
        site.root,
        f"{site.tag}-extra",
        "1.0",
        entry_points={site.ns.config.plugin_group: {"extra": f"{extra}:register"}},
        modules={extra: _EXTRA_PLUGIN.format(ns=site.ns.name, pkg=site.pkg)},
    )
    _metadata.clear_cache()
    base = _launch(site, f"{probe}:plain")[0]
    assert _launch(site, f"{probe}:plain")[0] == base  # same key: same server
    other_env = _launch(site, f"{probe}:plain", env={"SKT_ANYTHING": "1"})[0]
    assert other_env != base
    # the platform's own plugin stays whatever the allow-list says: only 'extra' goes
    fewer = _launch(site, f"{probe}:run", env={site.ns.config.plugins_var: ""})[0]
    assert fewer["ppid"] not in (base, other_env)
    assert fewer["hooked"] == "orig+hooked"  # that server did not load 'extra'


_EXTRA_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def around(original, *args, **kwargs):
    return original(*args, **kwargs) + "+extra"

def register():
    get_namespace({ns!r}).hooks.register("{pkg}.target.func", around, HookType.AROUND)
"""


def test_a_real_pip_install_between_launches_starts_a_new_server(
    site: Site, tmp_path: Path
) -> None:
    from spawnkit.testing._project import pip_install

    probe = _probe(site)
    (before,) = _launch(site, f"{probe}:run")
    assert before["hooked"] == "orig+hooked"
    mod = f"{site.tag}_extra"
    # A built wheel, so pip needs no build backend: a 3.12+ venv has no setuptools.
    wheel = _write_wheel(
        tmp_path,
        f"{site.tag}-extra",
        "1.0",
        modules={f"{mod}.py": _EXTRA_PLUGIN.format(ns=site.tag, pkg=site.pkg)},
        entry_points=f"[{site.ns.config.plugin_group}]\nextra = {mod}:register\n",
    )
    pip_install(
        sys.executable, wheel, args=("--no-deps", "--target", str(site.root), "--upgrade")
    )
    (after,) = _launch(site, f"{probe}:run")
    assert after["ppid"] != before["ppid"], "a server from before the install was reused"
    assert after["hooked"] == "orig+hooked+extra" or after["hooked"] == "orig+extra+hooked"
    assert {p["name"] for p in after["report"]["plugins"]} == {"faultplug", "extra"}


def _write_wheel(
    where: Path, name: str, version: str, *, modules: dict[str, str], entry_points: str
) -> Path:
    """A pure-Python wheel of ``modules`` (path -> source), as a build backend would write it."""
    stem = f"{name.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    files = {
        **modules,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: spawnkit-tests\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n"
        ),
        f"{info}/entry_points.txt": entry_points,
    }
    record = []
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    wheel = where / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


def _add_plugin(site: Site, name: str, body: str) -> None:
    group = site.ns.config.plugin_group
    write_distribution(
        site.root,
        f"{site.tag}-{name}",
        "1.0",
        entry_points={group: {name: f"{site.tag}_{name}:register"}},
        modules={f"{site.tag}_{name}": body},
    )
    _metadata.clear_cache()


def test_a_plugin_that_leaves_a_thread_running_is_refused_with_its_name(site: Site) -> None:
    _add_plugin(
        site,
        "threader",
        "import threading, time\n"
        "def register():\n"
        "    threading.Thread(target=time.sleep, args=(30,), name='poller', daemon=True).start()\n",
    )
    probe = _probe(site)
    with pytest.raises(ForkSafetyError) as info:
        _launch(site, f"{probe}:plain")
    text = str(info.value)
    assert "thread 'poller'" in text and "plugin 'threader'" in text, text
    assert info.value.culprit == "plugin 'threader'"
    assert info.value.stage == "load_plugins"
    assert gone(info.value.server_pid or 0)


def test_a_plugin_that_leaves_a_connection_open_is_refused_with_its_name(site: Site) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as server:  # the kernel completes the connect
        port = server.getsockname()[1]
        _add_plugin(
            site,
            "telemetry",
            "import socket\n"
            "CONN = None\n"
            "def register():\n"
            "    global CONN\n"
            f"    CONN = socket.create_connection(('127.0.0.1', {port}))\n",
        )
        probe = _probe(site)
        with pytest.raises(ForkSafetyError) as info:
            _launch(site, f"{probe}:plain")
        # Before: served; every warm worker shared the plugin's one connection.
        text = str(info.value)
        assert f"network connection to ('127.0.0.1', {port})" in text, text
        assert "plugin 'telemetry'" in text and info.value.culprit == "plugin 'telemetry'"
        assert info.value.stage == "load_plugins"
        assert gone(info.value.server_pid or 0)
        with spawn_with_plugins(f"{probe}:plain", namespace=site.ns, start_method="spawn") as g:
            assert len(g.results(timeout=60)) == 1  # each spawned worker opens its own


def test_a_plugin_that_makes_an_event_loop_at_load_is_refused_with_its_name(site: Site) -> None:
    _add_plugin(
        site, "loopy", "import asyncio\nLOOP = asyncio.new_event_loop()\ndef register(): ...\n"
    )
    probe = _probe(site)
    with pytest.raises(ForkSafetyError) as info:
        _launch(site, f"{probe}:plain")
    # Before: refused as "a network connection to  (descriptor 7) (its opener is unknown)".
    text = str(info.value)
    assert "an asyncio event loop (its wake-up socket pair" in text, text
    assert "plugin 'loopy'" in text and info.value.culprit == "plugin 'loopy'"
    assert gone(info.value.server_pid or 0)


def test_a_plugin_that_runs_and_closes_an_event_loop_at_load_is_served(site: Site) -> None:
    _add_plugin(
        site, "probe_once", "import asyncio\ndef register():\n    asyncio.run(asyncio.sleep(0))\n"
    )
    assert len(_launch(site, f"{_probe(site)}:plain")) == 1


_SIDECAR = """
import os, subprocess, sys
SIDECAR = None
def register():
    global SIDECAR
    subprocess.run([sys.executable, "-c", "pass"], check=True)  # ran and exited: no concern
    SIDECAR = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(os.path.join({where!r}, "sidecar.pid"), "w") as f:
        f.write(str(SIDECAR.pid))
"""


def test_a_plugin_that_leaves_a_process_running_is_refused_with_its_name(site: Site) -> None:
    # Before: served; no warm worker had the sidecar every spawned worker starts.
    _add_plugin(site, "sidecar", _SIDECAR.format(where=str(site.root)))
    probe = _probe(site)
    try:
        with pytest.raises(ForkSafetyError) as info:
            _launch(site, f"{probe}:plain")
    finally:
        pid = int((site.root / "sidecar.pid").read_text())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # the plugin's own process: it outlives the server
    text = str(info.value)
    assert f"process {pid} (" in text and "time.sleep(60)" in text, text
    assert "plugin 'sidecar'" in text and info.value.culprit == "plugin 'sidecar'"
    assert info.value.stage == "load_plugins" and gone(info.value.server_pid or 0)


def test_a_datagram_or_listening_socket_opened_at_load_is_left_alone(site: Site) -> None:
    _add_plugin(
        site,
        "statsd",
        "import socket\n"
        "SOCKS = []\n"
        "def register():\n"
        "    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "    udp.connect(('127.0.0.1', 8125))  # a connected datagram socket: shareable\n"
        "    SOCKS.extend([udp, socket.create_server(('127.0.0.1', 0))])\n",
    )
    assert len(_launch(site, f"{_probe(site)}:plain")) == 1


def _parallel_torch() -> None:
    torch = pytest.importorskip("torch")
    if torch.get_num_threads() < 2:
        pytest.skip("one intra-op thread: GNU OpenMP starts no pool to leave behind")


_WARM_UP = "import torch\n(torch.randn(4_000_000) * 2).sum()  # a parallel op: OpenMP's pool\n"


@pytest.mark.needs_torch
def test_a_plugin_or_preload_that_starts_openmps_pool_is_refused_with_its_name(
    site: Site,
) -> None:
    # Before: served, and every warm worker hung at its first parallel operation (GNU OpenMP
    # in a forked child waits for the parent's pool threads), until join_timeout.
    _parallel_torch()
    _add_plugin(site, "warmup", _WARM_UP + "def register():\n    pass\n")
    probe = _probe(site)
    with pytest.raises(ForkSafetyError) as info:
        _launch(site, f"{probe}:plain")
    text = str(info.value)
    assert "plugin 'warmup'" in text and "GNU OpenMP's thread pool" in text, text
    assert info.value.culprit.startswith("plugin 'warmup'") and info.value.stage == "load_plugins"
    assert gone(info.value.server_pid or 0)
    preload = f"{site.tag}_warm_preload"
    (site.root / f"{preload}.py").write_text(_WARM_UP)
    no_plugins = {site.ns.config.plugins_var: ""}  # this time the preload alone
    with pytest.raises(ForkSafetyError, match=f"started by preload module {preload!r}"):
        _launch(site, f"{probe}:plain", preload=(preload,), env=no_plugins)


@pytest.mark.needs_torch
def test_a_plugin_importing_torch_and_numpy_without_running_ops_is_served(site: Site) -> None:
    # numpy's import starts OpenBLAS's pool, which resets itself in a forked child: left alone
    _parallel_torch()
    _add_plugin(site, "importer", "import numpy, torch\ndef register():\n    pass\n")
    assert len(_launch(site, f"{_probe(site)}:plain")) == 1


@pytest.mark.needs_torch
def test_a_plugin_that_creates_an_accelerator_context_is_refused_with_its_name(
    site: Site,
) -> None:
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: a real context must be created to be refused")
    _add_plugin(site, "cudaplug", "def register():\n    import torch\n    torch.cuda.init()\n")
    with pytest.raises(ForkSafetyError) as info:
        _launch(site, f"{_probe(site)}:plain")
    assert "plugin 'cudaplug'" in str(info.value) and "torch.cuda" in str(info.value)


def test_a_server_failure_in_an_inherited_stage_is_typed_and_names_the_stage(
    site: Site,
) -> None:
    env = {"SKT_FAULT_STAGE": "load_plugins", "SKT_FAULT_KIND": "raise", "SKT_FAULT_RANK": "0"}
    with pytest.raises(ForkServerError) as info:
        _launch(site, f"{_probe(site)}:plain", env=env)
    assert info.value.stage == "load_plugins"
    assert "injected fault in load_plugins" in info.value.traceback_text
    assert "SPAWNKIT_WARM_BOOTSTRAP=worker" in str(info.value)


def test_a_dead_server_is_replaced_on_the_next_launch(site: Site) -> None:
    probe = _probe(site)
    first = _launch(site, f"{probe}:plain")[0]
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while not gone(first) and time.monotonic() < deadline:
        time.sleep(0.02)
    second = _launch(site, f"{probe}:plain")[0]
    assert second != first


def test_a_launch_racing_a_stuck_server_gets_a_typed_error_not_a_hang(site: Site) -> None:
    probe = _probe(site)
    server = _launch(site, f"{probe}:plain")[0]
    os.kill(server, signal.SIGSTOP)  # alive, so it is picked, but it will never fork
    try:
        started = time.monotonic()
        with (
            pytest.raises(ForkServerError) as info,
            spawn_with_plugins(
                f"{probe}:plain", namespace=site.ns, start_method="forkserver", ready_timeout=2
            ) as group,
        ):
            group.results(timeout=10)
        assert time.monotonic() - started < 10
        assert f"pid {server}" in str(info.value) and "did not fork a worker" in str(info.value)
        assert gone(server)  # the stuck server was killed, so the next launch replaces it
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(server, signal.SIGCONT)


def _dead(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def test_a_launch_racing_the_servers_death_gets_a_typed_error(site: Site) -> None:
    """Alive when picked, dead by the time the launch connects: refused, not a hang."""
    pid = _launch(site, f"{_probe(site)}:plain")[0]
    (server,) = [s for s in _warm_server._servers.values() if s.pid == pid]
    os.kill(pid, signal.SIGKILL)
    # kill() only queues the signal: wait (bounded) until the server is really gone.
    deadline = time.monotonic() + 10
    while not _dead(pid):
        assert time.monotonic() < deadline, "the SIGKILLed server did not die within 10 s"
        time.sleep(0.01)
    # What a launch does (``WarmPopen._launch``): connect, then read the forked worker's pid.
    # The connect itself may still succeed: a spare the server forked just before the kill
    # holds the listener until its first lines close it, and then resets the connection.
    with pytest.raises(ForkServerError) as info:
        sentinel, w = server.connect_to_new_process([])
        try:
            server.read_child_pid(sentinel)
        finally:
            os.close(sentinel)
            os.close(w)
    assert f"pid {pid}" in str(info.value) and "killed by SIGKILL" in str(info.value)
    assert "The next launch starts a new server" in str(info.value)


def test_launching_script_binding_a_target_at_module_scope_gets_the_patched_one(
    site: Site, tmp_path: Path
) -> None:
    """Re-imported in the worker after the server applied hooks: the script's name is patched."""
    import subprocess

    script = tmp_path / "launch.py"
    script.write_text(
        textwrap.dedent(
            f"""\
            import sys; sys.path[:0] = {[str(site.root), str(Path(__file__).parent)]!r}
            from {site.pkg}.target import func
            from spawnkit import spawn_with_plugins
            from spawnkit.namespace import Namespace

            def entry():
                return func()

            if __name__ == "__main__":
                ns = Namespace({site.tag!r}, env_prefix={site.tag.upper()!r})
                with spawn_with_plugins(entry, namespace=ns, start_method="forkserver") as g:
                    print(g.results(timeout=60)[0], func())
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["orig+hooked", "orig"]  # worker patched; parent untouched


def test_a_server_that_cannot_import_spawnkit_sends_its_traceback(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its import fails before any status pipe exists: the traceback still reaches the error."""
    planted = tmp_path / "planted" / "spawnkit"
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text('raise ImportError("planted: not this spawnkit")\n')
    # The server is a fresh interpreter that finds this package first; this process keeps its own.
    monkeypatch.setenv("PYTHONPATH", str(planted.parent))
    with pytest.raises(ForkServerError) as info:
        _launch(site, "os:getpid")
    text = str(info.value)
    assert "died while starting up" in text and "Server traceback (pid " in text
    assert "ImportError: planted: not this spawnkit" in text
    assert "ImportError: planted" in info.value.traceback_text


def test_a_server_slow_in_the_launchers_own_modules_names_them_not_the_stage_before(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen on a GPU machine: a launcher that had imported ``spawnkit.platforms.custom_op`` made
    its server import torch after ``apply_hooks``, and the timeout blamed ``apply_hooks``."""
    probe = _probe(site)
    slow = f"{site.tag}_slowmod"
    (site.root / f"{slow}.py").write_text("import time\ntime.sleep(60)\n")
    own = _warm_server.launcher_modules
    monkeypatch.setattr(_warm_server, "launcher_modules", lambda: [slow, *own()])  # first
    started = time.monotonic()
    with (
        pytest.raises(ForkServerError) as info,
        spawn_with_plugins(
            f"{probe}:plain", namespace=site.ns, start_method="forkserver", ready_timeout=3
        ) as group,
    ):
        group.results(timeout=10)
    assert time.monotonic() - started < 30
    text = str(info.value)
    head = text.split("(stack below)")[0]
    assert "stuck importing the launcher's own modules" in head, text
    assert "apply_hooks" not in head
    assert f"{slow}.py" in text  # the server's stack dump shows which module
    assert info.value.stage == "preload"


_GC_PRELOAD = """
import gc

AT_PRELOAD = gc.get_threshold()[0]


def entry():
    return AT_PRELOAD, gc.get_threshold()[0], gc.isenabled()
"""


def test_a_warm_server_preloads_without_automatic_collections_and_its_workers_collect(
    site: Site,
) -> None:
    """The server's preloads are frozen once loaded (a full collection first); collecting
    while torch is preloaded only walked it again (~80 ms).  Its workers collect as usual."""
    module = f"{site.tag}_gcpre"
    (site.root / f"{module}.py").write_text(_GC_PRELOAD)
    (at_preload, at_entry, enabled) = _launch(site, f"{module}:entry", preload=(module,))[0]
    assert at_preload == 0  # paused while the server imported it
    assert at_entry > 0 and enabled  # the worker's collector runs
