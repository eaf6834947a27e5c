"""Kafka listener addresses in ``--bootstrap-server``: find the same broker's gRPC one.

annal's tools talk to brokers over gRPC, but a Kafka user hands them what Kafka's
own tools take: a broker's Kafka listener (``PLAINTEXT://``).  Rather than fail
there, ``grpc_bootstrap`` asks each address what it speaks:

* one small Kafka request (ApiVersions v0) goes out on a fresh connection; a gRPC
  listener answers anything with its HTTP/2 settings frame at once, a Kafka
  listener with an answer carrying the request's correlation id;
* for a Kafka listener, the broker's own settings (DescribeConfigs on its BROKER
  resource, which needs Describe-configs on the cluster when an authorizer is on)
  name its ``GRPC://`` (or ``GRPCS://``) listener, advertised one first; a listener
  without a host is reached on the host the user gave.

Addresses that are not Kafka listeners, or that do not answer at all, are kept
as they are: the command then reports them as it always did.  A Kafka listener
whose gRPC listener cannot be found is a ``KafkaBootstrapError`` that says so and
what to pass instead.  The probe costs one connection per address, a few
milliseconds on a local network.
"""

from __future__ import annotations

import socket
import struct
from typing import NamedTuple

PROBE_TIMEOUT_S = 2.0
_CORRELATION = 0x616E6E  # any id: the answer must carry it back
_CLIENT_ID = b"annal-cli"
_PROBE = struct.pack(">ihhih", 10 + len(_CLIENT_ID), 18, 0, _CORRELATION, len(_CLIENT_ID))
_GRPC_SCHEMES = ("GRPC", "GRPCS")
_DESCRIBE_CONFIGS, _METADATA, _BROKER_RESOURCE = 32, 3, 4


class KafkaBootstrapError(Exception):
    """A Kafka listener was given and its broker's gRPC listener could not be found."""


def grpc_bootstrap(servers: str, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """``servers`` with every Kafka listener replaced by its broker's gRPC listener."""
    found: list[str] = []
    for address in (s.strip() for s in servers.split(",")):
        if address and speaks_kafka(address, timeout_s):
            address = grpc_listener_of(address, timeout_s)
        if address and address not in found:
            found.append(address)
    return ",".join(found)


class _Address(NamedTuple):
    host: str
    port: int


def _split(address: str) -> _Address | None:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return _Address(host.strip("[]") or "localhost", int(port))


def speaks_kafka(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether ``address`` answers a Kafka request as a Kafka listener; False for
    anything else, unreachable or malformed addresses included."""
    where = _split(address)
    if where is None:
        return False
    try:
        with socket.create_connection(where, timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(_PROBE + _CLIENT_ID)
            head = b""
            while len(head) < 8:
                chunk = sock.recv(8 - len(head))
                if not chunk:
                    return False
                head += chunk
    except OSError:
        return False
    correlation: int = struct.unpack_from(">i", head, 4)[0]
    return correlation == _CORRELATION


def grpc_listener_of(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """The gRPC listener (``host:port``) of the broker whose Kafka listener is
    ``address``; KafkaBootstrapError when it cannot be found."""
    from annal.kafkaproto.client import KafkaConnection

    connection = KafkaConnection(address, timeout_s)
    try:
        brokers = connection.exchange(_METADATA, 1, {"topics": []}).brokers
        # this broker first: only it describes its own settings
        ordered = sorted(brokers, key=lambda b: f"{b.host}:{b.port}" != address)
        reasons: list[str] = []
        for broker in ordered:
            answer = connection.exchange(_DESCRIBE_CONFIGS, 1, {
                "resources": [{"resource_type": _BROKER_RESOURCE,
                               "resource_name": str(broker.node_id),
                               "configuration_keys": ["advertised.listeners", "listeners"]}],
                "include_synonyms": False,
            }).results[0]  # fmt: skip
            if answer.error_code:
                reasons.append(answer.error_message or f"error code {answer.error_code}")
                continue
            settings = {c.name: c.value or "" for c in answer.configs}
            for name in ("advertised.listeners", "listeners"):
                if grpc := _grpc_in(settings.get(name, ""), address):
                    return grpc
            reasons.append(f"broker {broker.node_id} has no GRPC:// listener")
        raise KafkaBootstrapError(_unfound(address, "; ".join(reasons) or "no broker answered"))
    except KafkaBootstrapError:
        raise
    except Exception as exc:  # any failure of the exchange: say what was tried
        raise KafkaBootstrapError(_unfound(address, str(exc) or type(exc).__name__)) from None
    finally:
        connection.close()


def _grpc_in(listeners: str, address: str) -> str | None:
    """The first GRPC/GRPCS entry of a listeners setting as ``host:port``."""
    for entry in listeners.split(","):
        scheme, sep, rest = entry.strip().partition("://")
        if sep and scheme.upper() in _GRPC_SCHEMES:
            host, _, port = rest.rpartition(":")
            if host in ("", "0.0.0.0", "[::]", "::"):
                host = address.rpartition(":")[0]
            return f"{host}:{port}"
    return None


def _unfound(address: str, reason: str) -> str:
    return (
        f"{address} is a Kafka listener; annal's tools talk to a broker's gRPC listener "
        f"(the GRPC:// entry of its listeners; `annal cluster up` prints them as "
        f"'bootstrap servers'), and finding it through {address} failed: {reason}"
    )
