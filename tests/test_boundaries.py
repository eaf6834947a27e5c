"""The dependency rules of docs/architecture.md, read from the source: what each
package may import."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["annal", "storage", "zk", "broker", "controller", "producer", "admin",
            "consumer", "client", "pipeline", "deploy", "kafkaproto", "security"]  # fmt: skip


def imported_modules(package: str) -> dict[str, set[str]]:
    """file → the top-level modules it imports (``annal.x.y`` counts as ``annal.x``)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        found[str(path.relative_to(ROOT))] = {
            ".".join(n.split(".")[:2]) if n.startswith("annal.") else n.split(".")[0] for n in names
        }
    return found


def test_only_zk_talks_to_kazoo() -> None:
    offenders = [
        f
        for package in PACKAGES
        if package != "zk"
        for f, names in imported_modules(package).items()
        if "kazoo" in names
    ]
    assert offenders == [], f"kazoo imported outside zk/: {offenders}"


def test_storage_imports_nothing_of_the_network_or_zookeeper() -> None:
    forbidden = {"grpc", "kazoo", "annal.broker", "annal.controller", "annal.zk", "annal.v1"}
    offenders = {
        f: sorted(names & forbidden)
        for f, names in imported_modules("storage").items()
        if names & forbidden
    }
    assert offenders == {}


def test_security_is_pure_decisions_and_formats() -> None:
    """The ACL model, the authorizer's decision and SASL's exchanges know nothing of
    the network, ZooKeeper or the broker; both protocols' edges and zk/ use them."""
    forbidden = {"grpc", "kazoo", "kio", "annal.broker", "annal.controller", "annal.zk",
                 "annal.v1", "annal.kafkaproto"}  # fmt: skip
    offenders = {
        f: sorted(names & forbidden)
        for f, names in imported_modules("security").items()
        if names & forbidden
    }
    assert offenders == {}


def test_clients_never_import_broker_internals() -> None:
    forbidden = {"annal.broker", "annal.controller"}
    offenders = {
        f: sorted(names & forbidden)
        for package in ("producer", "consumer", "admin", "client", "pipeline")
        for f, names in imported_modules(package).items()
        if names & forbidden
    }
    assert offenders == {}


def test_partitions_are_named_not_bare_tuples() -> None:
    """Modules pass ``TopicPartition`` values, never bare ``(topic, partition)`` tuples."""
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if "tuple[str, int]" in line
    ]
    assert offenders == [], f"bare (topic, partition) tuples in signatures: {offenders}"


def test_kafkaproto_is_a_library_of_the_wire() -> None:
    """Kafka's protocol is a library both the broker's listener (broker/kafka/) and
    annal's clients use: it imports nothing of the broker, so there is no cycle."""
    forbidden = {"annal.broker", "annal.controller", "annal.zk", "annal.storage"}
    offenders = {
        f: sorted(names & forbidden)
        for f, names in imported_modules("kafkaproto").items()
        if names & forbidden
    }
    assert offenders == {}


def test_only_the_grpc_edges_build_protobuf_messages() -> None:
    """The broker's services take and give request and answer types of their own
    (broker/requests/*_types.py); each protocol edge adapts to them: the gRPC
    servicers (and the inter-broker gRPC clients) use annal.v1's messages, the
    Kafka listener never does."""
    grpc_edges = {
        "broker/control.py",  # the BrokerControl servicer
        "broker/server.py",  # ControlledShutdown, a gRPC client call
        "broker/metadata_cache.py",  # UpdateMetadata's brokers, the controller's gRPC
        "broker/replication/replica_fetcher.py",  # fetching from a leader over gRPC
        "broker/replication/replica_transport.py",
        "broker/transactions/markers.py",  # WriteTxnMarkers to other brokers
        "broker/requests/service.py",  # the Annal servicer
    }
    offenders = sorted(
        f
        for f, names in imported_modules("broker").items()
        if "annal.v1" in names
        and f not in grpc_edges
        and not Path(f).name.startswith("grpc_")
    )
    assert offenders == []
