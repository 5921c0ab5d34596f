"""Where a benchmark's workers start: a throw-away directory of their modules, and no
launching script re-run in them."""

from __future__ import annotations

import compileall
import contextlib
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["main_hidden", "plain_baseline", "worker_site"]


@contextlib.contextmanager
def worker_site(prefix: str, write: Callable[[Path], None], *also: Path) -> Iterator[Path]:
    """A directory ``write`` fills, importable here and in every child until the block ends;
    meanwhile no child re-runs this process's ``__main__`` (see ``main_hidden``).

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
            with main_hidden():
                yield root
        finally:
            if old is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old
            sys.path.remove(str(root))


@contextlib.contextmanager
def main_hidden() -> Iterator[None]:
    """``__main__`` without ``__file__`` and ``__spec__``, as an interactive session's is.

    A spawned or forkserver child re-runs its launcher's ``__main__`` (multiprocessing's
    ``prepare()``), and under ``spawnkit bench`` that is the console script: raw and
    spawnkit workers alike imported the CLI, ``typing`` and ``spawnkit`` (4 ms each here),
    which padded every baseline and kept those modules out of the cold census.  What a
    launcher's own script costs is the same for every variant and is not what is compared.
    """
    main: Any = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {k: vars(main)[k] for k in ("__file__", "__spec__") if k in vars(main)}
    vars(main).pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        vars(main).pop("__spec__", None)
        vars(main).update(saved)


@contextlib.contextmanager
def plain_baseline() -> Iterator[None]:
    """Around the start of a baseline that is plain multiprocessing on purpose (raw spawn and
    forkserver, ``torch.multiprocessing.spawn``): without its ``PlainChildWarning``.

    Once the benchmark has run its spawnkit rows, its process is a launcher of the bench's
    namespace, and a plain child running the same worker module is what that warning is for
    (it starts without the plugins): every user running ``spawnkit bench`` read spawnkit
    warning about its own benchmark.  Only these starts: any other plain child still warns.
    """
    from spawnkit.errors import PlainChildWarning

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=PlainChildWarning)
        yield
