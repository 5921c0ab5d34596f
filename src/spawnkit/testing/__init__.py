"""Helpers and pytest fixtures (from the ``pytest11`` plugin :mod:`spawnkit.testing.plugin`) for
testing plugins and entries as spawnkit runs them; the helpers work without pytest too.
"""

from spawnkit.testing._dists import Distribution, write_distribution
from spawnkit.testing._env import EnvOverlay, PlatformSelection, PluginAllowlist
from spawnkit.testing._leftover import HookLeakWarning
from spawnkit.testing._modes import LAUNCH_MODES, LaunchMode
from spawnkit.testing._project import PluginProject, make_plugin_project, make_venv, pip_install
from spawnkit.testing._run import ChildTraceback, EntryRun, run_entry
from spawnkit.testing._sandbox import DistSandbox

__all__ = [
    "LAUNCH_MODES",
    "ChildTraceback",
    "DistSandbox",
    "Distribution",
    "EntryRun",
    "EnvOverlay",
    "HookLeakWarning",
    "LaunchMode",
    "PlatformSelection",
    "PluginAllowlist",
    "PluginProject",
    "make_plugin_project",
    "make_venv",
    "pip_install",
    "run_entry",
    "write_distribution",
]
