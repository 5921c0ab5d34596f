"""``spawnkit.ray``: the public name of the Ray launcher; its code is in ``spawnkit.scaleout.ray``.

Kept as its own module so ``import spawnkit.ray`` and ``spawnkit.ray.spawn_on_ray``
stay what the README documents, while every launcher that is not local (Ray,
torchrun) lives in one package.
"""

from __future__ import annotations

from spawnkit.scaleout.ray import INSTALL_HINT, RayWorkerGroup, spawn_on_ray, spawn_spec_on_ray

__all__ = ["INSTALL_HINT", "RayWorkerGroup", "spawn_on_ray", "spawn_spec_on_ray"]
