"""The start-up trace's spans as OpenTelemetry spans, where an application configured a provider.

opentelemetry-api is the optional ``otel`` extra.  Nothing here runs unless a
trace was asked for (``trace=``) and a real provider is set (the API's
default proxy/no-op provider means nobody would receive the spans).  The
launch's root span starts when the launch does, so its W3C ``traceparent``
travels to every rank in ``spec.env`` as ``TRACEPARENT`` (where an entry that
uses OpenTelemetry continues the trace); the other spans are emitted when the
group closes, with their measured times converted from the shared monotonic
clock to Unix nanoseconds.  A provider whose root span has no valid context
(the SDK under ``OTEL_SDK_DISABLED=true`` hands out a no-op tracer) counts as
none: the JSON trace is written, the ranks get no ``TRACEPARENT``.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from spawnkit._trace import Recorder, Span

__all__ = ["TRACEPARENT_VAR", "OtelBridge", "otel_bridge"]

#: The variable each rank finds the launch's W3C trace context in.
TRACEPARENT_VAR = "TRACEPARENT"


def otel_bridge(begun: float, offset: float) -> OtelBridge | None:
    """A bridge whose root span started at ``begun`` (monotonic s); None when OTel is off (no
    provider, or one whose spans carry no valid context)."""
    if importlib.util.find_spec("opentelemetry") is None:
        return None
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None  # no provider configured: spans would go nowhere
    bridge = OtelBridge(trace.get_tracer("spawnkit"), begun, offset)
    if not bridge.root.get_span_context().is_valid:
        # A provider that hands out no real span (the SDK's under OTEL_SDK_DISABLED=true: a
        # no-op tracer) has no context to give the ranks, nor spans to take: OTel is off.
        bridge.root.end()
        return None
    return bridge


class OtelBridge:
    """The launch's root span, its trace context for the ranks, and the other spans at the end."""

    def __init__(self, tracer: Any, begun: float, offset: float) -> None:
        self.tracer = tracer
        self.offset = offset
        self.root = tracer.start_span("spawn_with_plugins", start_time=self._ns(begun))

    def _ns(self, monotonic: float) -> int:
        return int((monotonic + self.offset) * 1e9)

    def traceparent(self) -> str:
        from opentelemetry.trace import set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier, context=set_span_in_context(self.root))
        return carrier["traceparent"]

    def emit(self, rec: Recorder) -> None:
        """Every recorded span, under the one it lies within on its track (else the root)."""
        from opentelemetry.trace import set_span_in_context

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
                otel.end(end_time=self._ns(s.end))
                stack.append((s, otel))
        end = root_span.end if root_span is not None else max(s.end for s in rec.spans)
        self.root.end(end_time=self._ns(end))


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
