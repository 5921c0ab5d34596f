"""Property test: random registration sequences behave like a small model of the chain.

The model is a list of registrations per target, frozen at each ``apply_hooks()``;
calling a target must give exactly what nesting those hooks by hand gives (REPLACE
innermost, last one winning; the rest in registration order, last outermost), and
``unapply()`` must put back the very objects that were in each ``__dict__``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spawnkit.hooks import HookRegistry, HookSource, HookType

TARGETS = """
class Base:
    def inh(self):
        return ['orig:inh']

class C(Base):
    def m(self):
        return ['orig:m']

    @classmethod
    def cm(cls):
        return ['orig:cm']

    @staticmethod
    def sm():
        return ['orig:sm']

    async def am(self):
        return ['orig:am']

def f0():
    return ['orig:f0']

def f1():
    return ['orig:f1']
"""

NAMES = ["f0", "f1", "C.m", "C.cm", "C.sm", "C.inh", "C.am"]
TYPES = list(HookType)
SOURCES = [HookSource("p0"), HookSource("p1", "d1", "1.0")]

Op = tuple[str, Any]
ops_strategy = st.lists(
    st.one_of(
        st.tuples(
            st.just("register"),
            st.tuples(st.sampled_from(NAMES), st.sampled_from(TYPES), st.sampled_from([0, 1])),
        ),
        st.tuples(st.just("apply"), st.none()),
        st.tuples(st.just("unapply"), st.none()),
        st.tuples(st.just("discard"), st.sampled_from([0, 1])),
    ),
    max_size=25,
)

if TYPE_CHECKING:
    from _hooks_support import Modules


def _make_hook(kind: HookType, tag: str, trace: list[str]) -> Callable[..., Any]:
    if kind is HookType.BEFORE:

        def before(*a: Any, **k: Any) -> None:
            trace.append(f"B{tag}")

        return before
    if kind is HookType.AFTER:
        return lambda result, *a, **k: [*result, f"A{tag}"]
    if kind is HookType.AROUND:

        def around(orig: Any, *a: Any, **k: Any) -> Any:
            trace.append(f"<{tag}")
            out = orig(*a, **k)
            if hasattr(out, "__await__"):

                async def finish() -> Any:
                    r = await out
                    return [*r, f"W{tag}"]

                return finish()
            return [*out, f"W{tag}"]

        return around
    return lambda *a, **k: [f"R{tag}"]


def _model_call(name: str, regs: list[tuple[HookType, str]]) -> tuple[list[str], list[str]]:
    """What calling ``name`` must return and trace, computed from the registrations alone."""
    trace: list[str] = []
    replaces = [tag for kind, tag in regs if kind is HookType.REPLACE]
    result = [f"R{replaces[-1]}"] if replaces else [f"orig:{name.split('.')[-1]}"]
    layers = [(kind, tag) for kind, tag in regs if kind is not HookType.REPLACE]

    def call(i: int) -> list[str]:  # layer i wraps layers < i
        if i < 0:
            return list(result)
        kind, tag = layers[i]
        if kind is HookType.BEFORE:
            trace.append(f"B{tag}")
            return call(i - 1)
        if kind is HookType.AFTER:
            return [*call(i - 1), f"A{tag}"]
        trace.append(f"<{tag}")
        return [*call(i - 1), f"W{tag}"]

    return call(len(layers) - 1), trace


def _call(mod: Any, name: str) -> list[str]:
    import asyncio

    obj = {
        "f0": mod.f0,
        "f1": mod.f1,
        "C.m": mod.C().m,
        "C.cm": mod.C.cm,
        "C.sm": mod.C.sm,
        "C.inh": mod.C().inh,
        "C.am": mod.C().am,
    }[name]
    out = obj()
    if name == "C.am":
        out = asyncio.run(out)
    return list(out)


def _raw_state(mod: Any, user: Any) -> dict[str, Any]:
    return {
        "f0": vars(mod).get("f0"),
        "f1": vars(mod).get("f1"),
        "user.f0": vars(user).get("f0"),
        **{f"C.{k}": v for k, v in vars(mod.C).items()},
        **{f"Base.{k}": v for k, v in vars(mod.Base).items()},
    }


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=ops_strategy)
def test_registry_matches_model_and_unapply_restores(mods: Modules, ops: list[Op]) -> None:
    if mods.name("t") not in __import__("sys").modules:
        mods.write("t", TARGETS)
        mods.write("user", "from PKG.t import f0\n")
    mod = mods.load("t")
    user = mods.load("user")
    before = _raw_state(mod, user)
    trace: list[str] = []
    registered: dict[str, list[tuple[HookType, str, int]]] = {n: [] for n in NAMES}
    applied: dict[str, list[tuple[HookType, str]]] = {n: [] for n in NAMES}
    with HookRegistry.isolated() as reg:
        for i, (op, arg) in enumerate(ops):
            if op == "register":
                name, kind, src = arg
                tag = str(i)
                reg.register(
                    mods.name(f"t.{name}"), _make_hook(kind, tag, trace), kind, source=SOURCES[src]
                )
                registered[name].append((kind, tag, src))
            elif op == "discard":
                reg.discard_source(SOURCES[arg])
                for name in NAMES:
                    registered[name] = [r for r in registered[name] if r[2] != arg]
            elif op == "apply":
                changed = reg.apply_hooks()
                new = {n: [(k, t) for k, t, _ in registered[n]] for n in NAMES}
                expect_changed = {
                    mods.name(f"t.{n}") for n in NAMES if new[n] != applied[n] and new[n]
                }
                assert set(changed) == expect_changed
                applied = new
            else:
                reg.unapply()
                applied = {n: [] for n in NAMES}
                assert _raw_state(mod, user) == before
                assert all(_raw_state(mod, user)[k] is v for k, v in before.items())
            for name in NAMES:
                trace.clear()
                want, want_trace = _model_call(name, applied[name])
                assert _call(mod, name) == want, (name, applied[name])
                assert trace == want_trace
            assert (user.f0 is mod.f0) and (bool(applied["f0"]) == (mod.f0 is not before["f0"]))
            assert {a.target for a in reg.applied_targets()} == {
                mods.name(f"t.{n}") for n in NAMES if applied[n]
            }
    after = _raw_state(mod, user)
    assert after.keys() == before.keys()
    assert all(after[k] is v for k, v in before.items())
