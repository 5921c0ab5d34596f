"""The lazy proxy: binds at module scope for free, imports on first use, refuses too-early use."""

from __future__ import annotations

import pickle
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import spawnkit
from spawnkit.bootstrap.lazy import LazyObject, lazy
from spawnkit.errors import LazyProxyError
from spawnkit.spec import _phase


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A throwaway package ``lz_<id>`` with a module ``gen`` holding a class; removed afterwards."""
    pkg = f"lz_{uuid.uuid4().hex[:8]}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / pkg / "gen.py").write_text(
        "class DiffGenerator:\n"
        "    made = []\n"
        "    def __init__(self, path):\n"
        "        self.path = path\n"
        "    @classmethod\n"
        "    def from_pretrained(cls, model_path):\n"
        "        return cls(model_path)\n"
        "def build(x):\n"
        "    return ('built', x)\n"
        "VALUE = 41\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in [m for m in sys.modules if m == pkg or m.startswith(pkg + ".")]:
        del sys.modules[name]


def test_binding_imports_nothing_and_repr_does_not_resolve(engine: str) -> None:
    proxy = lazy(f"{engine}.gen:DiffGenerator")
    assert isinstance(proxy, LazyObject)
    assert f"{engine}.gen" not in sys.modules
    assert "not imported yet" in repr(proxy)
    assert f"{engine}.gen" not in sys.modules


def test_attribute_read_resolves_caches_and_forwards(engine: str) -> None:
    proxy = lazy(f"{engine}.gen:DiffGenerator")
    gen = proxy.from_pretrained(model_path="m")
    assert f"{engine}.gen" in sys.modules
    real = sys.modules[f"{engine}.gen"].DiffGenerator
    assert type(gen) is real and gen.path == "m"
    assert isinstance(gen, proxy)  # __instancecheck__ forwards
    assert issubclass(real, proxy)
    assert proxy == real and hash(proxy) == hash(real)
    assert "->" in repr(proxy)
    # cached: a later change to the module does not re-resolve
    sys.modules[f"{engine}.gen"].DiffGenerator = object
    assert proxy.from_pretrained.__func__ is real.from_pretrained.__func__


def test_call_and_subclassing_resolve(engine: str) -> None:
    build = lazy(f"{engine}.gen:build")
    assert build(3) == ("built", 3)
    base = lazy(f"{engine}.gen:DiffGenerator")

    class Mine(base):  # type: ignore[misc,valid-type]
        pass

    assert Mine.__mro__[1] is sys.modules[f"{engine}.gen"].DiffGenerator


def test_module_reference_and_setattr_forward(engine: str) -> None:
    mod = lazy(f"{engine}.gen")
    assert mod.VALUE == 41
    mod.VALUE = 42
    assert sys.modules[f"{engine}.gen"].VALUE == 42


def test_pickles_as_reference_without_importing(engine: str) -> None:
    proxy = lazy(f"{engine}.gen:DiffGenerator")
    clone = pickle.loads(pickle.dumps(proxy))
    assert isinstance(clone, LazyObject)
    assert f"{engine}.gen" not in sys.modules
    assert clone.__name__ == "DiffGenerator"


def test_spawnkit_lazy_is_the_function() -> None:
    from spawnkit import bootstrap

    lazy_module = sys.modules["spawnkit.bootstrap.lazy"]
    assert spawnkit.lazy is lazy
    assert bootstrap.lazy is lazy  # not the submodule of the same name
    assert lazy_module.lazy is lazy


@pytest.mark.parametrize("bad", ["", "pkg.mod:", ":Name", "pkg mod:Name", "pkg.mod:a..b"])
def test_invalid_reference_is_rejected_at_binding(bad: str) -> None:
    with pytest.raises(ValueError, match=r"pkg\.mod:Name"):
        lazy(bad)


def test_missing_attribute_names_the_reference(engine: str) -> None:
    proxy = lazy(f"{engine}.gen:Nope")
    with pytest.raises(AttributeError, match=f"{engine}.gen has no attribute 'Nope'"):
        proxy()


def test_use_in_a_worker_before_hooks_applied_raises(engine: str) -> None:
    proxy = lazy(f"{engine}.gen:DiffGenerator")
    _phase.enter_worker()
    try:
        # which window it names depends on the outermost frame: pytest's own module scope
        # reads as a launching script's, an xdist worker's does not
        with pytest.raises(LazyProxyError, match="where it would bind the unpatched original"):
            _ = proxy.from_pretrained
        assert f"{engine}.gen" not in sys.modules
        _phase.mark_hooks_applied()
        assert proxy.from_pretrained(model_path="x").path == "x"
    finally:
        _phase.leave_worker()


def test_a_proxy_resolved_before_hooks_follows_them_and_their_undoing(engine: str) -> None:
    """A launcher (or a test) that used the proxy before ``bootstrap_here()`` applied hooks
    kept the unpatched original: the hooked function and the replacing class never ran
    through it, while the module's own attribute was hooked."""
    from spawnkit.hooks import HookRegistry

    build, gen_cls = lazy(f"{engine}.gen:build"), lazy(f"{engine}.gen:DiffGenerator")
    assert (build(1), type(gen_cls("p")).__name__) == (("built", 1), "DiffGenerator")
    module = sys.modules[f"{engine}.gen"]

    class Mine(module.DiffGenerator):
        pass

    with HookRegistry.isolated():
        HookRegistry.register(f"{engine}.gen.build", lambda r, x: (*r, "hooked"), "AFTER")
        HookRegistry.register(f"{engine}.gen.DiffGenerator", Mine, "REPLACE")
        HookRegistry.apply_hooks()
        assert build(1) == ("built", 1, "hooked")  # before: ("built", 1)
        assert type(gen_cls.from_pretrained("p")) is Mine and gen_cls == Mine
        HookRegistry.unapply()
        assert build(1) == ("built", 1) and gen_cls == module.DiffGenerator
