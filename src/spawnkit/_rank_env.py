"""The variables spawnkit puts in a torchrun rank's environment, below every layer that reads them.

``spawnkit launch --launcher torchrun`` (``cli/_torchrun.py``) sets the first two for each rank,
and ``spawnkit.run`` (``scaleout/torchrun.py``, which exports them under the same names) reads
them, and sets the third for its own restart.  A rank inherits them, and so does whatever it
starts: an engine process per node that launches its own workers with ``spawn_with_plugins``
runs the launcher's environment check with them set, and that check (``launch/_env_check.py``,
a layer below ``scaleout``) must know them as spawnkit's own, not as variables nothing reads.
"""

from __future__ import annotations

__all__ = ["FAILURE_STORE_VAR", "PROCESS_ENV", "RESTART_VAR", "RESULT_DIR_VAR"]

FAILURE_STORE_VAR = "SPAWNKIT_FAILURE_STORE"
"""``host:port`` of a multi-node job's rendezvous store (set by ``spawnkit launch``): a
failing rank with no torchrun restart left publishes its failure there, so node 0's launcher
reports it with rank and stage (torchrun's agents only see their own node's ranks)."""

RESULT_DIR_VAR = "SPAWNKIT_RESULT_DIR"
"""A folder (set by ``spawnkit launch --launcher torchrun``) where each rank that finishes
writes its entry's result as text, ``rank<N>.json``: torchrun keeps no return values, so the
launcher prints them from there (``rank N returned: ...``), as it does for local ranks."""

RESTART_VAR = "SPAWNKIT_RUN_RESTARTED"
"""Set only for the one exec of a rank with its ``env=`` entries read at start (see
``scaleout.torchrun._start_with_env``), and taken out of the environment as that image starts."""

PROCESS_ENV = (FAILURE_STORE_VAR, RESULT_DIR_VAR, RESTART_VAR)
"""This module's process-wide variables, for the launcher's environment check."""
