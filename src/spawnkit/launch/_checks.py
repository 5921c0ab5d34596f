"""What the launcher refuses before it starts a single worker.

Bad timeouts and counts, a missing entry module, invalid namespace variables: one error naming
the argument, instead of one ``ChildRaisedError`` per rank or a wait that never ends.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping

from spawnkit import _reference
from spawnkit._compat import TYPE_CHECKING
from spawnkit.bootstrap.stages import Stage
from spawnkit.errors import ConfigError, EntryResolutionError

if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "DEFAULT_READY_TIMEOUT",
    "check_count",
    "check_entry_module",
    "check_env_form",
    "check_env_values",
    "check_preload",
    "check_run_id",
    "check_seconds",
    "namespace_value",
]

#: The limits a group gets when its launcher sets none (seconds).
DEFAULT_READY_TIMEOUT = 300.0
DEFAULT_GRACE_PERIOD = 3.0


def check_count(name: str, value: Any) -> int:
    """A positive ``int`` (``True`` is not a count, though Python calls it one)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"{name}={value!r}: must be a positive int (the number of workers), not a "
            f"{type(value).__name__}.",
            setting=name,
        )
    if value < 1:
        raise ConfigError(f"{name}={value!r}: must be at least 1.", setting=name)
    return value


def check_env_form(env: object) -> None:
    """``env=`` is a mapping (or None): ``env=os.environ.items()`` or a list of pairs was a bare
    ``AttributeError`` (no ``.items()``/``.get``) from whichever code read it first."""
    if env is not None and not isinstance(env, Mapping):
        raise ConfigError(
            f"env= is a {type(env).__name__}, not a mapping: pass the workers' variables as a "
            "dict of name to text, e.g. env={'OMP_NUM_THREADS': '1'} (dict(pairs) makes one "
            "from (name, value) pairs). No worker was started.",
            setting="env",
        )


def check_env_values(env: Mapping[Any, Any] | None) -> dict[str, str]:
    """``env=`` as the workers will read it: text for text, each name one a process can set.

    Every value was made ``str(value)``: ``None`` arrived as the text ``"None"`` (a variable
    meant to be unset was set), ``True`` as ``"True"`` (off for code that tests for ``"1"``).
    """
    check_env_form(env)
    checked: dict[str, str] = {}
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise ConfigError(
                f"env= has the name {key!r}: a variable's name is a non-empty str without '=' "
                "or NUL. Fix the name. No worker was started.",
                setting="env",
            )
        if isinstance(value, str) and "\0" in value:
            raise ConfigError(
                f"env={{{key!r}: {value!r}}}: an environment variable cannot hold a NUL "
                "character. No worker was started.",
                setting="env",
            )
        if not isinstance(value, str):
            if value is None:
                fix = (
                    "None would arrive as the text 'None'. To keep the variable from the "
                    "workers, leave it out of env= and delete it from os.environ before "
                    "launching"
                )
            elif isinstance(value, bool):
                fix = f"{value} would arrive as {str(value)!r}. Pass '1' or '0' (or the text "
                fix += "the code reading it expects)"
            else:
                fix = f"pass the text the workers should read, e.g. {str(value)!r}"
            raise ConfigError(
                f"env={{{key!r}: {value!r}}}: the workers' environment holds text, not "
                f"{type(value).__name__}: {fix}. No worker was started.",
                setting="env",
            )
        checked[key] = value
    return checked


def check_seconds(
    name: str, value: Any, *, none: str, zero_ok: bool = False, call: str = ""
) -> float | None:
    """A finite number of seconds (``> 0``, or ``>= 0`` when ``zero_ok``), or None."""
    if value is None:
        return None
    shown = f"{call}({name}={value!r})" if call else f"{name}={value!r}"
    or_none = f", or None ({none})" if none else ""  # none="": None is no choice here
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"{shown}: must be a number of seconds{or_none}, not a {type(value).__name__}.",
            setting=name,
        )
    seconds = float(value)
    if math.isnan(seconds):
        raise ConfigError(
            f"{shown} is not a number of seconds: every comparison with NaN is false, so the "
            f"wait it bounds would never end. Pass a number{or_none}.",
            setting=name,
        )
    if math.isinf(seconds):
        fix = f"pass None ({none})" if none else "pass a finite number"
        raise ConfigError(f"{shown} is not a usable number of seconds; {fix}.", setting=name)
    if seconds < 0 or (seconds == 0 and not zero_ok):
        bound = "at least 0" if zero_ok else "more than 0"
        raise ConfigError(f"{shown}: must be {bound} seconds{or_none}.", setting=name)
    return seconds


def check_run_id(run_id: object, call: str) -> None:
    """A run id given is kept: ``run_id=""`` (one computed empty by mistake) was replaced by a
    random id, another on each call, so the caller's record and ``cleanup(run_id)`` never
    matched the workers; ``"  "`` was kept as the id itself."""
    if run_id is None or (isinstance(run_id, str) and run_id.strip()):
        return
    raise ConfigError(
        f"{call}(run_id={run_id!r}): a run id is non-blank text naming the group: every "
        "worker carries it (SPAWNKIT_RUN_ID, inherited by its own children), "
        "spawnkit.cleanup(run_id) finds the run's processes by it, and records and traces "
        "name the group with it. Pass a non-blank str, or None (the default) for a generated "
        "one. No worker was started.",
        setting="run_id",
    )


def check_entry_module(entry: str) -> None:
    """The entry's top-level package must be findable here (``find_spec`` imports no parent)."""
    module = _reference.parse(entry)[0]
    top = module.split(".")[0]
    hint = _not_found(top)
    if hint is None:
        return
    raise EntryResolutionError(
        f"entry {entry!r}: no module named {top!r} can be imported in the launcher, so no "
        f"worker could import it either (they search the same sys.path).{hint} Install the "
        "package, or put its directory on sys.path / PYTHONPATH before launching. No worker "
        "was started.",
        stage=Stage.RESOLVE_ENTRY.value,
    )


def check_preload(preload: Any, call: str = "") -> tuple[str, ...]:
    """``preload=`` as module names the server can import: a str was read as its letters
    (``preload="torch"`` preloaded ``t``, ``o``, ...), a typo failed only in the server."""
    shown = f"{call}(preload={preload!r})" if call else f"preload={preload!r}"
    if isinstance(preload, str | bytes):
        raise ConfigError(
            f"{shown}: one string, which would be read as its letters; pass a sequence of "
            f"module names: preload=({preload!r},). No worker was started.",
            setting="preload",
        )
    names = tuple(preload)
    for name in names:
        if not isinstance(name, str) or not all(p.isidentifier() for p in name.split(".")):
            raise ConfigError(
                f"{shown}: {name!r} is not a module name such as 'torch' or 'engine.models'. "
                "No worker was started.",
                setting="preload",
            )
        hint = _not_found(name.split(".")[0])
        if hint is not None:
            raise ConfigError(
                f"{shown}: no module named {name.split('.')[0]!r} can be imported in the "
                f"launcher, so the warm-start server (on the same sys.path) could not preload "
                f"{name!r}.{hint} Install it, fix the name or leave it out. No worker was "
                "started.",
                setting="preload",
            )
    return names


def _not_found(top: str) -> str | None:
    """None when top-level module ``top`` is importable here (found, not imported); else a
    did-you-mean sentence (empty without a close name)."""
    if not top or top in sys.modules:
        return None
    import importlib.util

    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        found = None
    if found is not None:
        return None
    import difflib
    import pkgutil

    names = {m.name for m in pkgutil.iter_modules()} | {n.split(".")[0] for n in list(sys.modules)}
    close = difflib.get_close_matches(top, sorted(names), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def namespace_value(env: Mapping[str, str], environ: Mapping[str, str], var: str) -> str | None:
    """A namespace variable as the workers will see it: ``env=`` wins over the launcher's own."""
    if var in env:
        return env[var]
    return environ.get(var)
