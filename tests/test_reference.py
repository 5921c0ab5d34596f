"""One grammar for every ``"module:qualname"`` string: entries, hooks, lazy proxies, namespaces."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from spawnkit import _reference
from spawnkit.cli import main
from spawnkit.errors import ConfigError, HookRegistrationError
from spawnkit.hooks import _resolve
from spawnkit.launch.specs import build_spec


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("pkg.mod", "no ':'"),
        (":Name", "module part"),
        ("pkg mod:Name", "module part"),
        ("pkg.mod:", "after ':'"),
        ("pkg.mod:a..b", "after ':'"),
        ("pkg.mod:a:b", "after ':'"),
        ("pkg.mod:f.<locals>.g", "inside another function"),
        (3, "expected a string, got int"),
    ],
)
def test_parse_says_which_part_is_wrong(text: object, why: str) -> None:
    with pytest.raises(_reference.BadReference) as info:
        _reference.parse(text)
    assert why in info.value.why and why in str(info.value)


def test_parse_and_resolve_round_trip_through_reference_to() -> None:
    ref = _reference.reference_to(_reference.BadReference)
    assert ref == "spawnkit._reference:BadReference"
    assert _reference.resolve(*_reference.parse(ref)) is _reference.BadReference
    assert _reference.parse(" os.path ", module_only=True) == ("os.path", "")


def test_resolve_tells_a_failed_import_from_a_missing_attribute() -> None:
    with pytest.raises(_reference.ImportFailed) as failed:
        _reference.resolve("no_such_module_for_reference_tests", "f")
    assert isinstance(failed.value.cause, ModuleNotFoundError)
    with pytest.raises(_reference.MissingAttribute, match=r"os\.path has no attribute 'nope'"):
        _reference.resolve("os", "path.nope")


def _cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return code, err.getvalue()


def test_namespace_module_attr_names_the_missing_attribute() -> None:
    code, err = _cli("doctor", "--namespace", "os:no_such_namespace_attr")
    assert code == 2, err
    assert "os has no attribute 'no_such_namespace_attr'" in err, err
    assert "Traceback" not in err


def test_namespace_module_that_raises_on_import_is_one_usage_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"ref_broken_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text("raise RuntimeError('broken on purpose')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, err = _cli("doctor", "--namespace", f"{name}:NS")
    assert code == 2, err
    assert f"cannot import module {name!r}" in err and "broken on purpose" in err, err
    assert "Traceback" not in err


def test_launch_refuses_a_nested_function_reference_before_any_worker() -> None:
    with pytest.raises(ConfigError, match="inside another function") as info:
        build_spec("os:f.<locals>.g")
    assert info.value.setting == "entry"


def test_a_string_hook_is_checked_and_imported_with_the_same_grammar() -> None:
    with pytest.raises(HookRegistrationError, match="no ':'"):
        _resolve.check_hook_spec("os.path.join")
    with pytest.raises(HookRegistrationError, match=r"os\.path has no attribute 'nope'"):
        _resolve.import_hook("os:path.nope")
    assert _resolve.import_hook("os.path:join") is __import__("os").path.join


_NAMES = [
    "os.path:join",
    "os.path:",
    "os:path.join",
    "os.path.join",  # dotted: pkgutil's own walk
    "collections.abc:Mapping.register",
    "spawnkit.platforms.builtin:CpuPlatform",
    "os:no_such_attr",
    "os.path:join.no_such",
    "no_such_module_xyz:f",
    "no_such_module_xyz.f",
    "pkg mod:f",
    "os:a b",
    "os::path",
    ":path",
    "1os:path",
]


@pytest.mark.parametrize("name", _NAMES)
def test_resolve_name_returns_and_raises_what_pkgutil_does(name: str) -> None:
    """The platform tables resolve class names without importing pkgutil: same answers."""
    import pkgutil

    def outcome(resolve: Callable[[str], object]) -> object:
        try:
            return ("ok", resolve(name))
        except Exception as exc:
            return ("raised", type(exc))

    assert outcome(_reference.resolve_name) == outcome(pkgutil.resolve_name)


def test_a_cold_process_resolving_the_built_in_platforms_imports_no_pkgutil() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from spawnkit.namespace import Namespace\n"
        "from spawnkit.platforms.builtin import BUILTINS\n"
        "ns = Namespace('nopkgutil', env_prefix='NOPKGUTIL')\n"
        "ns.platforms.set_selection('cpu')\n"
        "assert type(ns.platforms.current()).__name__ == 'CpuPlatform'\n"
        "print('pkgutil' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "False", out.stderr
