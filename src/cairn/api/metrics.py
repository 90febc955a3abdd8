"""Prometheus metrics of one app, in its own registry (so tests can build many apps)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "cairn_http_requests_total",
            "HTTP requests answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "cairn_http_request_duration_seconds",
            "Time to answer an HTTP request, by route template.",
            ["route"],
            registry=self.registry,
        )
        self.quota_refusals = Counter(
            "cairn_quota_refusals_total",
            "Writes refused by a quota, by limit (document, space, team, instance).",
            ["limit"],
            registry=self.registry,
        )
        self.store_errors = Counter(
            "cairn_store_errors_total",
            "Requests that failed because the store could not be reached.",
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
