"""The package exports every error class exactly as ``spawnkit.errors`` declares them."""

from __future__ import annotations

import spawnkit
from spawnkit import errors


def test_every_error_in_errors_all_is_exported_by_the_package_and_no_other() -> None:
    exported_errors = {
        name
        for name in spawnkit.__all__
        if isinstance(getattr(spawnkit, name), type)
        and issubclass(getattr(spawnkit, name), BaseException)
    }
    assert exported_errors == set(errors.__all__)
    for name in errors.__all__:
        assert getattr(spawnkit, name) is getattr(errors, name)
