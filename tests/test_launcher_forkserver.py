"""Warm start: fork servers keyed by configuration, preloads checked, servers shut down."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from _launcher_support import Site, gone, make_site
from spawnkit import spawn_with_plugins
from spawnkit.errors import ChildRaisedError, ForkServerError, ImportGuardError
from spawnkit.protocol import warm as _warm_server


def _running_cmdlines() -> list[str]:
    """The command lines of this process's children that still run: a zombie (another test's
    child, exited and not reaped yet) has none to read, and ``cmdline()`` raises on it."""
    lines = []
    for child in psutil.Process().children():
        try:
            lines.append(" ".join(child.cmdline()))
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue
    return lines


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


def _run(site: Site, **kw: object) -> dict[str, object]:
    with spawn_with_plugins(site.entry(), namespace=site.ns, start_method="forkserver", **kw) as g:
        (result,) = g.results(timeout=60)
    assert isinstance(result, dict)
    return result


def test_server_is_reused_per_key_and_shut_down(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _run(site)
    second = _run(site)
    assert first["ppid"] == second["ppid"], "the same configuration must reuse its fork server"
    assert first["hooked"] == "orig+hooked"  # workers from a server see patched code
    server_pid = int(first["ppid"])  # type: ignore[call-overload]
    monkeypatch.setenv("SKT_SOMETHING_CHANGED", "1")
    third = _run(site)
    assert third["ppid"] != server_pid, "a changed environment needs a new server"
    # the server it replaced is let go, idle (test_warm_environ_change.py)
    assert gone(server_pid)
    assert _warm_server.shutdown_forkservers() >= 1
    assert gone(int(third["ppid"]))  # type: ignore[call-overload]


def test_preloaded_modules_are_inherited(site: Site) -> None:
    def has_json_tool() -> bool:
        return "json.tool" in sys.modules

    with spawn_with_plugins(
        has_json_tool, namespace=site.ns, start_method="forkserver", preload=("json.tool",)
    ) as group:
        assert group.results(timeout=60) == [True]
    with spawn_with_plugins(has_json_tool, namespace=site.ns) as group:
        assert group.results(timeout=60) == [False]  # a cold spawn did not import it


def test_preloaded_hook_target_fails_the_guard_when_workers_bootstrap(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only where the server does not apply hooks first (workers bootstrap themselves).

    The preloaded module keeps the original in a tuple, which the stale-binding
    sweep cannot rebind: with no such holder the guard only warns (issue 19).
    """
    monkeypatch.setenv(_warm_server.MODE_VAR, "worker")
    holder = f"{site.pkg}_holder"
    (site.root / f"{holder}.py").write_text(f"from {site.pkg}.target import func\nPAIR = (func,)\n")
    with (
        spawn_with_plugins(
            site.entry(),
            namespace=site.ns,
            start_method="forkserver",
            preload=(holder,),
        ) as group,
        pytest.raises(ChildRaisedError) as info,
    ):
        group.join(timeout=60)
    err = info.value
    assert isinstance(err.child_exception, ImportGuardError), str(err)
    assert err.stage == "load_plugins"
    assert f"{site.pkg}.target" in str(err)
    assert "through preload=" in str(err)  # the import site is named as the preload
    assert f"{_warm_server.MODE_VAR}=worker" in str(err)  # and the mode that allowed it


def test_preload_that_fails_to_import_is_reported(site: Site) -> None:
    (site.root / f"{site.tag}_broken.py").write_text("raise ImportError('no such driver')\n")
    with pytest.raises(ForkServerError) as info:
        spawn_with_plugins(
            site.entry(),
            namespace=site.ns,
            start_method="forkserver",
            preload=("json", f"{site.tag}_broken"),
        )
    text = str(info.value)
    assert f"preload module '{site.tag}_broken' failed to import" in text
    assert "no such driver" in text
    assert not [line for line in _running_cmdlines() if "_forkserver" in line]


@pytest.mark.needs_torch
def test_preload_that_initializes_an_accelerator_is_refused(site: Site) -> None:
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: a real context must be created to be refused")
    (site.root / f"{site.tag}_cudainit.py").write_text("import torch\ntorch.cuda.init()\n")
    with pytest.raises(ForkServerError, match="initialized an accelerator context"):
        spawn_with_plugins(
            site.entry(),
            namespace=site.ns,
            start_method="forkserver",
            preload=(f"{site.tag}_cudainit",),
        )


def test_server_starts_in_a_process_with_many_descriptors(site: Site) -> None:
    """Descriptor numbers above 1024 (a server with many sockets) must not break warm start."""
    import os
    import resource

    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1300:
        pytest.skip("needs an open-file limit above 1300")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert _run(site)["hooked"] == "orig+hooked"
    finally:
        for fd in held:
            os.close(fd)


def test_server_is_not_reused_after_set_executable(site: Site, tmp_path: Path) -> None:
    """The key holds the interpreter the server runs: ``set_executable()`` needs a new one."""
    import multiprocessing

    first = _run(site)
    other = tmp_path / "python-wrapper"
    other.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    other.chmod(0o755)
    multiprocessing.set_executable(str(other))
    try:
        second = _run(site)
        assert second["ppid"] != first["ppid"], "a server of another interpreter was reused"
        assert second["hooked"] == "orig+hooked"
    finally:
        multiprocessing.set_executable(sys.executable)


def test_a_launcher_that_set_its_limits_affinity_or_umask_gets_a_new_server(site: Site) -> None:
    """A warm worker is a fork of its server, which inherited them when it started: the
    launcher's later ``setrlimit`` (SGLang's ``set_ulimit()``), ``sched_setaffinity`` or
    ``umask`` reached spawned workers only, the warm ones kept the old values, nothing said."""
    import os
    import resource

    servers = [_run(site)["ppid"]]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    affinity = os.sched_getaffinity(0)
    umask = os.umask(0o022)
    os.umask(umask)
    changes = [
        lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard, 4096) - 1, hard)),
        lambda: os.umask(0o077),
    ]
    if len(affinity) > 1:  # one CPU: no other affinity to set
        changes.append(lambda: os.sched_setaffinity(0, {min(affinity)}))
    try:
        for change in changes:
            change()
            servers.append(_run(site)["ppid"])
            assert servers[-1] not in servers[:-1], "a server started before the change was reused"
        assert _run(site)["ppid"] == servers[-1]  # nothing changed since: reused
    finally:
        os.umask(umask)
        os.sched_setaffinity(0, affinity)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


_BASE_PRELOAD = """
class PreloadAbort(BaseException):
    pass

raise {what}
"""


@pytest.mark.parametrize(
    ("what", "shown"),
    [
        ("KeyboardInterrupt('preload ki')", "KeyboardInterrupt: preload ki"),
        ("PreloadAbort('custom base')", "PreloadAbort: custom base"),
    ],
)
def test_a_preload_that_raises_a_base_exception_is_reported_as_raised(
    site: Site, what: str, shown: str
) -> None:
    """A preload raising KeyboardInterrupt read "killed by SIGINT" (no signal was sent), a
    custom BaseException "exited with code 1": no traceback, kind '' instead of 'preload'."""
    name = f"{site.tag}_base_{'ki' if 'Keyboard' in what else 'custom'}"
    (site.root / f"{name}.py").write_text(_BASE_PRELOAD.format(what=what))
    with pytest.raises(ForkServerError) as info:
        spawn_with_plugins(
            site.entry(), namespace=site.ns, start_method="forkserver", preload=(name,)
        )
    err = info.value
    assert (err.kind, err.stage) == ("preload", "preload"), str(err)
    assert f"preload module '{name}' failed to import" in str(err)
    assert shown in err.traceback_text and "killed by" not in str(err)
    assert gone(err.server_pid or 0)


def test_a_plugin_that_raises_keyboard_interrupt_in_the_server_is_reported_as_raised(
    site: Site,
) -> None:
    from spawnkit import _metadata
    from spawnkit.testing import write_distribution

    write_distribution(
        site.root,
        f"{site.tag}-ki",
        "1.0",
        entry_points={site.ns.config.plugin_group: {"ki": f"{site.tag}_ki:register"}},
        modules={f"{site.tag}_ki": "def register():\n    raise KeyboardInterrupt('plugin ki')\n"},
    )
    _metadata.clear_cache()
    with pytest.raises(ForkServerError) as info:
        spawn_with_plugins(site.entry(), namespace=site.ns, start_method="forkserver")
    err = info.value
    assert err.stage == "load_plugins", str(err)
    assert "KeyboardInterrupt: plugin ki" in err.traceback_text, str(err)
    assert "killed by SIGINT" not in str(err)
    assert gone(err.server_pid or 0)
