"""Suite-wide settings; fixtures for users live in spawnkit.testing (a pytest11 plugin).

The suite's own shared fixtures are plugins declared here, once, so pytest
rewrites their asserts and every test module sees the same instances.
"""

pytest_plugins = ["_hooks_support", "_platform_dists", "pytester"]
