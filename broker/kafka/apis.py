"""Which Kafka APIs the listener serves, in which versions, and who answers each.

``KafkaApis`` is the table: api key → (lowest version, highest version,
handler).  ApiVersions answers from the same table, so what a client is told
is exactly what is served; a request outside it is refused
(``UnsupportedRequest``: the listener closes the connection, as Kafka's
broker does), except ApiVersions itself, which Kafka's clients send at their
newest version first and which is answered in v0 with UNSUPPORTED_VERSION and
the table, so that they can retry with a version both sides know.

A handler takes the decoded request and returns the values of its response
(``wire.build`` turns them into the version asked for), or None when Kafka
sends no response (Produce with acks=0).

Thread safety: runs on the broker's event loop only.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from annal.broker.metrics import BrokerMetrics
from annal.kafkaproto.wire import API_VERSIONS_KEY, Request, RequestHead, build, response_type
from kio.schema.errors import ErrorCode as KioErrorCode

from annal import errors

Values = Mapping[str, Any]
Handler = Callable[[Request], Awaitable[Values | None]]


class UnsupportedRequest(Exception):
    """An api key or version the listener does not serve."""


@dataclass(frozen=True, slots=True)
class Api:
    name: str
    min_version: int
    max_version: int
    handler: Handler


class KafkaApis:
    """See the module docstring."""

    def __init__(self, metrics: BrokerMetrics | None = None) -> None:
        self._metrics = metrics
        self._apis: dict[int, Api] = {
            API_VERSIONS_KEY: Api("ApiVersions", 0, 3, self._api_versions),
        }

    def add(self, api_key: int, name: str, versions: tuple[int, int], handler: Handler) -> None:
        self._apis[api_key] = Api(name, versions[0], versions[1], handler)

    @property
    def supported(self) -> Mapping[int, Api]:
        return self._apis

    def check(self, head: RequestHead) -> Values | None:
        """None when ``head`` is served; the ApiVersions v0 refusal when it is an
        ApiVersions request of an unknown version; UnsupportedRequest otherwise."""
        api = self._apis.get(head.api_key)
        if api is not None and api.min_version <= head.api_version <= api.max_version:
            return None
        if head.api_key == API_VERSIONS_KEY:
            return {"error_code": KioErrorCode.unsupported_version.value, "api_keys": self._table()}
        if api is None:
            raise UnsupportedRequest(f"api key {head.api_key} is not served")
        raise UnsupportedRequest(
            f"{api.name} v{head.api_version} is not served "
            f"(versions {api.min_version}-{api.max_version} are)"
        )

    def refusal_body(self, values: Values) -> Any:
        """The ApiVersions v0 body of a refusal made by ``check``."""
        return build(response_type(API_VERSIONS_KEY, 0), values)

    async def handle(self, request: Request) -> Values | None:
        """The handler's answer; with metrics, the request counted and timed under
        its API's name (as gRPC's are) and a top-level error code counted."""
        api = self._apis[request.head.api_key]
        if self._metrics is None:
            return await api.handler(request)
        started = time.perf_counter()
        if request.received:
            self._metrics.request_queued(api.name, (started - request.received) * 1000.0)
        try:
            values = await api.handler(request)
        finally:
            self._metrics.request_done(api.name, (time.perf_counter() - started) * 1000.0)
        code = values.get("error_code") if values is not None else None
        if isinstance(code, int) and code != 0:
            self._metrics.request_error(api.name, errors.from_wire(code).name)
        return values

    def _table(self) -> list[Values]:
        return [
            {"api_key": key, "min_version": api.min_version, "max_version": api.max_version}
            for key, api in sorted(self._apis.items())
        ]

    async def _api_versions(self, request: Request) -> Values:
        return {"error_code": errors.NONE.number, "api_keys": self._table(), "throttle_time": 0}
