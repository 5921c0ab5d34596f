"""The throw-away directory of worker modules a benchmark starts its workers from."""

from __future__ import annotations

import compileall
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["worker_site"]


@contextlib.contextmanager
def worker_site(prefix: str, write: Callable[[Path], None], *also: Path) -> Iterator[Path]:
    """A directory ``write`` fills, importable here and in every child until the block ends.

    On ``PYTHONPATH`` as well as ``sys.path``: the stdlib forkserver of Python < 3.12 ignores
    the parent's ``sys.path``, and its preload of the site's modules would fail silently
    (its workers would then import them each, and the figures would be wrong).
    """
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        root = Path(tmp)
        write(root)
        # Compiled now, as pip compiles what it installs: a worker importing plain sources
        # compiles them each time where PYTHONDONTWRITEBYTECODE is set (several ms per cold
        # worker, on both sides of every ratio).  py_compile writes whatever that variable says.
        compileall.compile_dir(root, quiet=1)
        sys.path.insert(0, str(root))
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(root), *map(str, also), old or "") if p
        )
        try:
            yield root
        finally:
            if old is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old
            sys.path.remove(str(root))
