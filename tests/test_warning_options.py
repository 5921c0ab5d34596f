"""Every ``-W ...::spawnkit.X`` that spawnkit tells its users to pass names a category Python
can be given at start-up.

Python drops a ``-W`` entry whose category it cannot import as it starts ("Invalid -W option
ignored"), before spawnkit is imported; ``spawnkit._warnopts`` installs such entries once
spawnkit is, but only for categories it can resolve.  ``PluginSelectionWarning`` lived in a
private module, so the ``-W error::spawnkit.PluginSelectionWarning`` README gives four times
(and every such warning's own text) was dropped: nothing was refused or silenced.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: A category: ``spawnkit.XWarning`` or ``spawnkit.testing.XWarning`` (not prose's ``spawnkit.X``)
_OPTION = re.compile(r"::(spawnkit\.(?:[a-z_]+\.)?[A-Z]\w*Warning)\b")


def _named() -> set[str]:
    """The categories named in ``-W ...::spawnkit.X`` (and filters) in README, docs and the
    package's own messages."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    texts += sorted((ROOT / "src" / "spawnkit").rglob("*.py"))
    return {m.group(1) for path in texts for m in _OPTION.finditer(path.read_text("utf-8"))}


def test_the_documents_and_messages_name_spawnkits_warnings() -> None:
    names = _named()
    assert "spawnkit.PluginSelectionWarning" in names and "spawnkit.PlainChildWarning" in names


@pytest.mark.parametrize("name", sorted(n for n in _named() if n.count(".") == 1))
def test_each_named_category_given_to_python_is_installed(name: str) -> None:
    """A real interpreter started with ``-W error::<name>``: after ``import spawnkit`` the
    filter is in place (``spawnkit.testing.X`` is pytest's to resolve, not Python's)."""
    code = (
        "import warnings, spawnkit\n"
        f"cls = getattr(spawnkit, {name.split('.')[1]!r})\n"
        "print(any(f[0] == 'error' and f[2] is cls for f in warnings.filters))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-W", f"error::{name}", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True", (name, proc.stdout, proc.stderr)
