"""Every field an error carries is declared on its class, with a default, and survives pickling.

Errors cross process boundaries (a child's failure is re-raised in the parent),
so a field that exists only on the instances one code path decorated breaks the
caller that reads it from another path, or after a round trip.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from spawnkit import errors

# (class, field values to set, each field's default)
_DECLARED: list[tuple[type[errors.SpawnkitError], dict[str, Any], dict[str, Any]]] = [
    (errors.BootstrapOrderError, {"expected": "apply_hooks"}, {"expected": ""}),
    (
        errors.LazyProxyError,
        {"reference": "eng.sched:Scheduler", "filename": "/x/plugin.py", "lineno": 7},
        {"reference": "", "filename": "", "lineno": 0},
    ),
    (errors.ChildError, {}, {"unreaped_pids": []}),
    (errors.ChildRaisedError, {}, {"unreaped_pids": []}),
    (errors.ChildExitedError, {"fault_text": "Fatal Python error"}, {"fault_text": ""}),
    (errors.NodeLostError, {"fault_text": "x", "node": "n1"}, {"fault_text": "", "node": ""}),
    (
        errors.BootstrapTimeoutError,
        {"stacks": {0: "File 'w.py', line 3"}, "not_ready": {0: "load_plugins"}},
        {"stacks": {}, "not_ready": {}, "unreaped_pids": []},
    ),
    (errors.StageError, {}, {"cause": None, "cause_type": ""}),
    (errors.EntryResolutionError, {}, {"cause": None, "cause_type": ""}),
]


@pytest.mark.parametrize(
    ("cls", "values", "defaults"), _DECLARED, ids=[c.__name__ for c, _, _ in _DECLARED]
)
def test_declared_fields_have_defaults_and_survive_pickling(
    cls: type[errors.SpawnkitError], values: dict[str, Any], defaults: dict[str, Any]
) -> None:
    bare = cls("message")
    for name, default in defaults.items():
        assert getattr(bare, name) == default, name
    err = cls("message", **values)
    if isinstance(err, errors.ChildError):
        err.unreaped_pids = [4242]  # set after teardown, as the launcher does
        values = {**values, "unreaped_pids": [4242]}
    if isinstance(err, errors.StageError):
        err.cause, err.cause_type = errors.ConfigError("bad", setting="x"), "spawnkit.ConfigError"
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is cls and str(again) == "message"
    for name, value in values.items():
        assert getattr(again, name) == value, name
    if isinstance(err, errors.StageError):
        assert isinstance(again.cause, errors.ConfigError) and again.cause.setting == "x"


def test_mutable_defaults_are_not_shared_between_errors() -> None:
    one, two = errors.BootstrapTimeoutError("a"), errors.BootstrapTimeoutError("b")
    one.stacks[0] = "stack"
    one.unreaped_pids.append(1)
    assert two.stacks == {} and two.unreaped_pids == []


def test_a_plugins_stage_failure_is_caught_as_plugin_error_with_both_field_sets() -> None:
    """``except PluginError`` still catches a plugin failure surfacing through a stage."""
    cls = errors.stage_error_type(errors.PluginError)
    err = cls("plugin 'bad' failed", stage="load_plugins", rank=1)
    err.plugin, err.dist = "bad", "bad-dist"  # type: ignore[attr-defined]
    err.cause_type = "spawnkit.errors.PluginError"
    again = pickle.loads(pickle.dumps(err))
    with pytest.raises(errors.PluginError) as info:
        raise again
    got = info.value
    assert isinstance(got, errors.StageError)
    assert (got.plugin, got.dist, got.stage, got.rank) == ("bad", "bad-dist", "load_plugins", 1)
    assert (got.cause_type, got.cause) == ("spawnkit.errors.PluginError", None)
