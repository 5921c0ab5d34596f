"""The half of ``PlatformManager`` that decides: README's "Platform selection" decision table."""

from __future__ import annotations

import os
from collections.abc import Callable

import spawnkit._reference as _reference
from spawnkit import _metadata
from spawnkit._compat import TYPE_CHECKING
from spawnkit._metadata import EntryPointInfo
from spawnkit.errors import ConfigError, PlatformError, PlatformUnavailableError
from spawnkit.platforms._candidates import (
    Candidate,
    Trace,
    base_class,
    ep_label,
    exc_text,
    refuse_duplicates,
)
from spawnkit.platforms._probes import Probe
from spawnkit.platforms._selection import PlatformSelection
from spawnkit.platforms.builtin import BUILTINS, Builtin
from spawnkit.platforms.interface import Platform

if TYPE_CHECKING:
    from typing import Protocol

    from spawnkit.spec import NamespaceConfig
else:
    from spawnkit._compat import Protocol

__all__: list[str] = []

_BY_NAME = {row.name: row for row in BUILTINS}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
_Result = tuple[PlatformSelection, type[Platform]]

#: A built-in probe that raised: what the refusal says happened (``reason``).
_FAILED = (
    "probe {reason}: a broken driver, runtime or torch install does that, not absent hardware."
)


def _cpu_engine(var: str) -> str:
    """``<PREFIX>_USE_CPU_ENGINE``'s value, which must read as a boolean: ``y`` or
    ``enabled`` was neither true nor an error, so the workers ran on the GPU (or the base
    platform) with nothing said, where the other switches refuse such a value."""
    raw = os.environ.get(var, "").strip()
    if raw.lower() in _TRUE or raw.lower() in _FALSE:
        return raw
    raise ConfigError(
        f"{var}={raw!r} is not a boolean; use 1/0, true/false, yes/no or on/off ({var}=1 "
        "runs the workers on the CPU when no platform is named and no plugin activates).",
        setting=var,
    )


class NamespaceView(Protocol):
    """What the platforms read of a namespace (``Namespace`` is one; it sits above them)."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> NamespaceConfig: ...


class DecisionTable:
    """Which platform class a request resolves to; ``PlatformManager`` caches and builds it."""

    namespace: NamespaceView
    _probes: dict[str, Callable[[], Probe]]
    _composed: dict[tuple[str, type], type[Platform]]

    def _entry_points(self) -> tuple[EntryPointInfo, ...]:
        return _metadata.entry_points(self.namespace.config.platform_group)

    def _decide(self, requested: str | None, how: str, trace: Trace) -> _Result:
        """One branch per row; ``requested``: the selected name (None: unset), ``how``: by what."""
        cpu_engine = _cpu_engine(self.namespace.config.cpu_engine_var)  # any row: say a typo
        eps = self._entry_points()
        for ep in eps:
            if requested is not None and ep.name != requested:
                trace.candidates.append(Candidate(ep, "skipped"))
        # Any row: a name two distributions declare (README: refused in every mode).
        refuse_duplicates(eps, trace)
        named = _BY_NAME.get(requested.lower()) if requested is not None else None
        # Row "a built-in": that platform, its hardware checked.
        if named is not None:
            return self._named_builtin(named, how, eps, trace)
        # Row "a plugin name": only that plugin is imported; activate() -> None is unavailable.
        if requested is not None and any(ep.name == requested for ep in eps):
            return self._named_plugin([ep for ep in eps if ep.name == requested], how, trace)
        from spawnkit.platforms import _checks  # the rows below activate candidates

        # Row "an unknown name": PlatformNotFoundError listing what is installed.
        if requested is not None:
            raise _checks.not_found_error(requested, how, eps, trace)
        active = _checks.activate_all(eps, trace)
        # Row "unset, N activated": PlatformConflictError naming each plugin and distribution.
        if len(active) > 1:
            raise _checks.conflict_error(active, trace)
        # Row "unset, 1 activated": that plugin.
        if active:
            ep, qualname = active[0]
            trace.step(f"1 plugin activated: {ep.name!r}")
            return self._plugin(ep, qualname, trace)
        trace.step(f"0 of {len(eps)} plugin(s) activated")
        cfg = self.namespace.config
        # Row "unset, 0 activated", first part: <PREFIX>_USE_CPU_ENGINE=1 is the CPU.
        if cpu_engine.lower() in _TRUE:
            trace.step(f"{cfg.cpu_engine_var}={cpu_engine}")
            return self._builtin(_BY_NAME["cpu"], trace)
        # Row "unset, 0 activated", second part: CUDA, ROCm, XPU (table order), first present;
        # a probe that raised stops here, as an activate() that raised does.
        for row in BUILTINS:
            if row.auto and self._probe(row, trace).available:
                trace.step(f"{row.name} available")
                return self._builtin(row, trace)
            if row.auto and trace.probe_error is not None:
                raise self._probe_failed(row, trace) from trace.probe_error
        # Row "unset, 0 activated", last part: the namespace's base platform.
        trace.step("no accelerator found")
        return self._builtin(_BY_NAME["base"], trace)

    # ------------------------------------------------------ the rows' parts
    def _named_builtin(
        self, row: Builtin, how: str, eps: tuple[EntryPointInfo, ...], trace: Trace
    ) -> _Result:
        claims = [ep for ep in eps if ep.name.lower() == row.name]
        if claims:
            from spawnkit.platforms._checks import reserved_error

            raise reserved_error(claims, trace)
        if row.probe is not None:
            from spawnkit.platforms._checks import available_text  # the refusals' list

            probe = self._probe(row, trace)
            if trace.probe_error is not None:
                raise trace.fail(
                    PlatformUnavailableError,
                    f"{how} selects the built-in {row.name!r} platform, but its hardware "
                    f"{_FAILED.format(reason=probe.reason)} Fix that install, or select another "
                    f"platform. Available names: {available_text(eps)}.",
                ) from trace.probe_error
            if not probe.available:
                raise trace.fail(
                    PlatformUnavailableError,
                    f"{how} selects the built-in {row.name!r} platform, but its hardware is "
                    f"not available in this process: {probe.reason}. Select a platform that "
                    f"is present, or unset {self.namespace.config.platform_var} to "
                    f"auto-detect. Available names: {available_text(eps)}.",
                )
        return self._builtin(row, trace)

    def _builtin(self, row: Builtin, trace: Trace) -> _Result:
        cfg = self.namespace.config
        base = base_class(cfg, trace)
        if row.qualname is None:  # the base row: the namespace's own platform base
            trace.step("base platform")
            qualname = cfg.platform_base or f"{Platform.__module__}:{Platform.__qualname__}"
            sel = PlatformSelection(row.name, "base", qualname, path=list(trace.path))
            return sel, base
        cls, qualname = _reference.resolve_name(row.qualname), row.qualname
        if not issubclass(cls, base):  # the class that runs, named as such
            from spawnkit.platforms._checks import for_base

            cls, qualname = for_base(row.name, cls, base, self._composed, trace)
        trace.step(f"built-in {row.name!r}")
        return PlatformSelection(row.name, "builtin", qualname, path=list(trace.path)), cls

    def _probe(self, row: Builtin, trace: Trace) -> Probe:
        """The probe's answer; one that raised is no answer (``trace.probe_error``): a broken
        driver or torch install, which the rows refuse rather than call the hardware absent."""
        trace.probe_error = None
        try:
            probe = self._probes[row.name]()
        except Exception as exc:
            probe = Probe(False, f"raised {exc_text(exc)}")
            trace.probe_error = exc
        failed = trace.probe_error is not None
        trace.probes.append((row.name, probe.available, probe.reason, failed))
        return probe

    def _probe_failed(self, row: Builtin, trace: Trace) -> PlatformError:
        cfg = self.namespace.config
        return trace.fail(
            PlatformUnavailableError,
            f"auto-discovery could not tell whether this machine has the built-in {row.name!r} "
            f"platform's hardware: its {_FAILED.format(reason=trace.probes[-1][2])} Discovery "
            "stops instead of falling back to the next platform, which would run the job on "
            f"other hardware than this machine has. Fix that install, or select a platform "
            f"with {cfg.platform_var}=<name> ({cfg.platform_var}=cpu, or {cfg.cpu_engine_var}=1, "
            "for the CPU).",
        )

    def _named_plugin(self, matches: list[EntryPointInfo], how: str, trace: Trace) -> _Result:
        from spawnkit.platforms._checks import activate

        (ep,) = matches  # a duplicate name was refused before any row
        outcome, _ = activate(ep, trace)
        if outcome.qualname is None:
            raise trace.fail(
                PlatformUnavailableError,
                f"{how}: {ep_label(ep)} is installed, but activate() returned None: its "
                "hardware is not available in this process (driver, runtime or visible-device "
                f"settings). Check the device, or unset {self.namespace.config.platform_var} "
                "to auto-detect.",
            )
        trace.step(f"plugin {ep.name!r} activated")
        return self._plugin(ep, outcome.qualname, trace)

    def _plugin(self, ep: EntryPointInfo, qualname: str, trace: Trace) -> _Result:
        from spawnkit.platforms._checks import platform_source, plugin_class

        base = base_class(self.namespace.config, trace)
        with platform_source(ep):  # the class's module, imported now: this platform's too
            cls = plugin_class(ep, qualname, base, trace)
        sel = PlatformSelection(ep.name, "plugin", qualname, ep.dist, ep.version, list(trace.path))
        return sel, cls
