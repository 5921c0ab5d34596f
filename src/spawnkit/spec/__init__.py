"""The spec a worker receives: standard library only, so unpickling it imports no engine code."""

from spawnkit.spec._namespace_config import NamespaceConfig
from spawnkit.spec.payload import Payload
from spawnkit.spec.process_spec import ProcessSpec

__all__ = ["NamespaceConfig", "Payload", "ProcessSpec"]
