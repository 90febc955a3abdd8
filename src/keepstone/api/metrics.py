"""Prometheus metrics of one app, in its own registry (so tests can build many apps)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "keepstone_http_requests_total",
            "HTTP requests answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "keepstone_http_request_duration_seconds",
            "Time to answer an HTTP request, by route template.",
            ["route"],
            registry=self.registry,
        )
        self.quota_refusals = Counter(
            "keepstone_quota_refusals_total",
            "Writes refused by a quota, by limit (document, space, team, instance).",
            ["limit"],
            registry=self.registry,
        )
        self.store_errors = Counter(
            "keepstone_store_errors_total",
            "Requests that failed because the store could not be reached.",
            registry=self.registry,
        )
        self.backlog = Gauge(
            "keepstone_index_backlog",
            "Rows waiting for a vector of the configured model, by kind (chunks, records); "
            "counted when scraped.",
            ["kind"],
            registry=self.registry,
        )

        #: The labelled children of one (method, route, status): ``labels()`` builds its
        #: key and takes a lock on every call, and every request would pay it twice.
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one answered request and its duration."""
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:
            children = (
                self.requests.labels(method, route, str(status)),
                self.latency.labels(route),
            )
            self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def set_backlog(self, counts: dict[str, int | None]) -> None:
        """The backlog gauge, from ``counts`` by kind (None: not counted, left out)."""
        for kind, n in counts.items():
            if n is not None:
                self.backlog.labels(kind).set(n)

    def render(self) -> bytes:
        return generate_latest(self.registry)
