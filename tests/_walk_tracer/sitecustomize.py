"""Loaded at start-up by a worker of ``tests/test_walks.py`` (its directory is on PYTHONPATH).

Records which spawnkit source files run a frame holding the walked data, from
the interpreter's first statement on; ``walk_tracer.py`` holds the predicate.
"""

import os

if os.environ.get("WALKTEST_TOKEN_FILE"):
    import walk_tracer

    # From a file, not the environment: every process's environment block (which the
    # launcher's clean-up reads) would otherwise hold the token and count as the data.
    with open(os.environ["WALKTEST_TOKEN_FILE"]) as f:
        walk_tracer.start(f.read(), os.environ["WALKTEST_OUT"])
