"""Suite-wide settings; fixtures for users live in spawnkit.testing (a pytest11 plugin)."""
