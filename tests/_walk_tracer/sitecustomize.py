"""Loaded at start-up by a worker of ``tests/test_walks.py`` (its directory is on PYTHONPATH).

Records which spawnkit source files run a frame holding the walked data, from
the interpreter's first statement on; ``walk_tracer.py`` holds the predicate.
"""

import os

if os.environ.get("WALKTEST_TOKEN"):
    import walk_tracer

    walk_tracer.start(os.environ["WALKTEST_TOKEN"], os.environ["WALKTEST_OUT"])
