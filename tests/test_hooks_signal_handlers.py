"""A signal handler a hook target module installs as it is imported, in real workers.

``apply_hooks()`` imports the target's module to patch it; a module that calls
``signal.signal(SIGTERM, on_term)`` at import hands the interpreter the original, so
the plugin's hook on ``on_term`` was "applied" and never ran when the signal came.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _plugin_app import LAUNCH, printed, write_app

ENGINE = """
import signal

got = []


def on_term(signum, frame):
    got.append("term")


def on_int(signum, frame):
    got.append("int")


signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_int)


def main(*args):
    signal.raise_signal(signal.SIGTERM)  # real signals, delivered to this worker
    signal.raise_signal(signal.SIGINT)
    return got
"""

PLUGIN = """
import sys

from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace


def noted(signum, frame):
    sys.modules["{pkg}.eng"].got.append("hooked")


def register():
    hooks = get_namespace({tag!r}).hooks
    hooks.register("{pkg}.eng.on_term", noted, HookType.BEFORE)
    hooks.register("{pkg}.eng.on_int", noted, HookType.BEFORE)
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_handler_the_target_module_installed_runs_the_plugins_hook(
    tmp_path: Path, method: str
) -> None:
    app = write_app(
        tmp_path,
        "sig",
        LAUNCH + f"\nif __name__ == '__main__':\n    print(launch('eng:main', {method!r}))\n",
        {"noter": "plugin:register"},
        {"eng": ENGINE, "plugin": PLUGIN},
    )
    assert printed(app.script) == [["hooked", "term", "hooked", "int"]]
