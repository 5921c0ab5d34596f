"""Helpers and pytest fixtures for testing plugins and entry functions the way spawnkit runs them."""

from spawnkit.testing._dists import Distribution, write_distribution

__all__ = ["Distribution", "write_distribution"]
