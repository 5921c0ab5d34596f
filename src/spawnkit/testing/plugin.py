"""spawnkit's pytest plugin, registered through the ``pytest11`` entry point.

Installing spawnkit makes these fixtures available to every test suite, so a
plugin author tests a plugin the way spawnkit will run it: real
distributions, real spawned workers, the real selection variables.  Every
fixture is function-scoped and keeps its state in the test's own temporary
directory and environment, so suites run under ``pytest -n auto``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from spawnkit.testing._env import PlatformSelection, PluginAllowlist
from spawnkit.testing._isolation import HookIsolation, format_leaks
from spawnkit.testing._modes import LAUNCH_MODES, LaunchMode
from spawnkit.testing._sandbox import DistSandbox

__all__ = [
    "isolated_hooks",
    "launch_mode",
    "platform_selection",
    "plugin_allowlist",
    "plugin_dist",
    "spawnkit_namespace",
]


_ISOLATION = pytest.StashKey[HookIsolation]()
_MODE_IDS = frozenset(m.id for m in LAUNCH_MODES)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "launch_modes(*ids): run a test using the launch_mode fixture only under these modes "
        "(ids like 'spawn-multiprocessing', 'forkserver-multiprocessing', 'spawn-multiprocess')",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect launch-mode variants a ``launch_modes`` marker excludes (not skip: no noise)."""
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        mode = callspec.params.get("launch_mode") if callspec is not None else None
        marker = item.get_closest_marker("launch_modes")
        if marker is not None:
            unknown = sorted(set(marker.args) - _MODE_IDS)
            if unknown:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.launch_modes names unknown mode(s) "
                    f"{', '.join(unknown)}; known: {', '.join(sorted(_MODE_IDS))}"
                )
        if isinstance(mode, LaunchMode) and marker is not None and mode.id not in marker.args:
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture
def plugin_dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DistSandbox]:
    """Factory of real distributions on a per-test ``sys.path`` entry.

    ``plugin_dist(name, version="0.1.0", entry_points={group: {ep: "mod:attr"}},
    modules={"mod": source})`` writes a ``*.dist-info`` plus the modules, as an
    installed wheel would, and returns the ``Distribution``.  The directory is
    on ``sys.path`` (spawned children inherit it) and on ``PYTHONPATH``
    (subprocess children).  Malformed entry-point values are written as given,
    so discovery reports them with spawnkit's own typed errors.  Teardown
    removes the directory from ``sys.path``, drops the modules imported from
    it, restores ``PYTHONPATH`` and clears the entry-point cache.
    """
    sandbox = DistSandbox(tmp_path_factory.mktemp("spawnkit-dists"))
    try:
        yield sandbox
    finally:
        sandbox.close()


@pytest.fixture
def platform_selection() -> Iterator[PlatformSelection]:
    """Select the platform for this test and the workers it starts; restored afterwards.

    ``platform_selection("my_device")`` sets the namespace's platform variable
    (``SPAWNKIT_PLATFORM`` by default; pass ``namespace=`` for an engine's own),
    ``platform_selection(None)`` or ``.unset()`` removes it (auto-discovery),
    ``.use_cpu_engine()`` sets the CPU-engine fallback variable.  Resolutions
    already made in this process are reset on each change and on teardown.
    """
    selection = PlatformSelection()
    try:
        yield selection
    finally:
        selection.undo()


@pytest.fixture
def plugin_allowlist() -> Iterator[PluginAllowlist]:
    """Choose which general plugins load in this test and its workers; restored afterwards.

    ``plugin_allowlist(["a", "b"])`` or ``.allow("a", "b")`` loads only those
    entry-point names, ``.none()`` loads none (empty variable), ``.all()``
    loads every discovered plugin (variable removed).  Accepts ``namespace=``;
    plugin-loading state already in this process is reset on each change.
    """
    allowlist = PluginAllowlist()
    try:
        yield allowlist
    finally:
        allowlist.undo()


@pytest.fixture
def spawnkit_namespace() -> Any:
    """A fresh namespace with a unique name (``t_<hex>``): its own groups, variables, registry.

    Tests that declare plugins against it share nothing with other tests,
    in this process or another xdist worker.
    """
    from spawnkit.namespace import Namespace

    name = f"t_{uuid.uuid4().hex[:10]}"
    return Namespace(name, name.upper())


@pytest.fixture(params=LAUNCH_MODES, ids=[m.id for m in LAUNCH_MODES])
def launch_mode(request: pytest.FixtureRequest) -> LaunchMode:
    """Runs the test once per launch mode: (spawn | forkserver) x (multiprocessing | multiprocess).

    Pass ``**launch_mode.kwargs()`` to ``spawn_with_plugins``/``run_entry``, or use
    ``launch_mode.get_context()``.  Unavailable modes are skipped with the reason;
    ``@pytest.mark.launch_modes("spawn-multiprocessing")`` restricts the set.
    """
    mode: LaunchMode = request.param
    reason = mode.unavailable_reason()
    if reason is not None:
        pytest.skip(f"launch mode {mode.id}: {reason}")
    return mode


@pytest.fixture
def isolated_hooks(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A clean default ``HookRegistry`` for an in-process hook test; restores every patch.

    Yields the registry: ``isolated_hooks.register(target, hook, HookType.AROUND)``,
    ``isolated_hooks.apply_hooks()``; class-level calls (``HookRegistry.register``,
    ``plugin_hook``) and the default namespace use it too.  On teardown every
    patch made through it is undone (no ``unapply()`` needed).  The test FAILS if
    a patch leaked: a target patched through another registry (a namespace's
    own ``ns.hooks``) and still patched when the test returns, or a target
    that still holds its patched object after the restore.
    """
    isolation = HookIsolation()
    registry = isolation.start()
    request.node.stash[_ISOLATION] = isolation
    try:
        yield registry
    finally:
        del request.node.stash[_ISOLATION]
        leaks = [
            leak
            for leak in isolation.finish()
            if (leak.registry, leak.target)
            not in {(r.registry, r.target) for r in isolation.reported}
        ]
        if leaks:
            pytest.fail(format_leaks(leaks, when="past the end of the test"), pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Fail (not error) a passing test that leaked a patch, while the test is still running."""
    result = yield
    isolation = item.stash.get(_ISOLATION, None)
    if isolation is not None:
        leaks = isolation.leaks()
        if leaks:
            isolation.reported.extend(leaks)
            pytest.fail(format_leaks(leaks, when="by this test"), pytrace=False)
    return result
