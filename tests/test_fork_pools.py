"""The OpenMP pool check reads real threads of this process (the server-level refusal is in
``tests/test_launcher_prebootstrap.py``)."""

from __future__ import annotations

import threading
import time

from spawnkit.protocol import _fork_pools


def test_a_waiting_python_thread_is_no_openmp_pool_and_nothing_is_refused() -> None:
    pools = _fork_pools.Pools()
    gate = threading.Event()
    thread = threading.Thread(target=gate.wait, args=(30,), daemon=True)
    thread.start()
    try:
        assert thread.native_id is not None
        deadline = time.monotonic() + 10  # until it waits (just started, it may still run)
        while _fork_pools._counter(thread.native_id) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _fork_pools._counter(thread.native_id) is not None  # waiting: its counter reads
        assert _fork_pools._gomp_threads({thread.native_id}) == set()
        pools.after("plugin 'x'", "load_plugins")  # a new thread, not GNU OpenMP's: served
        assert thread.native_id in pools.known
    finally:
        gate.set()
        thread.join(5)
