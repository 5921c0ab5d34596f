"""The pytest plugin seen from outside: a fresh pytest run, as a plugin author's suite sees it."""

from __future__ import annotations

import pytest

FIXTURES = (
    "plugin_dist",
    "platform_selection",
    "plugin_allowlist",
    "isolated_hooks",
    "isolated_hooks_for",
    "launch_mode",
    "spawnkit_namespace",
)


def test_fixtures_are_listed_with_their_docs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("--fixtures", "-p", "no:cacheprovider", timeout=120)
    assert result.ret == 0
    text = result.stdout.str()
    assert "fixtures defined from spawnkit.testing.plugin" in text
    for name in FIXTURES:
        result.stdout.fnmatch_lines([f"{name}*"])
    # each one comes with the first line of its docstring
    result.stdout.fnmatch_lines(
        [
            "plugin_dist*",
            "*Factory of real distributions on a per-test ``sys.path`` entry.*",
        ]
    )
    result.stdout.fnmatch_lines(["isolated_hooks*", "*restores every patch*"])
    result.stdout.fnmatch_lines(["launch_mode*", "*once per launch mode*"])


def test_launch_modes_marker_with_an_unknown_id_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_modes="""
        import pytest

        @pytest.mark.launch_modes("spawn-threads")
        def test_x(launch_mode):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown mode(s) spawn-threads*"])


def test_launch_modes_marker_generates_only_the_named_modes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_modes="""
        import pytest

        @pytest.mark.launch_modes("spawn-multiprocessing", "forkserver-multiprocessing")
        def test_x(launch_mode):
            assert launch_mode.context == "multiprocessing"

        def test_all(launch_mode):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", timeout=120)
    # The excluded mode is never generated: nothing "deselected" on every run of the suite.
    result.assert_outcomes(passed=5)
    assert "deselected" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*collected 5 items*"])
    result.stdout.fnmatch_lines(
        [
            "*test_x[[]spawn-multiprocessing[]] PASSED*",
            "*test_x[[]forkserver-multiprocessing[]] PASSED*",
        ]
    )
    assert "test_x[spawn-multiprocess]" not in result.stdout.str()


LEAKY_SUITE = """
import sys
import types
import uuid

import pytest

from spawnkit.hooks import HookType
from spawnkit.namespace import Namespace

mod = types.ModuleType("leaky_target_mod")
exec("def compute(x):\\n    return x + 1\\n", mod.__dict__)
sys.modules["leaky_target_mod"] = mod
ORIGINAL = mod.compute
NS = Namespace(f"t_{uuid.uuid4().hex[:8]}")


def plus_100(result, *a, **k):
    return result + 100


def test_1_patches_through_the_isolated_registry(isolated_hooks):
    isolated_hooks.register("leaky_target_mod.compute", plus_100, HookType.AFTER)
    isolated_hooks.apply_hooks()
    assert mod.compute(1) == 102


def test_2_sees_the_original_again(isolated_hooks):
    assert mod.compute is ORIGINAL


def test_3_leaks_through_a_namespace_registry(isolated_hooks):
    NS.hooks.register("leaky_target_mod.compute", plus_100, HookType.AFTER)
    NS.hooks.apply_hooks()
    assert mod.compute(1) == 102


def test_4_the_leak_was_restored():
    assert mod.compute is ORIGINAL


def test_5_undoing_its_own_patch_is_fine(isolated_hooks):
    NS.hooks.apply_hooks()
    NS.hooks.unapply()
    assert mod.compute is ORIGINAL


def test_6_a_failing_test_keeps_its_own_failure(isolated_hooks):
    NS.hooks.apply_hooks()
    assert False, "the test's own assertion"
"""


def test_isolated_hooks_fails_a_test_that_leaks_a_patch(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_leaky=LEAKY_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", timeout=120
    )
    # test_6 fails for its own reason; its leak is still reported, as a teardown error.
    result.assert_outcomes(passed=4, failed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_3_leaks_through_a_namespace_registry FAILED*",
            "*test_4_the_leak_was_restored PASSED*",
        ]
    )
    text = result.stdout.str()
    assert "isolated_hooks: 1 hook patch(es) leaked by this test" in text
    assert "'leaky_target_mod.compute' patched through registry 't_" in text
    assert "the test's own assertion" in text
    assert "(the fixture restores it at teardown)" in text
    # the leak test_3 already failed for is not reported twice
    assert "ERROR at teardown of test_3" not in text
    assert "ERROR at teardown of test_6_a_failing_test_keeps_its_own_failure" in text


ENTRY_SUITE = """
import os

from spawnkit.testing import run_entry


class Job:
    def __init__(self, n):
        self.n = n


def square(job):
    return job.n * job.n, os.getpid()


def test_entry_in_this_module():
    run = run_entry(square, Job(7), timeout=60)
    assert run.result[0] == 49 and run.result[1] != os.getpid()
"""


@pytest.mark.parametrize(
    "args",
    [
        pytest.param((), id="prepend"),
        pytest.param(("--import-mode=importlib",), id="importlib"),
        pytest.param(("--import-mode=append",), id="append"),
        pytest.param(("-n", "2"), id="xdist"),
    ],
)
def test_run_entry_with_an_entry_defined_in_the_test_module(
    pytester: pytest.Pytester, args: tuple[str, ...]
) -> None:
    pytester.makepyfile(test_entry_suite=ENTRY_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=180)
    result.assert_outcomes(passed=1)


NAMESPACED_SUITE = """
import sys
import types
import uuid

import pytest

from spawnkit.hooks import HookType
from spawnkit.namespace import Namespace

mod = types.ModuleType("ns_target_mod")
exec("def compute(x):\\n    return x + 1\\n", mod.__dict__)
sys.modules["ns_target_mod"] = mod
ORIGINAL = mod.compute
ENGINE = Namespace(f"t_{uuid.uuid4().hex[:8]}")
OTHER = Namespace(f"t_{uuid.uuid4().hex[:8]}")


def plus_100(result, *a, **k):
    return result + 100


def plus_1000(result, *a, **k):
    return result + 1000


# Registered (not applied) before any test: the isolation hides it and gives it back.
ENGINE.hooks.register("ns_target_mod.compute", plus_1000, HookType.AFTER)


def test_1_factory_isolates_the_namespace(isolated_hooks_for):
    hooks = isolated_hooks_for(ENGINE)
    assert hooks is ENGINE.hooks
    assert hooks.registrations() == []  # the module-level registration is set aside
    assert isolated_hooks_for(ENGINE.name) is hooks  # same namespace, same registry
    ENGINE.hooks.register("ns_target_mod.compute", plus_100, HookType.AFTER)
    ENGINE.hooks.apply_hooks()
    assert mod.compute(1) == 102


def test_2_sees_the_original_and_its_registration_again():
    assert mod.compute is ORIGINAL
    assert len(ENGINE.hooks.registrations()) == 1


def test_3_default_and_namespace_together(isolated_hooks, isolated_hooks_for):
    isolated_hooks_for(ENGINE).register("ns_target_mod.compute", plus_100, HookType.AFTER)
    ENGINE.hooks.apply_hooks()
    assert isolated_hooks.registrations() == []
    assert mod.compute(1) == 102


@pytest.mark.parametrize("isolated_hooks", [ENGINE], indirect=True, ids=["engine"])
def test_4_indirect_parametrization(isolated_hooks):
    assert isolated_hooks is ENGINE.hooks
    isolated_hooks.register("ns_target_mod.compute", plus_100, HookType.AFTER)
    isolated_hooks.apply_hooks()
    assert mod.compute(1) == 102


def test_5_original_again():
    assert mod.compute is ORIGINAL


def test_6_a_namespace_not_isolated_still_leaks(isolated_hooks_for):
    isolated_hooks_for(ENGINE)
    OTHER.hooks.register("ns_target_mod.compute", plus_100, HookType.AFTER)
    OTHER.hooks.apply_hooks()


def test_7_the_leak_was_restored():
    assert mod.compute is ORIGINAL
"""


def test_isolated_hooks_for_isolates_a_namespace_registry(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_namespaced=NAMESPACED_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", timeout=120
    )
    result.assert_outcomes(passed=6, failed=1)
    result.stdout.fnmatch_lines(["*test_6_a_namespace_not_isolated_still_leaks FAILED*"])
    text = result.stdout.str()
    assert "isolated_hooks: 1 hook patch(es) leaked by this test" in text
    assert "isolated_hooks_for(namespace)" in text  # the fix names the namespaced fixture
    assert "test_4_indirect_parametrization[engine] PASSED" in text


BOOTSTRAP_HERE_SUITE = """
ENGINE = {"here_eng.ops": "def tok():\\n    return 'tok'\\n"}
PLUGIN = {"here_plug": '''
from spawnkit.hooks import HookRegistry, HookType

def register():
    HookRegistry.register("here_eng.ops.tok", "here_plug:after", HookType.AFTER)

def after(result, *a, **k):
    return result + "+hooked"
'''}


def install(plugin_dist):
    plugin_dist("here-eng", modules=ENGINE)
    plugin_dist(
        "here-plug",
        entry_points={"spawnkit.plugins": {"here_plug": "here_plug:register"}},
        modules=PLUGIN,
    )


def engine_entry():
    import spawnkit

    report = spawnkit.bootstrap_here()  # what an engine's entry module does first
    from here_eng import ops

    return report, ops.tok()


def test_1_hooked(plugin_dist, isolated_hooks):
    install(plugin_dist)
    report, out = engine_entry()
    assert out == "tok+hooked"
    assert [h["state"] for h in report.hooks["here_eng.ops.tok"]] == ["applied"]


def test_2_hooked_again(plugin_dist, isolated_hooks):
    install(plugin_dist)
    report, out = engine_entry()
    assert out == "tok+hooked"  # not the first test's report over unhooked code
    assert [h["state"] for h in report.hooks["here_eng.ops.tok"]] == ["applied"]
"""

SESSION_BOOTSTRAP_SUITE = """
import spawnkit

SESSION_REPORT = spawnkit.bootstrap_here()  # the suite's process, bootstrapped once


def test_1_isolated(isolated_hooks):
    assert spawnkit.bootstrap_here() is SESSION_REPORT


def test_2_after_the_isolated_test():
    assert spawnkit.bootstrap_here() is SESSION_REPORT
"""


def test_bootstrap_here_in_each_isolated_test_applies_the_hooks_again(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_here_twice=BOOTSTRAP_HERE_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", timeout=120
    )
    result.assert_outcomes(passed=2)


def test_a_bootstrap_here_before_the_isolated_test_keeps_its_report(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_session_here=SESSION_BOOTSTRAP_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", timeout=120
    )
    result.assert_outcomes(passed=2)


LEFT_APPLIED_SUITE = """
import sys
import types
import uuid

from spawnkit.hooks import HookRegistry, HookType
from spawnkit.namespace import Namespace

mod = types.ModuleType("left_target_mod")
exec("def compute(x):\\n    return x + 1\\n\\ndef other(x):\\n    return x\\n", mod.__dict__)
sys.modules["left_target_mod"] = mod
ORIGINAL = mod.compute

# The suite's own patch, made as the module is imported (as a conftest.py would): the baseline.
SUITE_NS = Namespace(f"t_{uuid.uuid4().hex[:8]}")
SUITE_NS.hooks.register("left_target_mod.other", lambda result, *a, **k: -result, HookType.AFTER)
SUITE_NS.hooks.apply_hooks()


def plus_100(result, *a, **k):
    return result + 100


def test_1_applies_and_undoes():
    HookRegistry.register("left_target_mod.compute", plus_100, HookType.AFTER)
    HookRegistry.apply_hooks()
    assert mod.compute(1) == 102
    HookRegistry.reset()


def test_2_isolated_after_a_clean_test(isolated_hooks):
    assert mod.compute is ORIGINAL and mod.other(3) == -3


def test_3_leaves_it_applied():
    HookRegistry.register("left_target_mod.compute", plus_100, HookType.AFTER)
    HookRegistry.apply_hooks()  # as bootstrap_here() or apply_plugin_hooks() in a test
    assert mod.compute(1) == 102


def test_4_isolated(isolated_hooks):
    assert isolated_hooks.registrations() == []


def test_5_the_failed_setup_left_nothing_armed():
    from spawnkit.testing._provisions import TriedImports

    assert not any(isinstance(f, TriedImports) for f in sys.meta_path)
"""


def test_a_patch_left_by_a_test_without_the_fixture_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_left=LEFT_APPLIED_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", timeout=120
    )
    result.assert_outcomes(passed=4, errors=1, warnings=1)
    result.stdout.fnmatch_lines(["*ERROR at setup of test_4_isolated*"])
    text = result.stdout.str()
    # at the test that left it: a HookLeakWarning naming the target and the fix
    assert "HookLeakWarning: test_left.py::test_3_leaves_it_applied applied 1 hook patch" in text
    assert "'left_target_mod.compute' patched through registry 'spawnkit'" in text
    assert "request isolated_hooks in this test" in text
    # at the isolated test: the patch, and the test that left it
    assert "an earlier test applied are still applied as this test starts" in text
    assert "left by test_left.py::test_3_leaves_it_applied" in text
    # the suite's own patch (made on import) and the undone one are no one's leak
    assert "left_target_mod.other" not in text
    assert "test_1_applies_and_undoes applied" not in text


def test_a_patch_left_by_a_test_is_an_error_under_w_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_left=LEFT_APPLIED_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v",
        "-W", "error::spawnkit.testing.HookLeakWarning",
        timeout=120,
    )  # fmt: skip
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_3_leaves_it_applied*"])


# The suite's own on_import hooks (armed in a conftest.py, on the default registry and on a
# namespace's), applied only as a test imports their module: the baseline arriving late.
ON_IMPORT_CONFTEST = """
from spawnkit.hooks import HookRegistry, HookType
from spawnkit.namespace import Namespace

SUITE_NS = Namespace("lazy_suite_ns")


def upper(result, *a, **k):
    return [x.upper() for x in result]


HookRegistry.default().register("lazy_mod.tokenize", upper, HookType.AFTER, on_import=True)
HookRegistry.default().apply_hooks(strict=False)
SUITE_NS.hooks.register("lazy_ns_mod.tokenize", upper, HookType.AFTER, on_import=True)
SUITE_NS.hooks.apply_hooks(strict=False)
"""
LAZY_MODULE = "def tokenize(s):\n    return s.split()\n"

ON_IMPORT_BASELINE_SUITE = """
def test_1_imports_the_module():
    import lazy_mod

    assert lazy_mod.tokenize("a b") == ["A", "B"]


def test_2_isolated(isolated_hooks):
    assert isolated_hooks.registrations() == []


def test_3_the_suites_hook_stays():
    import lazy_mod

    assert lazy_mod.tokenize("a b") == ["A", "B"]
"""


def _lazy_suite(pytester: pytest.Pytester, suite: str) -> pytest.RunResult:
    pytester.makeconftest(ON_IMPORT_CONFTEST)
    pytester.makepyfile(lazy_mod=LAZY_MODULE, lazy_ns_mod=LAZY_MODULE, lazy_other=LAZY_MODULE)
    pytester.makepyfile(test_lazy=suite)
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", timeout=120
    )


def test_the_suites_on_import_hook_applied_in_a_test_is_the_baseline(
    pytester: pytest.Pytester,
) -> None:
    result = _lazy_suite(pytester, ON_IMPORT_BASELINE_SUITE)
    # no HookLeakWarning at the test that only imported the module, and no setup error at the
    # isolated test after it: the suite's hook applying late is its baseline
    result.assert_outcomes(passed=3)
    assert "HookLeakWarning" not in result.stdout.str()


ON_IMPORT_NAMESPACE_BASELINE_SUITE = """
from conftest import SUITE_NS
from spawnkit.hooks import HookType


def test_1_leaks_through_the_namespace(isolated_hooks):
    SUITE_NS.hooks.register("lazy_other.tokenize", lambda r, *a, **k: r + ["!"], HookType.AFTER)
    SUITE_NS.hooks.apply_hooks()  # a real leak, through a registry with a hook armed before


def test_2_isolated_imports_the_namespaces_module(isolated_hooks):
    import lazy_ns_mod

    assert lazy_ns_mod.tokenize("a b") == ["A", "B"]


def test_3_the_namespaces_hook_stays():
    import lazy_ns_mod

    assert lazy_ns_mod.tokenize("a b") == ["A", "B"]
"""


def test_the_suites_on_import_hook_applied_in_an_isolated_test_is_no_leak(
    pytester: pytest.Pytester,
) -> None:
    result = _lazy_suite(pytester, ON_IMPORT_NAMESPACE_BASELINE_SUITE)
    # the namespace registry is not isolated: the leak through it is named, not undone by
    # unapplying the registry (that would disarm the suite's hook); the suite's hook applying
    # as an isolated test imports the module is no leak of that test, and it stays
    result.assert_outcomes(passed=2, failed=1)
    text = result.stdout.str()
    assert "'lazy_other.tokenize' patched through registry 'lazy_suite_ns'" in text
    assert "NOT restored" in text
    assert "lazy_ns_mod.tokenize" not in text


ON_IMPORT_IMPORTED_IN_ISOLATION_SUITE = """
import pytest
from conftest import SUITE_NS
from spawnkit.hooks import HookRegistry


def test_1_isolated_imports_the_module_first(isolated_hooks):
    import lazy_mod

    assert lazy_mod.tokenize("a b") == ["a", "b"]  # the test's registry is empty


def test_2_the_suites_hook_applies_after_it():
    import lazy_mod

    assert lazy_mod.tokenize("a b") == ["A", "B"]
    assert [s.state for s in HookRegistry.default().status()] == ["applied"]


@pytest.mark.parametrize("isolated_hooks", [SUITE_NS], indirect=True)
def test_3_isolated_namespace_imports_its_module_first(isolated_hooks):
    import lazy_ns_mod

    assert lazy_ns_mod.tokenize("a b") == ["a", "b"]


def test_4_the_namespaces_hook_applies_after_it():
    import lazy_ns_mod

    assert lazy_ns_mod.tokenize("a b") == ["A", "B"]
    assert [s.state for s in SUITE_NS.hooks.status()] == ["applied"]
"""


def test_the_suites_on_import_hook_applies_after_an_isolated_test_imported_its_module(
    pytester: pytest.Pytester,
) -> None:
    result = _lazy_suite(pytester, ON_IMPORT_IMPORTED_IN_ISOLATION_SUITE)
    # the isolated test's import went to its empty registry; at its teardown the suite's armed
    # hook (default registry, and a namespace's isolated by indirect parametrization) applies
    # to the module, as it would have had the import happened outside the test; no leak
    result.assert_outcomes(passed=4)
    assert "HookLeakWarning" not in result.stdout.str()


ON_IMPORT_LEFT_SUITE = """
from spawnkit.hooks import HookRegistry, HookType


def exclaim(result, *a, **k):
    return [x + "!" for x in result]


def test_1_adds_its_own_hook_to_the_suites_target():
    HookRegistry.register("lazy_mod.tokenize", exclaim, HookType.AFTER)
    import lazy_mod  # applies the suite's hook and this test's

    assert lazy_mod.tokenize("a") == ["A!"]


def test_2_isolated(isolated_hooks):
    pass


def test_3_arms_an_on_import_hook():
    HookRegistry.register("lazy_other.tokenize", exclaim, HookType.AFTER, on_import=True)
    HookRegistry.apply_hooks()  # waits for lazy_other: nothing is patched yet


def test_4_imports_the_module():
    import lazy_other

    assert lazy_other.tokenize("a") == ["a!"]


def test_5_isolated(isolated_hooks):
    pass
"""


def test_on_import_hooks_a_test_registered_are_still_its_leak(pytester: pytest.Pytester) -> None:
    result = _lazy_suite(pytester, ON_IMPORT_LEFT_SUITE)
    result.assert_outcomes(passed=3, errors=2, warnings=2)
    result.stdout.fnmatch_lines(
        ["*ERROR at setup of test_2_isolated*", "*ERROR at setup of test_5_isolated*"]
    )
    text = result.stdout.str()
    # a hook the test added to the suite's armed target: the target is the test's leak
    assert "test_lazy.py::test_1_adds_its_own_hook_to_the_suites_target applied 1 hook" in text
    assert "left by test_lazy.py::test_1_adds_its_own_hook_to_the_suites_target" in text
    # an on_import hook the test armed: warned at that test, and blamed on it (not on the test
    # that imported the module) when it applied later
    assert "test_lazy.py::test_3_arms_an_on_import_hook armed 1 on_import hook" in text
    assert "'lazy_other.tokenize' registered with on_import=True" in text
    assert "left by test_lazy.py::test_3_arms_an_on_import_hook (registered there" in text
    assert "test_4_imports_the_module applied" not in text


ON_IMPORT_APPLIED_IN_BODY_SUITE = """
import sys
import types

from spawnkit.hooks import HookRegistry, HookType

mod = types.ModuleType("registered_mod")
exec("def compute(x):\\n    return x + 1\\n", mod.__dict__)
sys.modules["registered_mod"] = mod


def plus_100(result, *a, **k):
    return result + 100


# registered outside any test body, never applied: applying it is the test's doing
HookRegistry.register("registered_mod.compute", plus_100, HookType.AFTER)


def test_1_applies_what_the_module_registered():
    HookRegistry.apply_hooks()
    assert mod.compute(1) == 102


def test_2_isolated(isolated_hooks):
    pass
"""


def test_applying_registrations_made_before_the_test_is_its_leak(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_applied_in_body=ON_IMPORT_APPLIED_IN_BODY_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", timeout=120
    )
    result.assert_outcomes(passed=1, errors=1, warnings=1)
    text = result.stdout.str()
    assert "test_1_applies_what_the_module_registered applied 1 hook patch" in text
    assert "left by test_applied_in_body.py::test_1_applies_what_the_module_registered" in text


WORKER_WARNING_SUITE = """
import pytest

from spawnkit.errors import ConfigError, ForkServerError, StageError
from spawnkit.testing import run_entry

ENGINE = {"warn_eng": "def step():\\n    return 1\\n"}
PLUGIN = '''
from spawnkit.hooks import HookRegistry, HookType

def register():
    HookRegistry.register("warn_eng.step", "{m}:around", HookType.AROUND)

def around(original_fn, *a, **k):
    return original_fn(*a, **k) + 1
'''


def step():
    import warn_eng

    return warn_eng.step()


@pytest.fixture
def two_around_hooks(plugin_dist):
    # two AROUND hooks on one target: a HookConflictWarning in the worker
    plugin_dist("warn-eng", modules=ENGINE)
    for m in ("warn_a", "warn_b"):
        plugin_dist(
            m.replace("_", "-"),
            entry_points={"spawnkit.plugins": {m: f"{m}:register"}},
            modules={m: PLUGIN.format(m=m)},
        )


@pytest.mark.filterwarnings("error::spawnkit.HookConflictWarning")
def test_escalated_in_the_worker(two_around_hooks, launch_mode):
    # a warm-start server applies the hooks for its workers: it stops, as under a launcher
    stopped = (StageError, ForkServerError)
    with pytest.raises(stopped, match="escalated to an error by the warnings filter"):
        run_entry(step, **launch_mode.kwargs())


@pytest.mark.filterwarnings("ignore::spawnkit.HookConflictWarning")
def test_silenced_in_the_worker(two_around_hooks, capfd):
    assert run_entry(step).result == 3
    assert "HookConflictWarning" not in capfd.readouterr().err


def test_unfiltered_it_is_a_warning(two_around_hooks, capfd):
    assert run_entry(step).result == 3
    assert "HookConflictWarning" in capfd.readouterr().err


@pytest.mark.filterwarnings("error:target .* has 2:spawnkit.HookConflictWarning")
def test_a_filter_the_worker_cannot_take_is_refused(two_around_hooks):
    with pytest.raises(ConfigError, match="cannot reach the worker"):
        run_entry(step)
"""


def test_run_entry_gives_the_worker_the_tests_warning_filters(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_worker_warning=WORKER_WARNING_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", timeout=300)
    result.assert_outcomes(passed=6)


def test_run_entry_gives_the_worker_the_command_lines_w(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_worker_warning=WORKER_WARNING_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", "-W", "error::spawnkit.HookConflictWarning",
        "-k", "unfiltered", timeout=120,
    )  # fmt: skip
    # the test expected a warning; under -W error the worker stops, as a production launch does
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*escalated to an error by the warnings filter*"])


PROVIDE_SUITE = """
import types

ENGINE = {
    "prov_eng": "",
    "prov_eng.quant": '''
try:
    import prov_fastkern.gemm
    HAS_FAST = True
except ImportError:
    HAS_FAST = False
''',
    "prov_real": "",
}


def stub(name):
    return types.ModuleType(name)


def test_1_engine_imported_before_the_apply(plugin_dist, isolated_hooks):
    plugin_dist("prov-eng", modules=ENGINE)
    import prov_eng.quant  # takes its ImportError fallback

    isolated_hooks.provide_module("prov_fastkern.gemm", factory=stub)
    isolated_hooks.apply_hooks()
    assert prov_eng.quant.HAS_FAST is False  # the fallback stays while status says provided


def test_2_engine_imported_after_the_apply(plugin_dist, isolated_hooks):
    plugin_dist("prov-eng", modules=ENGINE)
    isolated_hooks.provide_module("prov_fastkern.gemm", factory=stub)
    isolated_hooks.apply_hooks()
    import prov_eng.quant

    assert prov_eng.quant.HAS_FAST is True


def test_3_guard_policy_warn(plugin_dist, isolated_hooks, monkeypatch):
    monkeypatch.setenv("SPAWNKIT_IMPORT_GUARD", "warn")
    test_1_engine_imported_before_the_apply(plugin_dist, isolated_hooks)


def test_4_an_installed_parent_imported_before_is_no_miss(plugin_dist, isolated_hooks):
    plugin_dist("prov-eng", modules=ENGINE)
    import prov_real  # the package is installed; only the submodule is provided

    isolated_hooks.provide_module("prov_real.fast", factory=stub)
    isolated_hooks.apply_hooks()
    assert prov_real.fast.__name__ == "prov_real.fast"
"""


def test_isolated_hooks_names_a_provided_module_the_test_had_missed(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_provide=PROVIDE_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", timeout=120
    )
    result.assert_outcomes(passed=3, failed=1, warnings=1)
    result.stdout.fnmatch_lines(["*test_1_engine_imported_before_the_apply FAILED*"])
    text = result.stdout.str()
    assert "'prov_fastkern.gemm' (registry 'spawnkit'): tried at " in text
    assert "prov_eng/quant.py:3 (in <module>)" in text
    assert "ImportGuardWarning: isolated_hooks: provide_module() placed 1 module(s)" in text
    assert "SPAWNKIT_IMPORT_GUARD=warn" in text


FIXTURE_LEFT_SUITE = """
import textwrap
import uuid

import pytest
from spawnkit.hooks import HookRegistry, HookType
from spawnkit.namespace import Namespace


def shout(result, *a, **k):
    return result.upper()


def exclaim(result, *a, **k):
    return result + "!"


SUITE_NS = Namespace(f"t_{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def suite_patch():  # the module's: outlives each test by design, undone at the module's end
    SUITE_NS.hooks.register("textwrap.dedent", exclaim, HookType.AFTER)
    SUITE_NS.hooks.apply_hooks()
    yield
    SUITE_NS.hooks.reset()


@pytest.fixture
def tidy():  # function scope, undoes what it applied
    HookRegistry.register("textwrap.indent", exclaim, HookType.AFTER)
    HookRegistry.apply_hooks()
    yield
    HookRegistry.reset()


@pytest.fixture
def shouting():  # function scope: belongs to the test; forgot to undo
    HookRegistry.register("textwrap.shorten", shout, HookType.AFTER)
    HookRegistry.apply_hooks()
    yield


def test_1_module_fixture(suite_patch, tidy):
    assert textwrap.dedent("a") == "a!" and textwrap.indent("a", " ") == " a!"


def test_2_isolated_beside_the_module_fixture(suite_patch, isolated_hooks):
    assert textwrap.dedent("a") == "a!"


def test_3_leaky_fixture(shouting):
    assert textwrap.shorten("hello world", 50) == "HELLO WORLD"


def test_4_isolated(isolated_hooks):
    assert textwrap.shorten("hello world", 50) == "hello world"
"""


def test_a_patch_left_by_a_function_scoped_fixture_is_the_tests(pytester: pytest.Pytester) -> None:
    """The fixture runs before the test body: its patch was taken for the baseline, no
    warning, and the isolated test after it ran hooked code unexplained."""
    pytester.makepyfile(test_fixture_left=FIXTURE_LEFT_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", timeout=120
    )
    result.assert_outcomes(passed=3, errors=1, warnings=1)
    result.stdout.fnmatch_lines(["*ERROR at setup of test_4_isolated*"])
    text = result.stdout.str()
    assert "test_3_leaky_fixture applied 1 hook patch" in text
    assert "'textwrap.shorten' patched through registry 'spawnkit'" in text
    assert "left by test_fixture_left.py::test_3_leaky_fixture" in text
    # the module-scoped fixture's patch is the suite's; the tidy fixture's was undone
    assert "textwrap.dedent" not in text and "textwrap.indent" not in text


UNDONE_BOOTSTRAP_SUITE = """
import spawnkit
from spawnkit.hooks import HookRegistry

ENGINE = {"undone_eng.ops": "def tok(x):\\n    return ['tok', x]\\n"}


def plugin(name, tag):
    return {name: f'''
from spawnkit.hooks import HookRegistry, HookType
def register():
    HookRegistry.register("undone_eng.ops.tok", "{name}:hook", HookType.AFTER)
def hook(result, *a, **k):
    return result + [{tag!r}]
'''}


def install(plugin_dist, name, tag):
    plugin_dist("undone-eng", modules=ENGINE)
    eps = {"spawnkit.plugins": {tag: f"{name}:register"}}
    plugin_dist(name.replace("_", "-"), entry_points=eps, modules=plugin(name, tag))


def test_1_bootstraps_and_undoes_it(plugin_dist):
    install(plugin_dist, "undone_a", "a")
    report = spawnkit.bootstrap_here()
    import undone_eng.ops

    assert undone_eng.ops.tok("x") == ["tok", "x", "a"]
    assert [p["name"] for p in report.plugins] == ["a"]
    HookRegistry.reset()  # the warning's fix: nothing of the test's stays


def test_2_bootstraps_its_own_plugin(plugin_dist):
    install(plugin_dist, "undone_b", "b")
    report = spawnkit.bootstrap_here()  # not the first test's report over unhooked code
    import undone_eng.ops

    assert [p["name"] for p in report.plugins] == ["b"]
    assert undone_eng.ops.tok("x") == ["tok", "x", "b"]
    HookRegistry.unapply()  # patches undone; the registration stays (the warning's case)
    HookRegistry.reset()


def test_3_isolated(plugin_dist, isolated_hooks):
    install(plugin_dist, "undone_c", "c")
    report = spawnkit.bootstrap_here()
    import undone_eng.ops

    assert [p["name"] for p in report.plugins] == ["c"]
    assert undone_eng.ops.tok("x") == ["tok", "x", "c"]
"""


def test_a_bootstrap_here_a_test_undid_is_forgotten(pytester: pytest.Pytester) -> None:
    """Its record made a later test's ``bootstrap_here()`` return its report (its plugins,
    its hooks "applied") over unhooked code, loading nothing of the later test's."""
    pytester.makepyfile(test_undone=UNDONE_BOOTSTRAP_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", timeout=120
    )
    result.assert_outcomes(passed=3)
    assert "HookLeakWarning" not in result.stdout.str()


PROVIDED_LEFT_SUITE = """
import sys
import types

import pytest
from spawnkit import Namespace
from spawnkit.hooks import HookRegistry

OTHER = Namespace("provided_other_ns", env_prefix="PROVIDED_OTHER_NS")


def stub(name):
    module = types.ModuleType(name)
    module.FAST = True
    return module


@pytest.fixture(scope="module")
def suite_stub():  # the module's: outlives each test by design, undone at the module's end
    OTHER.hooks.provide_module("suite_kern.gemm", factory=stub)
    OTHER.hooks.apply_hooks()
    yield
    OTHER.hooks.reset()


def test_1_provides_through_another_namespace(isolated_hooks):
    OTHER.hooks.provide_module("other_kern.gemm", factory=stub)
    OTHER.hooks.apply_hooks()
    assert "other_kern.gemm" in sys.modules


def test_2_taken_back_by_the_fixture():
    with pytest.raises(ImportError):
        import other_kern.gemm  # noqa: F401


def test_3_provides_through_the_isolated_registry(isolated_hooks):
    isolated_hooks.provide_module("own_kern.gemm", factory=stub)
    isolated_hooks.apply_hooks()
    import own_kern.gemm  # noqa: F401


def test_4_provides_and_resets():
    HookRegistry.provide_module("tidy_kern.gemm", factory=stub)
    HookRegistry.apply_hooks()
    import tidy_kern.gemm  # noqa: F401

    HookRegistry.reset()


def test_5_module_fixture(suite_stub):
    import suite_kern.gemm  # noqa: F401


def test_6_provides_and_leaves_it():
    HookRegistry.provide_module("fast_kern.gemm", factory=stub)
    HookRegistry.apply_hooks()  # as bootstrap_here() would, of a plugin that provides it
    import fast_kern.gemm

    assert fast_kern.gemm.FAST


def test_7_isolated(isolated_hooks):
    pass
"""


def test_a_module_provided_and_left_by_a_test_is_a_leak(pytester: pytest.Pytester) -> None:
    """``provide_module()`` then an apply, never undone: the stub stayed importable in every
    later test (an engine's ``try: import ... except ImportError`` took the wrong branch),
    no ``HookLeakWarning``, and an isolated test through another registry leaked it too."""
    pytester.makepyfile(test_provided=PROVIDED_LEFT_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", timeout=120
    )
    result.assert_outcomes(passed=5, failed=1, errors=1, warnings=1)
    result.stdout.fnmatch_lines(
        ["*ERROR at setup of test_7_isolated*", "FAILED *::test_1_provides_through_another*"]
    )
    text = result.stdout.str()
    # at the test that left it: the module, the registry and the fix
    assert "test_6_provides_and_leaves_it provided 1 module(s) with provide_module()" in text
    assert "module 'fast_kern.gemm' placed in sys.modules by provide_module()" in text
    assert "left by test_provided.py::test_6_provides_and_leaves_it" in text
    # through a registry the test did not isolate: named, and taken back by the fixture
    assert "'other_kern.gemm' patched through registry 'provided_other_ns'" in text
    assert "(the fixture restores it at teardown)" in text
    # the module fixture's stub, the undone one and the isolated registry's are no one's leak
    for quiet in ("suite_kern", "tidy_kern", "own_kern"):
        assert quiet not in text, quiet


REGISTERED_LEFT_SUITE = """
import textwrap
import types

import pytest
from spawnkit import Namespace
from spawnkit.hooks import HookRegistry, HookType

PLUGIN = '''
from spawnkit.hooks import HookType, plugin_hook

@plugin_hook("textwrap.shorten", type=HookType.AFTER)
def shout(result, *a, **k):
    return result.upper()
'''

SUITE_NS = Namespace("registered_suite_ns", env_prefix="REGISTERED_SUITE_NS")
ENGINE_NS = Namespace("registered_engine_ns", env_prefix="REGISTERED_ENGINE_NS")


def exclaim(result, *a, **k):
    return result + "!"


# the suite's own registration, made as the module is imported: the baseline
SUITE_NS.hooks.register("textwrap.indent", exclaim, HookType.AFTER)


@pytest.fixture(scope="module")
def suite_hook():  # the module's: outlives each test by design
    SUITE_NS.hooks.register("textwrap.fill", exclaim, HookType.AFTER)
    yield


def test_1_applies_and_resets():
    HookRegistry.register("textwrap.dedent", exclaim, HookType.AFTER)
    HookRegistry.provide_module("tidy_kern.gemm", module=types.ModuleType("tidy_kern.gemm"))
    HookRegistry.apply_hooks()
    HookRegistry.reset()


def test_2_imports_a_plugin_module(plugin_dist):
    plugin_dist("registered-plug", modules={"registered_plug": PLUGIN})
    import registered_plug  # noqa: F401  (its decorator registers on the default registry)


def test_3_module_fixture(suite_hook):
    pass


def test_4_a_namespace_of_its_own(spawnkit_namespace):
    spawnkit_namespace.hooks.register("textwrap.wrap", exclaim, HookType.AFTER)


def test_5_isolated(isolated_hooks):
    isolated_hooks.register("textwrap.wrap", exclaim, HookType.AFTER)


def test_6_unapplies_only():
    HookRegistry.register("textwrap.dedent", exclaim, HookType.AFTER)
    HookRegistry.apply_hooks()
    assert textwrap.dedent("a") == "a!"
    HookRegistry.unapply()  # the patch is undone; the registration stays


def test_7_registers_on_an_engines_namespace():
    ENGINE_NS.hooks.register("textwrap.wrap", exclaim, HookType.AFTER)  # its registry: made here
    ENGINE_NS.hooks.provide_module("left_kern.gemm", module=types.ModuleType("left_kern.gemm"))


def test_8_applies_the_default_registry():
    HookRegistry.apply_hooks()
    try:
        shortened = textwrap.shorten("hello world", 50)
    finally:
        HookRegistry.reset()
    assert shortened == "HELLO WORLD", shortened  # test_2's hook: what the warning named
"""


def test_registrations_a_test_left_unapplied_are_a_leak(pytester: pytest.Pytester) -> None:
    """A test that imported a plugin module whose decorators register on the default registry
    (or unapplied what it applied): the registrations stayed, nothing said, and a later test
    that applied that registry ran them, their module purged since."""
    pytester.makepyfile(test_registered=REGISTERED_LEFT_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", timeout=120
    )
    result.assert_outcomes(passed=8, warnings=3)
    text = result.stdout.str()
    assert (
        "test_2_imports_a_plugin_module registered 1 target(s)' hook(s) or module(s) and left "
        "them registered, not applied" in text
    )
    assert (
        "'textwrap.shorten' through registry 'spawnkit': AFTER hook registered_plug.shout" in text
    )
    assert "applies them beside its own (a hook of a module purged since too)" in text
    assert "call reset() on that registry before the test ends" in text
    # unapply() keeps the registration: the warning's case too
    assert "test_6_unapplies_only registered 1 target(s)'" in text
    assert "'textwrap.dedent' through registry 'spawnkit': AFTER hook" in text
    # a namespace declared before the test, its registry made in it: a hook and a module
    assert "test_7_registers_on_an_engines_namespace registered 2 target(s)'" in text
    assert "'left_kern.gemm' through registry 'registered_engine_ns': provide_module(" in text
    # the suite's registrations, a tidy test's, a namespace of the test's own and an isolated
    # test's are no one's leak
    for quiet in ("textwrap.indent", "textwrap.fill", "tidy_kern", "through registry 't_"):
        assert quiet not in text, quiet
    for test in ("test_1_applies_and_resets", "test_3_module_fixture", "test_4_a_namespace"):
        assert f"{test}_of_its_own registered" not in text and f"{test} registered" not in text
    assert "test_5_isolated registered" not in text


OUTSIDE_REGISTERED_SUITE = """
import textwrap

from spawnkit import Namespace
from spawnkit.hooks import HookRegistry, HookType

ENGINE_A = Namespace("outside_reg_a", env_prefix="OUTSIDE_REG_A")
ENGINE_B = Namespace("outside_reg_b", env_prefix="OUTSIDE_REG_B")

ON_B = '''
from spawnkit import Namespace
from spawnkit.hooks import HookType

ENGINE_B = Namespace("outside_reg_b", env_prefix="OUTSIDE_REG_B")

@ENGINE_B.plugin_hook("textwrap.shorten", type=HookType.AFTER)
def shout(result, *a, **k):
    return result.upper()
'''

ON_DEFAULT = '''
from spawnkit.hooks import HookType, plugin_hook

@plugin_hook("textwrap.indent", type=HookType.AFTER)
def shout(result, *a, **k):
    return result.upper()
'''


def exclaim(result, *a, **k):
    return result + "!"


# the suite's own registration on B, made as the module is imported: never a test's leak
ENGINE_B.hooks.register("textwrap.dedent", exclaim, HookType.AFTER)


def test_1_isolates_the_default_its_plugin_registers_on_b(plugin_dist, isolated_hooks):
    plugin_dist("outside-b", modules={"outside_b": ON_B})
    import outside_b  # noqa: F401  (its decorator registers on ENGINE_B's registry)


def test_2_isolates_a_its_plugin_registers_on_the_default(plugin_dist, isolated_hooks_for):
    isolated_hooks_for(ENGINE_A)
    plugin_dist("outside-default", modules={"outside_default": ON_DEFAULT})
    import outside_default  # noqa: F401  (its decorator registers on the default registry)


def test_3_registers_on_the_isolated_registry(plugin_dist, isolated_hooks_for):
    isolated_hooks_for(ENGINE_B)
    plugin_dist("outside-b2", modules={"outside_b2": ON_B})
    import outside_b2  # noqa: F401


def test_4_registers_on_the_isolated_default(isolated_hooks):
    isolated_hooks.register("textwrap.wrap", exclaim, HookType.AFTER)
    HookRegistry.register("textwrap.fill", exclaim, HookType.AFTER)  # the same, isolated


def test_5_applies_b():
    assert [r.target for r in ENGINE_B.hooks.registrations()] == ["textwrap.dedent"]
    ENGINE_B.hooks.apply_hooks()
    try:
        shortened = textwrap.shorten("hello world", 50)
        dedented = textwrap.dedent("a")
    finally:
        ENGINE_B.hooks.unapply()
    assert (shortened, dedented) == ("hello world", "a!")


def test_6_applies_the_default():
    HookRegistry.apply_hooks()
    try:
        indented = textwrap.indent("hello", "  ")
    finally:
        HookRegistry.reset()
    assert indented == "  hello", indented
"""


def test_isolated_hooks_fails_a_registration_left_on_a_registry_it_did_not_isolate(
    pytester: pytest.Pytester,
) -> None:
    """An isolated test whose plugin registered on a namespace (or the default registry) it did
    not isolate passed, and a later test that applied that registry ran the plugin's hook: the
    later test's result depended on the order.  Now the leaking test fails naming it, and the
    fixture removes it; the isolated registry's and the suite's registrations are no leak."""
    pytester.makepyfile(test_outside_registered=OUTSIDE_REGISTERED_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", timeout=120
    )
    result.assert_outcomes(passed=4, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_1_isolates_the_default_its_plugin_registers_on_b FAILED*",
            "*test_2_isolates_a_its_plugin_registers_on_the_default FAILED*",
            "*test_5_applies_b PASSED*",
            "*test_6_applies_the_default PASSED*",
        ]
    )
    text = result.stdout.str()
    assert (
        "'textwrap.shorten' registered through registry 'outside_reg_b' (AFTER hook "
        "outside_b.shout" in text
    )
    assert "'textwrap.indent' registered through registry 'spawnkit' (AFTER hook" in text
    assert "left registered (not applied) on a registry this test did not isolate" in text
    assert "(the fixture removes them at teardown)" in text
    assert "A registration left: reset() that registry before the test ends" in text
    for quiet in ("outside_b2", "textwrap.wrap", "textwrap.fill"):
        assert quiet not in text, quiet
    assert "'textwrap.dedent' registered" not in text


DECLARED_IN_TEST_SUITE = """
import textwrap

from spawnkit import Namespace
from spawnkit.hooks import HookType


def exclaim(result, *a, **k):
    return result + "!"


def test_1_declares_and_registers():
    engine = Namespace("declared_here", env_prefix="DECLARED_HERE")
    engine.hooks.register("textwrap.shorten", exclaim, HookType.AFTER)


def test_2_a_namespace_of_its_own(spawnkit_namespace):
    spawnkit_namespace.hooks.register("textwrap.shorten", exclaim, HookType.AFTER)


def test_3_declares_registers_and_resets():
    engine = Namespace("declared_tidy", env_prefix="DECLARED_TIDY")
    engine.hooks.register("textwrap.shorten", exclaim, HookType.AFTER)
    engine.hooks.reset()


def test_4_isolated_declares_another(isolated_hooks):
    engine = Namespace("declared_isolated", env_prefix="DECLARED_ISOLATED")
    engine.hooks.register("textwrap.shorten", exclaim, HookType.AFTER)


def test_5_declares_it_again_and_applies():
    engine = Namespace("declared_isolated", env_prefix="DECLARED_ISOLATED")
    engine.hooks.apply_hooks()
    try:
        shortened = textwrap.shorten("hello world", 50)
    finally:
        engine.hooks.reset()
    assert shortened == "hello world", shortened
"""


def test_registrations_on_a_namespace_first_declared_in_the_test_are_named(
    pytester: pytest.Pytester,
) -> None:
    """``Namespace("declared_here")`` in a test body stays declared: the next test declaring
    that name got the same object, the first test's registrations included, nothing said (the
    check skipped every namespace first declared in the test).  Now named, except the fresh
    names ``spawnkit_namespace`` makes."""
    pytester.makepyfile(test_declared=DECLARED_IN_TEST_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", timeout=120
    )
    result.assert_outcomes(passed=4, failed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*test_4_isolated_declares_another FAILED*",
            "*test_5_declares_it_again_and_applies PASSED*",
        ]
    )
    text = result.stdout.str()
    assert "test_1_declares_and_registers registered 1 target(s)'" in text
    assert "'textwrap.shorten' through registry 'declared_here': AFTER hook" in text
    assert "Namespace 'declared_here' was first declared in this test and stays declared" in text
    assert "request the spawnkit_namespace fixture (a fresh name)" in text
    assert "Namespace 'declared_isolated' was first declared in this test" in text
    for quiet in ("through registry 't_", "'declared_tidy'", "test_2_a_namespace_of_its_own reg"):
        assert quiet not in text, quiet


UNAPPLIED_BOOTSTRAP_SUITE = (
    UNDONE_BOOTSTRAP_SUITE.split("def test_1_")[0]
    + """
def test_1_bootstraps_and_unapplies(plugin_dist):
    install(plugin_dist, "unapplied_a", "a")
    spawnkit.bootstrap_here()
    import undone_eng.ops

    assert undone_eng.ops.tok("x") == ["tok", "x", "a"]
    HookRegistry.unapply()  # patches undone; plugin a's registration stays


def test_2_bootstraps_its_own_plugin(plugin_dist):
    install(plugin_dist, "unapplied_b", "b")
    report = spawnkit.bootstrap_here()  # applies b's hook, and a's left registration
    import undone_eng.ops

    assert [p["name"] for p in report.plugins] == ["b"]
    assert "b" in undone_eng.ops.tok("x")
    HookRegistry.reset()
"""
)


def test_a_registration_a_bootstrap_here_left_is_named_and_not_called_stray(
    pytester: pytest.Pytester,
) -> None:
    """A test's ``bootstrap_here()`` undone by ``unapply()`` left its plugin's registration: a
    later test's ``bootstrap_here()`` applied it (nothing said at the first test), and warned
    that it was "never applied here" and "never runs", false (an error under -W error)."""
    pytester.makepyfile(test_unapplied=UNAPPLIED_BOOTSTRAP_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v",
        "-W", "error::spawnkit.PluginSelectionWarning",
        timeout=120,
    )  # fmt: skip
    result.assert_outcomes(passed=2, warnings=1)
    text = result.stdout.str()
    assert "test_1_bootstraps_and_unapplies registered 1 target(s)'" in text
    assert "'undone_eng.ops.tok' through registry 'spawnkit': AFTER hook unapplied_a:hook" in text
    assert "PluginSelectionWarning" not in text
