"""spawnkit's pytest plugin (``pytest11`` entry point): real distributions, real spawned workers,
real selection variables.  Function-scoped, per-test state: safe under ``pytest -n auto``.
"""

from __future__ import annotations

import sys
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from spawnkit.testing._env import PlatformSelection, PluginAllowlist
from spawnkit.testing._isolation import HookIsolation, format_leaks
from spawnkit.testing._leftover import (
    HookLeakWarning,
    Leftovers,
    Patches,
    here_records,
    own_namespace,
    patches,
)
from spawnkit.testing._modes import LAUNCH_MODES, LaunchMode
from spawnkit.testing._platforms import Decisions, decisions, forget_since, taking_in
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
_LEFTOVERS = pytest.StashKey[Leftovers]()  # on the config: what earlier test bodies left patched
_BEFORE_CALL = pytest.StashKey[Patches]()  # on a test without the fixture: before its setup
_IN_SETUP = pytest.StashKey["pytest.Item | None"]()  # on the config: the test being set up
#: on such a test: the ``bootstrap_here()`` records and the phase flags as its setup began
_HERE_BEFORE = pytest.StashKey[tuple[dict[str, Any], Any]]()
#: on every test: the platform managers' decisions and ``bootstrap_here()`` records as its
#: setup began (``_platforms``: what the test decides is forgotten after it)
_PLATFORMS = pytest.StashKey[tuple[Decisions, dict[str, Any]]]()
_MODE_IDS = frozenset(m.id for m in LAUNCH_MODES)
_MODES_TEXT = ", ".join(repr(m.id) for m in LAUNCH_MODES)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_LEFTOVERS] = Leftovers()
    config.addinivalue_line(
        "markers",
        f"launch_modes(*ids): run a test using the launch_mode fixture only under these modes "
        f"(of {_MODES_TEXT})",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``launch_mode`` with only the marked modes (no "N deselected" on every run)."""
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
    """Factory of real distributions on a per-test ``sys.path`` entry."""
    sandbox = DistSandbox(tmp_path_factory.mktemp("spawnkit-dists"))
    try:
        yield sandbox
    finally:
        sandbox.close()


@pytest.fixture
def platform_selection() -> Iterator[PlatformSelection]:
    """Select the platform for this test and its workers (``None``: auto); restored afterwards."""
    selection = PlatformSelection()
    try:
        yield selection
    finally:
        selection.undo()


@pytest.fixture
def plugin_allowlist() -> Iterator[PluginAllowlist]:
    """Choose which general plugins load in this test and its workers; restored afterwards."""
    allowlist = PluginAllowlist()
    try:
        yield allowlist
    finally:
        allowlist.undo()


@pytest.fixture
def spawnkit_namespace() -> Any:
    """A fresh namespace ``t_<hex>``: groups, variables and registry shared with no test."""
    from spawnkit.namespace import Namespace

    name = f"t_{uuid.uuid4().hex[:10]}"
    own_namespace(name)  # no later test declares it: what the test leaves on it reaches no one
    return Namespace(name, name.upper())


@pytest.fixture(params=LAUNCH_MODES, ids=[m.id for m in LAUNCH_MODES])
def launch_mode(request: pytest.FixtureRequest) -> LaunchMode:
    """Runs the test once per launch mode: spawn-multiprocessing, forkserver-multiprocessing,
    spawn-multiprocess.  Pass ``**launch_mode.kwargs()``; ``launch_modes`` marks restrict it.
    """
    mode: LaunchMode = request.param
    reason = mode.unavailable_reason()
    if reason is not None:
        pytest.skip(f"launch mode {mode.id}: {reason}")
    return mode


@pytest.fixture
def _spawnkit_hook_isolation(request: pytest.FixtureRequest) -> Iterator[HookIsolation]:
    """One isolation for both fixtures, so neither takes the other's registry for a leak."""
    leftovers = request.config.stash.get(_LEFTOVERS, None)
    inherited = leftovers.inherited() if leftovers is not None else None
    if inherited is not None:  # before begin(): nothing to undo
        pytest.fail(inherited, pytrace=False)
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
        try:
            if leaks:
                pytest.fail(format_leaks(leaks, when="past the end of the test"), pytrace=False)
        finally:
            isolation.apply_arrived()  # the suite's on_import hooks the test's import missed


@pytest.fixture
def isolated_hooks(
    request: pytest.FixtureRequest, _spawnkit_hook_isolation: HookIsolation
) -> HookRegistry:
    """A clean default ``HookRegistry`` for an in-process hook test; restores every patch.

    The test FAILS on a leak (see :mod:`spawnkit.testing._isolation`).  For an engine's
    namespace: ``isolated_hooks_for(ns)``, or parametrize ``isolated_hooks`` indirectly with it.
    """
    return _spawnkit_hook_isolation.isolate(getattr(request, "param", None))


@pytest.fixture
def isolated_hooks_for(
    _spawnkit_hook_isolation: HookIsolation,
) -> Callable[[Namespace | NamespaceConfig | str | None], HookRegistry]:
    """Factory: ``isolated_hooks_for(ns)`` isolates ``ns.hooks`` (``None``: default)."""
    return _spawnkit_hook_isolation.isolate


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Take a test's baseline before its fixtures run: a function-scoped fixture is the
    test's own, and what it applies and leaves is that test's leak (taken after the fixtures,
    it was the baseline: no warning, and a later isolated test ran hooked code unexplained)."""
    item.stash[_PLATFORMS] = (decisions(), here_records())
    if "_spawnkit_hook_isolation" not in getattr(item, "fixturenames", ()):
        item.stash[_BEFORE_CALL] = patches()
        from spawnkit.spec import _phase

        item.stash[_HERE_BEFORE] = (here_records(), _phase.snapshot())
    item.config.stash[_IN_SETUP] = item
    try:
        return (yield)
    finally:
        item.config.stash[_IN_SETUP] = None


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A module-, class- or session-scoped fixture set up for the test is the suite's: what it
    applies outlives the test by design, so it joins the test's baseline."""
    item = request.config.stash.get(_IN_SETUP, None)
    if item is None or fixturedef.scope == "function":
        return (yield)
    before = item.stash.get(_BEFORE_CALL, None)
    ahead = patches() if before is not None else None
    decided, recorded = decisions(), here_records()
    try:
        return (yield)
    finally:
        if ahead is not None:
            item.stash[_BEFORE_CALL] = item.stash[_BEFORE_CALL].taking_in(ahead, patches())
        platforms, records = item.stash[_PLATFORMS]
        made = {n: r for n, r in here_records().items() if recorded.get(n) is not r}
        item.stash[_PLATFORMS] = (taking_in(platforms, decided, decisions()), records | made)


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
        _missed_provisions(isolation)
    return result


def _missed_provisions(isolation: HookIsolation) -> None:
    """A module provided after the test's code missed it: fail (or warn) as a worker would."""
    for policy, message in isolation.missed_provisions():
        if policy == "error":
            pytest.fail(message, pytrace=False)
        from spawnkit.bootstrap.guard import ImportGuardWarning

        warnings.warn(message, ImportGuardWarning, stacklevel=1)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """Warn at a test without the fixture that left patches applied (or on_import hooks armed)
    past its teardown."""
    try:
        return (yield)
    finally:
        before = item.stash.get(_BEFORE_CALL, None)
        if before is not None:
            del item.stash[_BEFORE_CALL]  # it holds the registries' states
        leftovers = item.config.stash.get(_LEFTOVERS, None)
        message = None
        if before is not None and leftovers is not None:
            message = leftovers.after_test(item.nodeid, before)
            here = item.stash.get(_HERE_BEFORE, None)
            if here is not None:
                _forget_undone_bootstraps(*here, leftovers.left_by(item.nodeid))
        _forget_platforms(item)
        if message is not None:
            path, line, _ = item.location
            warnings.warn_explicit(message, HookLeakWarning, path, (line or 0) + 1)


def _forget_platforms(item: pytest.Item) -> None:
    """The platforms the test decided in this process, forgotten (``_platforms``), but a
    namespace's whose ``bootstrap_here()`` the test left applied."""
    taken = item.stash.get(_PLATFORMS, None)
    if taken is None:
        return
    del item.stash[_PLATFORMS]
    platforms, records = taken
    kept = {name for name, record in here_records().items() if records.get(name) is not record}
    forget_since(platforms, kept)


def _forget_undone_bootstraps(before: dict[str, Any], phase: Any, kept: set[str]) -> None:
    """A ``bootstrap_here()`` the test made whose patches it undid (``unapply()``, ``reset()``):
    its record would have a later test's call return this test's report (its plugins, its hooks
    "applied") over unhooked code and load nothing, so the record and the namespace's
    plugin-loading state (and the phase flags, which made it this namespace's bootstrapped
    process) go back to what they were as the test began, as ``isolated_hooks`` does.  One
    whose patches the test left applied (``kept``) stays: it is still true."""
    here: Any = sys.modules.get("spawnkit.launch._here")
    if here is None:
        return
    from spawnkit.namespace import get_namespace
    from spawnkit.spec import _phase
    from spawnkit.testing._isolation import reset_plugins

    for name, record in list(here._applied.items()):
        if before.get(name) is record or name in kept:
            continue
        ns = get_namespace(name)
        reset_plugins(ns)
        here.put_back(ns, before.get(name))
        _phase.restore(phase)
