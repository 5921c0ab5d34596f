"""spawnkit's pytest plugin, registered through the ``pytest11`` entry point.

Installing spawnkit makes these fixtures available to every test suite, so a
plugin author tests a plugin the way spawnkit will run it: real
distributions, real spawned workers, the real selection variables.  Every
fixture is function-scoped and keeps its state in the test's own temporary
directory and environment, so suites run under ``pytest -n auto``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from spawnkit.testing._env import PlatformSelection, PluginAllowlist
from spawnkit.testing._isolation import HookIsolation, format_leaks
from spawnkit.testing._modes import LAUNCH_MODES, LaunchMode
from spawnkit.testing._sandbox import DistSandbox

if TYPE_CHECKING:
    from spawnkit.hooks.registry import HookRegistry
    from spawnkit.namespace import Namespace
    from spawnkit.spec import NamespaceConfig

__all__ = [
    "isolated_hooks",
    "isolated_hooks_for",
    "launch_mode",
    "platform_selection",
    "plugin_allowlist",
    "plugin_dist",
    "spawnkit_namespace",
]


_ISOLATION = pytest.StashKey[HookIsolation]()
_MODE_IDS = frozenset(m.id for m in LAUNCH_MODES)
_MODES_TEXT = ", ".join(repr(m.id) for m in LAUNCH_MODES)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"launch_modes(*ids): run a test using the launch_mode fixture only under these modes "
        f"(of {_MODES_TEXT})",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``launch_mode`` with only the modes a ``launch_modes`` marker names.

    Why here and not by deselecting later: deselected variants are still
    generated and then counted as "N deselected" on every run of a suite that
    restricts a test, which reads like a filter the user forgot.  Putting a
    ``parametrize`` mark on the definition (before pytest's own hooks read
    the marks) makes the fixture's full parameter list give way to it.
    """
    if "launch_mode" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("launch_modes")
    if marker is None:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if "launch_mode" in (
            names.replace(" ", "").split(",") if isinstance(names, str) else names
        ):
            return  # the test parametrizes it itself
    modes = [m for m in LAUNCH_MODES if m.id in marker.args]
    metafunc.definition.add_marker(
        pytest.mark.parametrize("launch_mode", modes, indirect=True, ids=[m.id for m in modes])
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a ``launch_modes`` marker that names a mode that does not exist (a typo)."""
    for item in items:
        marker = item.get_closest_marker("launch_modes")
        if marker is None:
            continue
        unknown = sorted(set(marker.args) - _MODE_IDS)
        if unknown:
            raise pytest.UsageError(
                f"{item.nodeid}: @pytest.mark.launch_modes names unknown mode(s) "
                f"{', '.join(unknown)}; known: {', '.join(sorted(_MODE_IDS))}"
            )


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
    """Runs the test once per launch mode: spawn-multiprocessing, forkserver-multiprocessing,
    spawn-multiprocess (``spawnkit.testing.LAUNCH_MODES``).

    Pass ``**launch_mode.kwargs()`` to ``spawn_with_plugins``/``run_entry``, or use
    ``launch_mode.get_context()``.  A mode this machine cannot run is skipped with the
    reason; ``@pytest.mark.launch_modes("spawn-multiprocessing")`` runs only the modes
    named (the others are not generated, so nothing is reported as deselected).
    """
    mode: LaunchMode = request.param
    reason = mode.unavailable_reason()
    if reason is not None:
        pytest.skip(f"launch mode {mode.id}: {reason}")
    return mode


@pytest.fixture
def _spawnkit_hook_isolation(request: pytest.FixtureRequest) -> Iterator[HookIsolation]:
    """The one isolation of a test, shared by ``isolated_hooks`` and ``isolated_hooks_for``.

    One object, so a registry isolated through either fixture is never taken
    for a leak by the other.
    """
    isolation = HookIsolation()
    isolation.begin()
    request.node.stash[_ISOLATION] = isolation
    try:
        yield isolation
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


@pytest.fixture
def isolated_hooks(
    request: pytest.FixtureRequest, _spawnkit_hook_isolation: HookIsolation
) -> HookRegistry:
    """A clean default ``HookRegistry`` for an in-process hook test; restores every patch.

    Yields the registry: ``isolated_hooks.register(target, hook, HookType.AROUND)``,
    ``isolated_hooks.apply_hooks()``; class-level calls (``HookRegistry.register``,
    ``plugin_hook``) and the default namespace use it too.  On teardown every
    patch made through it is undone (no ``unapply()`` needed).  The test FAILS if
    a patch leaked: a target patched through a registry that is not isolated
    (a namespace's own ``ns.hooks``) and still patched when the test returns,
    or a target that still holds its patched object after the restore.
    For an engine's namespace use ``isolated_hooks_for(ns)``, or parametrize
    indirectly: ``@pytest.mark.parametrize("isolated_hooks", [ns], indirect=True)``.
    """
    return _spawnkit_hook_isolation.isolate(getattr(request, "param", None))


@pytest.fixture
def isolated_hooks_for(
    _spawnkit_hook_isolation: HookIsolation,
) -> Callable[[Namespace | NamespaceConfig | str | None], HookRegistry]:
    """Factory: ``isolated_hooks_for(ns)`` isolates a namespace's own registry (``ns.hooks``).

    Returns that registry, clean for the test: ``ns.hooks.register(...)``,
    ``ns.plugin_hook`` and ``ns.apply_plugin_hooks()`` use it, and teardown
    undoes its patches and resets the namespace's plugin-loading state.  Call
    it once per namespace the test patches (``None`` is the default one); the
    leak check of ``isolated_hooks`` covers every registry not isolated.
    """
    return _spawnkit_hook_isolation.isolate


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
