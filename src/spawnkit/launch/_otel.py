"""The start-up trace's spans as OpenTelemetry spans, where an application configured a provider.

opentelemetry-api is the optional ``otel`` extra.  Nothing here runs unless a
trace was asked for (``trace=``) and a real provider is set (the API's
default proxy/no-op provider means nobody would receive the spans).  The
launch's root span starts at the launch's first clock read, under the caller's
context: a ``TRACEPARENT`` (and ``TRACESTATE``) in ``env=`` (OpenTelemetry's
environment carrier), else the current span.  Its W3C context travels to every
rank in ``spec.env`` as ``TRACEPARENT`` (with ``TRACESTATE`` where the context
has one), where an entry that uses OpenTelemetry continues the trace; the
other spans are emitted when the group closes, with their measured times
converted from the shared monotonic clock to Unix nanoseconds.  A provider
whose root span has no valid context (the SDK under ``OTEL_SDK_DISABLED=true``
hands out a no-op tracer) counts as none: the JSON trace is written, the ranks
get no ``TRACEPARENT``.
"""

from __future__ import annotations

import importlib.util
import os
import signal
from collections.abc import Mapping
from typing import Any

from spawnkit._trace import Recorder, Span
from spawnkit.errors import ConfigError

__all__ = ["TRACEPARENT_VAR", "TRACESTATE_VAR", "OtelBridge", "otel_bridge"]

#: The variable each rank finds the launch's W3C trace context in (the caller's in ``env=``).
TRACEPARENT_VAR = "TRACEPARENT"
#: The context's vendor trace state, beside it where the context has one.
TRACESTATE_VAR = "TRACESTATE"

#: The environment carrier: each variable and the W3C header it holds.
_CARRIER = {TRACEPARENT_VAR: "traceparent", TRACESTATE_VAR: "tracestate"}


def otel_bridge(begun: float, offset: float) -> OtelBridge | None:
    """A bridge whose root span will start at ``begun`` (monotonic s); None when OTel is off."""
    if importlib.util.find_spec("opentelemetry") is None:
        return None
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None  # no provider configured: spans would go nowhere
    return OtelBridge(trace.get_tracer("spawnkit"), begun, offset)


class OtelBridge:
    """The launch's root span, its trace context for the ranks, and the other spans at the end."""

    def __init__(self, tracer: Any, begun: float, offset: float) -> None:
        self.tracer = tracer
        self.begun = begun
        self.offset = offset
        self.root: Any = None  # by start(), once env= (the caller's context) is known
        #: What the launch raised (``LaunchTrace.finish``): the root span's error status.
        self.error: BaseException | None = None

    def _ns(self, monotonic: float) -> int:
        return int((monotonic + self.offset) * 1e9)

    def start(self, env: Mapping[str, str] | None) -> bool:
        """The root span, under the caller's context (``env``'s ``TRACEPARENT``, else the
        current span); False, and ended, when the provider gave it no valid context (a disabled
        SDK's no-op tracer): there is nothing to continue, OTel is off."""
        from opentelemetry.context import Context
        from opentelemetry.trace import get_current_span
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        _refuse_no_text(env)
        given = {v: val for v, val in (env or {}).items() if v in _CARRIER}
        carrier = {_CARRIER[v]: val for v, val in given.items()}
        propagator = TraceContextTextMapPropagator()
        parsed = propagator.extract(carrier, context=Context())
        unread = bool(given.get(TRACEPARENT_VAR)) and not (
            get_current_span(parsed).get_span_context().is_valid
        )
        parent = propagator.extract(carrier) if given.get(TRACEPARENT_VAR) else None
        self.root = self.tracer.start_span(
            "spawn_with_plugins", context=parent, start_time=self._ns(self.begun)
        )
        if not self.root.get_span_context().is_valid:
            self.root.end()
            return False
        if unread:  # refused with OTel on only (the root is left unended: no span is exported)
            raise ConfigError(
                f"env={{{TRACEPARENT_VAR!r}: {given[TRACEPARENT_VAR]!r}}}: not a W3C "
                "traceparent ('00-<32 hex trace id>-<16 hex span id>-<2 hex flags>', not all "
                "zeros), so the launch's spans could not join the caller's trace. Pass the value "
                "a propagator's inject() wrote, or leave it out. No worker was started.",
                setting="env",
            )
        return True

    def child_env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        """``env`` with the root span's W3C context for the ranks: the caller's
        ``TRACEPARENT``/``TRACESTATE`` are its parent's, replaced by the root's."""
        from opentelemetry.trace import set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier, context=set_span_in_context(self.root))
        out = {k: v for k, v in (env or {}).items() if k not in _CARRIER}
        out.update({v: carrier[h] for v, h in _CARRIER.items() if h in carrier})
        if TRACESTATE_VAR not in out and os.environ.get(TRACESTATE_VAR):
            # The root has no trace state: the ranks would inherit the launcher's own
            # TRACESTATE, another trace's, beside the root's TRACEPARENT.  Empty is W3C's none.
            out[TRACESTATE_VAR] = ""
        return out

    def emit(self, rec: Recorder) -> None:
        """Every recorded span, under the one it lies within on its track (else the root); a
        rank that failed, and the root of a launch that raised, with an error status."""
        from opentelemetry.trace import Status, StatusCode, set_span_in_context

        if self.root is None and not self.start(None):  # a trace no launch gave an env=
            return
        by_track: dict[int, list[Span]] = {}
        for s in rec.spans:
            by_track.setdefault(s.pid, []).append(s)
        root_span: Span | None = None
        for spans in by_track.values():
            stack: list[tuple[Span, Any]] = []
            for s in sorted(spans, key=lambda s: (s.start, -s.end)):
                if s.name == "spawn_with_plugins" and s.cat == "launch" and not stack:
                    root_span = s
                    continue
                while stack and s.start >= stack[-1][0].end:
                    stack.pop()
                parent = stack[-1][1] if stack else self.root
                otel = self.tracer.start_span(
                    s.name,
                    context=set_span_in_context(parent),
                    start_time=self._ns(s.start),
                    attributes=_attributes(s),
                )
                failed = _rank_failure(s, self.error)
                if failed is not None:
                    otel.set_status(Status(StatusCode.ERROR, failed))
                otel.end(end_time=self._ns(s.end))
                stack.append((s, otel))
        if self.error is not None:
            self.root.record_exception(self.error)
            self.root.set_status(Status(StatusCode.ERROR, _described(self.error)))
        end = root_span.end if root_span is not None else max(s.end for s in rec.spans)
        self.root.end(end_time=self._ns(end))


def _refuse_no_text(env: Mapping[str, object] | None) -> None:
    """A ``TRACEPARENT``/``TRACESTATE`` in ``env=`` that is no text (bytes, a number) is
    refused as the text that is no traceparent is: it was dropped and replaced by the launch's
    own context, so the launch left the caller's trace, unsaid."""
    for var, val in (env or {}).items():
        if var in _CARRIER and not isinstance(val, str):
            raise ConfigError(
                f"env={{{var!r}: {val!r}}}: not a W3C {_CARRIER[var]}: the caller's trace "
                f"context is text ({type(val).__name__} given), so the launch's spans could "
                "not join the caller's trace. Pass the text a propagator's inject() wrote "
                "(bytes decoded), or leave it out. No worker was started.",
                setting="env",
            )


def _described(error: BaseException) -> str:
    """An error status's description: the error's type and first line (a ``SystemExit``'s,
    ``Terminated`` for a SIGTERM to the launcher: its exit code)."""
    first = str(error).strip().partition("\n")[0]
    if isinstance(error, SystemExit):
        first = f"exit code {error.code}"
    text = f"{type(error).__name__}: {first}" if first else type(error).__name__
    return text if len(text) <= 200 else text[:199] + "\u2026"


def _rank_failure(s: Span, error: BaseException | None) -> str | None:
    """Why the rank whose life ``s`` is failed (None: it did not, or ``s`` is no rank's life):
    the launch's error where it names this rank, else an exit code that is not 0."""
    if s.cat != "rank" or "exitcode" not in s.args:
        return None
    if error is not None and getattr(error, "pid", None) == s.pid:
        return _described(error)
    code = s.args["exitcode"]
    if code is None:
        return "still running when the group closed (not reaped)"
    if code == 0:
        return None
    if code < 0:
        try:
            return f"ended by {signal.Signals(-code).name} (exit code {code})"
        except ValueError:
            pass
    return f"exit code {code}"


#: OTel attribute namespace (an attribute name, not a module: the layer test reads
#: ``f"spawnkit.{x}"`` as a possible dynamic import)
_ATTR = "spawnkit."


def _attributes(s: Span) -> dict[str, Any]:
    """The span's args as OTel attributes (only the types OTel takes), plus its track."""
    attrs: dict[str, Any] = {}
    for key, value in s.args.items():
        if isinstance(value, str | bool | int | float):
            attrs[_ATTR + key] = value
    # the track last: a span's own "pid" argument (``start rank N``: the rank's) is renamed
    # so that the launcher's span is not put on the rank's track
    if _ATTR + "pid" in attrs:
        attrs[_ATTR + "started_pid"] = attrs.pop(_ATTR + "pid")
    attrs.update({_ATTR + "pid": s.pid, _ATTR + "category": s.cat})
    return attrs
