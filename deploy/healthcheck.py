"""``python -m annal.deploy.healthcheck HOST:PORT``: exit 0 when the broker there serves.

The containers' health check (docker-compose.yml): asks the broker's
``grpc.health.v1`` service for ``annal.v1.Annal`` and exits 0 on SERVING, 1
otherwise (not serving yet, shutting down, or not answering), printing why.
"""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVICE = "annal.v1.Annal"


def check(address: str, timeout_s: float = 3.0) -> str | None:
    """None when the broker at ``address`` is SERVING; else what is wrong."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=timeout_s)
        except grpc.RpcError as e:
            return f"{address}: {e.code().name}: {e.details()}"
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        return f"{address}: {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or ":" not in args[0]:
        print("usage: python -m annal.deploy.healthcheck HOST:PORT", file=sys.stderr)
        return 2
    problem = check(args[0])
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
