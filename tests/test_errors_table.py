"""docs/errors.md is the one table of spawnkit's errors: it must list every exported class,
every kind and every former class, and the former names must still import (deprecated)."""

from __future__ import annotations

import pickle
import re
import warnings
from pathlib import Path

import pytest

import spawnkit
from spawnkit import errors
from spawnkit._names import qualified_name

DOC = Path(__file__).resolve().parents[1] / "docs" / "errors.md"


def _rows() -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| `(\w+)` \|(.*)\|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def test_the_table_lists_every_exported_error_class_and_its_kinds() -> None:
    rows = _rows()
    exported = {n for n in errors.__all__ if isinstance(getattr(errors, n), type)}
    assert exported <= set(rows), f"missing from docs/errors.md: {sorted(exported - set(rows))}"
    for name, kinds in errors.KINDS.items():
        documented = set(re.findall(r"`(\w+)`", rows[name][2]))
        assert documented == set(kinds), (name, documented, kinds)
    for name in exported - set(errors.KINDS):
        assert rows[name][2] == "", f"{name} has no kinds but the table lists {rows[name][2]}"


def test_the_table_lists_every_former_class_with_its_replacement() -> None:
    rows = _rows()
    for old, (parent, kind) in errors._DEPRECATED.items():
        assert rows[old] == [f"`{parent}`, kind `{kind}`"], old
        assert kind in errors.KINDS[parent]


@pytest.mark.parametrize("old", sorted(errors._DEPRECATED))
def test_a_former_class_imports_as_its_parent_with_a_deprecation_warning(old: str) -> None:
    parent, kind = errors._DEPRECATED[old]
    with pytest.warns(DeprecationWarning, match=rf"{parent} with kind={kind!r}"):
        alias = getattr(errors, old)
    assert alias is getattr(errors, parent)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert getattr(spawnkit, old) is alias  # the package's export too
    assert old not in spawnkit.__all__  # not star-imported (that would warn)
    # ``except OldName`` still catches the case the old class named.
    with pytest.raises(alias) as info:
        raise getattr(errors, parent)("boom", kind=kind)
    assert info.value.kind == kind


@pytest.mark.parametrize(
    ("cls_name", "kind"), [(c, k) for c, ks in errors.KINDS.items() for k in ks]
)
def test_a_kind_survives_pickling_and_shows_in_repr(cls_name: str, kind: str) -> None:
    err = getattr(errors, cls_name)("what happened", kind=kind)
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is type(err) and clone.kind == kind and str(clone) == "what happened"
    assert f"kind={kind!r}" in repr(clone)
    assert qualified_name(clone).endswith(f"{cls_name}[{kind}]")


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="has no kind 'nope'"):
        errors.BootstrapError("x", kind="nope")
    with pytest.raises(ValueError, match="has no kind 'payload'"):
        errors.SpawnkitError("x", kind="payload")  # a kind belongs to its own class
