"""The ``annal`` Spark source and sink on a secured cluster (``annal cluster up
--security sasl_ssl``): a batch write and read as a SCRAM user over SASL_SSL
(gRPC over TLS, the user and password in Kafka's ``kafka.sasl.jaas.config``),
the user's ACLs applying on the driver and the executors alike, and a wrong
password failing with a clear error that does not show it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from secured_cluster import secured_cluster

PASSWORD = "alice-s3cret"
WRONG = "not-alices-password"


def jaas(user: str, password: str) -> str:
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";'
    )


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """One broker with ACLs on; topic ``orders`` that alice may write and read,
    and ``private``, which she may not see."""
    with secured_cluster(tmp_path / "cluster", [
        ["topics", "create", "--topic", "orders", "--partitions", "2"],
        ["topics", "create", "--topic", "private", "--partitions", "1"],
        ["configs", "--entity-type", "users", "--entity-name", "alice", "--alter",
         "--add-config", f"SCRAM-SHA-512=[password={PASSWORD}]"],
        ["acls", "--add", "--allow-principal", "User:alice", "--operation", "Write",
         "--operation", "Read", "--topic", "orders"],
    ]) as status:  # fmt: skip
        yield status


@pytest.mark.timeout(300)
def test_a_scram_user_writes_and_reads_over_sasl_ssl(spark: Any, secured: dict[str, Any]) -> None:
    endpoint = secured["endpoint"]
    # The cluster's GRPCS:// listener requires a client certificate (that is
    # how its brokers prove themselves): the user presents the one there is,
    # and its password makes the call alice's, not the certificate's admin.
    keystore = str(Path(secured["ca"]).parent / "admin.pem")

    def options(password: str) -> dict[str, str]:
        return {
            "bootstrap.servers": endpoint,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": jaas("alice", password),
            "kafka.ssl.truststore.location": secured["ca"],
            "kafka.ssl.keystore.location": keystore,
            "kafka.ssl.truststore.type": "PEM",
        }

    rows = [(f"k{i}", f"v{i}") for i in range(6)]
    frame = spark.createDataFrame(rows, "key string, value string")
    frame.write.format("annal").mode("append").options(**options(PASSWORD)).option(
        "topic", "orders"
    ).save()  # each task's producer, on an executor
    read = spark.read.format("annal").options(**options(PASSWORD)).option("subscribe", "orders")
    back = read.load()  # planned on the driver, fetched on the executors
    got = sorted((r.key.decode(), r.value.decode(), r.partition) for r in back.collect())
    assert [(k, v) for k, v, _ in got] == rows
    assert {p for _, _, p in got} == {0, 1}

    with pytest.raises(Exception, match="may not Describe") as hidden:  # alice, not admin
        spark.read.format("annal").options(**options(PASSWORD)).option(
            "subscribe", "private"
        ).load().collect()
    assert "subscribed topics do not exist: ['private']" in str(hidden.value)

    with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED") as refused:
        spark.read.format("annal").options(**options(WRONG)).option(
            "subscribe", "orders"
        ).load().collect()
    message = str(refused.value)
    assert "authentication of user 'alice' failed: invalid username or password" in message
    assert WRONG not in message and PASSWORD not in message

    # Nothing Spark shows of the queries (their plans, as the UI's SQL tab
    # shows them) nor the broker's log holds a password.
    shown = [back._jdf.queryExecution().toString()]
    executions = spark._jsparkSession.sharedState().statusStore().executionsList().iterator()
    while executions.hasNext():
        shown.append(executions.next().physicalPlanDescription())
    shown.append((Path(secured["dir"]) / "broker-1" / "broker.log").read_text())
    assert len(shown) > 2 and "alice" in shown[-1]
    for text in shown:
        assert PASSWORD not in text and WRONG not in text
