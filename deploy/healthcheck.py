"""``python -m annal.deploy.healthcheck [--command-config FILE] HOST:PORT``: exit 0
when the broker there serves.

The containers' health check (docker-compose.yml): asks the broker's
``grpc.health.v1`` service for ``annal.v1.Annal`` and exits 0 on SERVING, 1
otherwise (not serving yet, shutting down, or not answering), printing why.
A broker on a ``GRPCS://`` listener (docker-compose.secure.yml) is asked over
TLS, as ``--command-config`` says (the CLI's client settings: the CA and, where
the broker requires one, a client certificate).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import grpc
from annal.client.security import Security, SecurityConfigError, command_config_security
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVICE = "annal.v1.Annal"


def check(address: str, timeout_s: float = 3.0, security: Security | None = None) -> str | None:
    """None when the broker at ``address`` is SERVING; else what is wrong."""
    with (security or Security()).channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=timeout_s)
        except grpc.RpcError as e:
            return f"{address}: {e.code().name}: {e.details()}"
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        return f"{address}: {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"
    return None


def read_security(path: Path) -> Security:
    """A ``--command-config`` file's client settings; SecurityConfigError naming what is wrong."""
    return command_config_security(path)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m annal.deploy.healthcheck",
        description="Exit 0 when the broker at HOST:PORT serves (gRPC health check), else 1.",
    )
    parser.add_argument("address", metavar="HOST:PORT", help="the broker's gRPC listener")
    parser.add_argument(
        "--command-config", type=Path, metavar="FILE",
        help="client settings for a GRPCS:// listener, as annal's CLI takes them "
        "(security.protocol=SSL, ssl.truststore.location, ssl.keystore.location)",
    )  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if ":" not in args.address:
        print("usage: python -m annal.deploy.healthcheck [--command-config FILE] HOST:PORT",
              file=sys.stderr)  # fmt: skip
        return 2
    security = None
    if args.command_config is not None:
        try:
            security = read_security(args.command_config)
        except SecurityConfigError as exc:
            print(exc, file=sys.stderr)
            return 2
    problem = check(args.address, security=security)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
