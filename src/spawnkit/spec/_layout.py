"""A spec pickled by another spawnkit than the one reading it: say which two, and the fix.

A record pickles as its values in field order (``_record``), so a worker whose spawnkit lays
a record out otherwise (a stale install on a Ray or torchrun node, a ``sys.path`` that finds
an older copy first) failed unpickling the spec with a bare ``ValueError: zip() argument 2 is
longer than argument 1``, in stage ``process_start`` or ``read_spec``, naming neither copy.
A spec carries its launcher's version and folder ahead of its records (``ProcessSpec``'s
``__reduce__``), which this module's error names beside this process's own.  Imported by a
launcher as it pickles a spec, and by a worker only when the layouts differ.
"""

from __future__ import annotations

import os
import sys

from spawnkit.errors import SpecError

__all__ = ["other_layout", "this_spawnkit"]

_own: tuple[str, str] | None = None


def this_spawnkit() -> tuple[str, str]:
    """``(version, package folder)`` of the spawnkit this process imported."""
    global _own
    if _own is None:
        package = __name__.partition(".")[0]
        version = getattr(sys.modules.get(package), "__version__", None) or "(no __version__)"
        folder = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        _own = (str(version), folder)
    return _own


def other_layout(
    record: str, fields: int, values: int, built_by: tuple[str, str] | None
) -> SpecError:
    """The error for a ``record`` of ``fields`` fields here, pickled with ``values`` values;
    ``built_by``: the spawnkit that pickled the spec, None when it did not say (one older
    than this check) or the record came outside a spec."""
    version, folder = this_spawnkit()
    if built_by is None:
        theirs = "another spawnkit, one that does not record its version (older than this check)"
        fix = "the launcher's spawnkit"
    else:
        theirs = f"spawnkit {built_by[0]} ({built_by[1]})"
        fix = f"spawnkit {built_by[0]}, as the launcher has"
        if built_by[0] == version:
            theirs += ", the same version number: one of the two copies was changed since"
    return SpecError(
        f"this process (pid {os.getpid()}) runs spawnkit {version} ({folder}), but the spec "
        f"it was sent was built by {theirs}: a {record} there has {values} fields, here "
        f"{fields}, so the spec cannot be read and nothing of it ran. Fix: install {fix}, on "
        "every node and in every worker's environment, or make this worker's sys.path "
        "(PYTHONPATH, env=) find the launcher's spawnkit before any other copy.",
        kind="version",
        field=record,
        expected=f"{fields} fields (spawnkit {version})",
        value=f"{values} fields" + (f" (spawnkit {built_by[0]})" if built_by else ""),
    )
