"""AiGateway's Prometheus metrics (``--metrics-listen``; san_jobs.shared.metrics_http serves
them, san_jobs.shared.grpc_metrics counts the RPCs).

Every call passes through :class:`~san_jobs.ai_gateway.calls.CallRunner`, unary or inside a
StreamCalls stream, and so does every call a stream refuses or cancels before it
runs (``CallRunner.record``): that is where the calls are counted, once each.

Label values stay few: ``method`` is a call kind's RPC name (calls.py), ``model`` the
model that answered as the backend configuration names it (never a caller's word;
empty when no model answered), ``code`` a gRPC status code name.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from san_jobs.ai_gateway.errors import GatewayError, RateLimited

PREFIX = "san_aigateway"

# From a cached answer (a millisecond) to a long generation behind a slow provider.
BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip


class CallMetrics:
    """What the call runner reports; counts nothing (no --metrics-listen)."""

    def started(self, method: str) -> None:
        """A call began running (it is in flight until finished())."""

    def finished(self, method: str) -> None:
        """A call that started() is over."""

    def ended(self, method: str, model: str, code: str, seconds: float) -> None:
        """A call ended with `code` after `seconds` (every call, run or refused)."""

    def answered(self, method: str, model: str, input_tokens: int, output_tokens: int,
                 cached: bool) -> None:  # fmt: skip
        """A call was answered by `model`, spending these tokens (a cached or shared
        answer spends none)."""

    def failed(self, method: str, error: GatewayError) -> None:
        """A call failed with `error`."""


class _MethodChildren:
    __slots__ = ("cached", "codes", "in_flight", "rate_limited", "seconds")

    def __init__(self, metrics: GatewayMetrics, method: str) -> None:
        self.seconds = metrics.seconds.labels(method)
        self.in_flight = metrics.in_flight.labels(method)
        self.cached = metrics.cached.labels(method)
        self.rate_limited = metrics.rate_limited.labels(method)
        # (model, code) -> calls_total child
        self.codes: dict[tuple[str, str], Any] = {}


class GatewayMetrics(CallMetrics):
    """Every AiGateway metric, in its own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.calls = Counter(
            f"{PREFIX}_calls_total",
            "Calls ended (unary and inside StreamCalls), by method, the model that "
            "answered (empty: none did) and gRPC status code",
            ["method", "model", "code"],
            registry=self.registry,
        )
        self.seconds = Histogram(
            f"{PREFIX}_call_duration_seconds",
            "Time from the start of a call to its answer or error, by method",
            ["method"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.tokens = Counter(
            f"{PREFIX}_tokens_total",
            "Tokens spent on answered calls, by model and direction (input, output); "
            "cached and shared answers spend none",
            ["model", "direction"],
            registry=self.registry,
        )
        self.cached = Counter(
            f"{PREFIX}_cached_answers_total",
            "Calls answered from the result cache or by joining an identical call in "
            "flight (no backend call), by method",
            ["method"],
            registry=self.registry,
        )
        self.rate_limited = Counter(
            f"{PREFIX}_rate_limited_total",
            "Calls the gateway refused with RESOURCE_EXHAUSTED for its own limits (the "
            "caller's rate limit, the concurrency cap), by method; a provider's 429 is not "
            "counted here",
            ["method"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            f"{PREFIX}_calls_in_flight",
            "Calls running now (unary and inside StreamCalls), by method",
            ["method"],
            registry=self.registry,
        )
        self._methods: dict[str, _MethodChildren] = {}
        # (model, direction) -> tokens child
        self._tokens: dict[tuple[str, str], Any] = {}

    def _method(self, method: str) -> _MethodChildren:
        children = self._methods.get(method)
        if children is None:
            children = self._methods[method] = _MethodChildren(self, method)
        return children

    def started(self, method: str) -> None:
        self._method(method).in_flight.inc()

    def finished(self, method: str) -> None:
        self._method(method).in_flight.dec()

    def ended(self, method: str, model: str, code: str, seconds: float) -> None:
        children = self._method(method)
        children.seconds.observe(seconds)
        child = children.codes.get((model, code))
        if child is None:
            child = children.codes[(model, code)] = self.calls.labels(method, model, code)
        child.inc()

    def answered(self, method: str, model: str, input_tokens: int, output_tokens: int,
                 cached: bool) -> None:  # fmt: skip
        if cached:
            self._method(method).cached.inc()
        for direction, count in (("input", input_tokens), ("output", output_tokens)):
            if count > 0:
                child = self._tokens.get((model, direction))
                if child is None:
                    child = self._tokens[(model, direction)] = self.tokens.labels(model, direction)
                child.inc(count)

    def failed(self, method: str, error: GatewayError) -> None:
        # subject "backend": the provider's own 429 (real or injected), not a refusal.
        if isinstance(error, RateLimited) and error.subject != "backend":
            self._method(method).rate_limited.inc()
