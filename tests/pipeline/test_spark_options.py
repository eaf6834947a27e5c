"""Options of Spark's Kafka source and sink on a real broker and a local Spark:
offsets by time, trigger sizes, minPartitions, includeHeaders, LogAppendTime,
headers and producer settings written, offsets that moved under a streaming
query (failOnDataLoss), unknown options refused, an unreachable cluster."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.deploy.zookeeper import free_port
from annal.pipeline.options import OptionError, read_options, write_options
from annal.producer.producer import Producer
from tls_certs import issue, make_ca


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> str:
    return module_broker_factory().endpoint


def read(spark: Any, endpoint: str, **options: str) -> Any:
    reader = spark.read.format("annal").option("bootstrap.servers", endpoint)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def produce_at(endpoint: str, topic: str, stamps: list[int]) -> None:
    with Producer(endpoint) as producer:
        for i, stamp in enumerate(stamps):
            producer.send(topic, value=b"v%d" % i, partition=0, timestamp_ms=stamp)


@pytest.mark.timeout(180)
def test_offsets_by_timestamp_and_partitions(spark: Any, cluster: str) -> None:
    with AdminClient(cluster) as admin:
        admin.create_topic("times", partitions=1)
    base = 1_700_000_000_000
    produce_at(cluster, "times", [base + 1000 * i for i in range(10)])

    def offsets(**options: str) -> list[int]:
        return sorted(
            r.offset for r in read(spark, cluster, subscribe="times", **options).collect()
        )

    assert offsets(startingTimestamp=str(base + 3500)) == list(range(4, 10))
    assert offsets(
        startingOffsetsByTimestamp=f'{{"times": {{"0": {base + 2000}}}}}',
        endingOffsetsByTimestamp=f'{{"times": {{"0": {base + 5000}}}}}',
    ) == [2, 3, 4]
    assert offsets(startingTimestamp=str(base + 3000), endingTimestamp=str(base + 4000)) == [3]
    assert offsets(  # startingTimestamp wins over startingOffsets, as in Spark
        startingTimestamp=str(base + 8000), startingOffsets="earliest"
    ) == [8, 9]
    with pytest.raises(Exception, match="no record of times-0 has a timestamp at or after"):
        offsets(startingTimestamp=str(base + 99_000))
    assert (
        offsets(startingTimestamp=str(base + 99_000), startingOffsetsByTimestampStrategy="latest")
        == []
    )
    frame = read(spark, cluster, subscribe="times", minPartitions="4")
    assert frame.rdd.getNumPartitions() == 4
    assert sorted(r.offset for r in frame.collect()) == list(range(10))
    with pytest.raises(Exception, match="startingOffsets cannot be latest"):
        offsets(startingOffsets="latest")
    with pytest.raises(
        Exception, match="starting offset 7 of times-0 is after its ending offset 3"
    ):
        offsets(startingOffsets='{"times": {"0": 7}}', endingOffsets='{"times": {"0": 3}}')
    with pytest.raises(Exception, match="option kafka.auto.offset.reset is not supported"):
        offsets(**{"kafka.auto.offset.reset": "earliest"})
    with pytest.raises(Exception, match="option startingoffset is not one annal's source knows"):
        offsets(startingOffset="earliest")


@pytest.mark.timeout(180)
def test_log_append_time_headers_and_producer_settings(spark: Any, cluster: str) -> None:
    with AdminClient(cluster) as admin:
        admin.create_topic(
            "appended", partitions=1, config={"message.timestamp.type": "LogAppendTime"}
        )
        admin.create_topic("written", partitions=2)
    before = int(time.time() * 1000)
    produce_at(cluster, "appended", [1000, 2000])  # the broker's clock replaces them
    rows = read(spark, cluster, subscribe="appended").collect()
    assert [r.timestampType for r in rows] == [1, 1]
    assert all(r.timestamp.timestamp() * 1000 >= before - 1000 for r in rows)
    frame = spark.createDataFrame(
        [("a", b"1", [("h", b"x"), ("h", None)], 1), (None, b"2", [], 0)],
        "key string, value binary, headers array<struct<key:string,value:binary>>, partition int",
    )
    (
        frame.write.format("annal")
        .mode("append")
        .option("bootstrap.servers", cluster)
        .option("topic", "written")
        .option("kafka.compression.type", "lz4")
        .option("kafka.linger.ms", "20")
        .option("kafka.batch.size", "65536")
        .option("kafka.acks", "1")
        .save()
    )
    back = read(spark, cluster, subscribe="written", includeHeaders="true").collect()
    got = {r.value: (r.key, r.partition, [(h.key, h.value) for h in r.headers]) for r in back}
    assert got == {b"1": (b"a", 1, [("h", b"x"), ("h", None)]), b"2": (None, 0, [])}
    with pytest.raises(Exception, match="option kafka.no.such is not one the annal sink knows"):
        frame.write.format("annal").mode("append").option("bootstrap.servers", cluster).option(
            "topic", "written"
        ).option("kafka.no.such", "1").save()


@pytest.mark.timeout(120)
def test_a_write_to_an_unreachable_cluster_says_so_within_the_request_timeout(
    spark: Any,
) -> None:
    frame = spark.createDataFrame([("k", "v")], "key string, value string")
    began = time.monotonic()
    with pytest.raises(Exception, match="BROKER_NOT_AVAILABLE.*no broker reachable within 3000 ms"):
        frame.write.format("annal").mode("append").option(
            "bootstrap.servers", f"127.0.0.1:{free_port()}"
        ).option("topic", "t").option("kafka.request.timeout.ms", "3000").option(
            "kafka.retries", "0"
        ).save()
    assert time.monotonic() - began < 40  # Spark retries the task: each try gives up in 3 s


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_offsets_that_went_back_under_a_streaming_query(
    spark: Any, cluster: str, tmp_path: Path, fail_on_data_loss: str
) -> None:
    topic = f"moving-{fail_on_data_loss}"
    with AdminClient(cluster) as admin:
        admin.create_topic(topic, partitions=1)
    produce_at(cluster, topic, [int(time.time() * 1000)] * 10)
    seen: list[bytes] = []
    query = (
        spark.readStream.format("annal")
        .option("bootstrap.servers", cluster)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", fail_on_data_loss)
        .load()
        .writeStream.foreachBatch(lambda frame, _: seen.extend(r.value for r in frame.collect()))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: len(seen) == 10, 120, "the first ten records")
        with AdminClient(cluster) as admin:  # the topic deleted and created again
            admin.delete_topic(topic)
            wait_until(lambda: topic not in admin.list_topics(), 60, f"{topic} deleted")
            admin.create_topic(topic, partitions=1)
        with SimpleConsumer(cluster) as consumer:
            wait_until(lambda: consumer.partitions_for(topic) == [0], 60, "the new topic")
        produce_at(cluster, topic, [int(time.time() * 1000)] * 3)
        if fail_on_data_loss == "true":
            wait_until(lambda: query.exception() is not None, 120, "the query failing")
            message = str(query.exception())
            assert re.search(f"partition {topic}-0 (went back from 10 to [0-3] |is gone)", message)
            assert "failOnDataLoss" in message
        else:  # the query goes on from the new offsets: later records arrive

            def moved_on() -> bool:
                ends = [json.loads(p["sources"][0]["endOffset"]) for p in query.recentProgress]
                return any(e.get(topic, {}).get("0", 10) < 10 for e in ends)

            wait_until(moved_on, 120, "a micro-batch past the loss")
            with Producer(cluster) as producer:
                producer.send(topic, value=b"after", partition=0)
            wait_until(lambda: b"after" in seen or query.exception(), 120, "a record after it")
            assert query.exception() is None
    finally:
        query.stop()


def test_option_parsing() -> None:
    base = {"bootstrap.servers": "h:1", "subscribe": "t"}
    parsed = read_options(
        {**base, "minOffsetsPerTrigger": "5", "maxTriggerDelay": "30s", "includeHeaders": "true",
         "kafka.request.timeout.ms": "5000", "minPartitions": "3"},
        streaming=True,
    )  # fmt: skip
    assert parsed.min_offsets_per_trigger == 5 and parsed.max_trigger_delay_ms == 30_000
    assert parsed.include_headers and parsed.request_timeout_ms == 5000
    assert parsed.min_partitions == 3
    for bad, match in (
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay must be a duration"),
        ({"minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "3"}, "larger than"),
        ({"includeHeaders": "yes"}, "includeHeaders must be true or false"),
        ({"startingOffsetsByTimestamp": "x"}, "startingOffsetsByTimestamp must be JSON"),
        ({"endingTimestamp": "5"}, "endingTimestamp is for batch queries only"),
        ({"kafka.group.id": "g"}, "no consumer group"),
    ):
        with pytest.raises(OptionError, match=match):
            read_options({**base, **bad}, streaming=True)
    with pytest.raises(OptionError, match="maxOffsetsPerTrigger is for streaming queries only"):
        read_options({**base, "maxOffsetsPerTrigger": "5"}, streaming=False)
    with pytest.raises(OptionError, match="endingOffsets cannot be earliest"):
        read_options({**base, "endingOffsets": "earliest"}, streaming=False)
    with pytest.raises(OptionError, match="kafka.acks=1 cannot go with the exactly-once"):
        write_options(
            {"bootstrap.servers": "h:1", "kafka.acks": "1", "checkpointLocation": "/x"}, True
        )
    with pytest.raises(OptionError, match="set the option checkpointLocation"):
        write_options({"bootstrap.servers": "h:1"}, streaming=True)
    with pytest.raises(OptionError, match="kafka.compression.type must be one of"):
        write_options({"bootstrap.servers": "h:1", "kafka.compression.type": "brotli"}, False)


@pytest.mark.timeout(60)
def test_min_offsets_per_trigger_waits_for_records_or_the_delay(cluster: str) -> None:
    from annal.pipeline.source import AnnalStreamReader
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    with AdminClient(cluster) as admin:
        admin.create_topic("trickle", partitions=1)
    produce_at(cluster, "trickle", [1] * 3)
    reader = AnnalStreamReader(
        read_options(
            {"bootstrap.servers": cluster, "subscribe": "trickle",
             "minOffsetsPerTrigger": "5", "maxTriggerDelay": "3s"},
            streaming=True,
        )
    )  # fmt: skip
    start = {"trickle": {"0": 0}}
    assert reader.latestOffset(start, ReadAllAvailable()) == start  # 3 < 5: no batch yet
    produce_at(cluster, "trickle", [1] * 2)
    assert reader.latestOffset(start, ReadAllAvailable()) == {"trickle": {"0": 5}}
    produce_at(cluster, "trickle", [1])
    later = {"trickle": {"0": 5}}
    assert reader.latestOffset(later, ReadAllAvailable()) == later  # 1 < 5, delay not over
    wait_until(
        lambda: reader.latestOffset(later, ReadAllAvailable()) == {"trickle": {"0": 6}},
        30,
        "maxTriggerDelay passing",
        poll_s=0.5,
    )


# -- security options ----------------------------------------------------------------

SECRET = 'pa"ss w0rd'
JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="pa\\"ss w0rd";'
)


@pytest.fixture
def pem_files(tmp_path: Path) -> dict[str, str]:
    """Files where the options name them: a CA, a keystore (key and certificate in
    one file) and the two apart, as the settings read them when they are loaded."""
    ca = make_ca("annal test CA")
    client = issue(ca, "client")
    files = {name: tmp_path / f"{name}.pem" for name in ("ca", "keystore", "cert", "key")}
    files["ca"].write_bytes(ca.cert_pem())
    client.write_keystore(files["keystore"])
    files["cert"].write_bytes(client.cert_pem())
    files["key"].write_bytes(client.key_pem())
    return {name: str(path) for name, path in files.items()}


def both(options: dict[str, str]) -> list[Any]:
    """The source's and the sink's parse of the same security options."""
    read = read_options({"bootstrap.servers": "h:1", "subscribe": "t", **options}, False)
    write = write_options({"bootstrap.servers": "h:1", "topic": "t", **options}, False)
    return [read, write]


@pytest.mark.timeout(30)
def test_each_security_option_maps(pem_files: dict[str, str]) -> None:
    from annal.client.security import Security

    for parsed in both({}):
        assert parsed.security is None  # the process's default
    scram = {
        "kafka.security.protocol": "sasl_ssl",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": JAAS,
        "kafka.ssl.truststore.location": pem_files["ca"],
        "kafka.ssl.keystore.location": pem_files["keystore"],
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.keystore.type": "pem",
    }
    expected = Security("SASL_SSL", pem_files["ca"], pem_files["keystore"],
                        pem_files["keystore"], "alice", SECRET, "SCRAM-SHA-256")  # fmt: skip
    for parsed in both(scram):
        assert parsed.security == expected
    librdkafka = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.username": "bob",
        "kafka.sasl.password": "bob-secret",
        "kafka.ssl.ca.location": pem_files["ca"],
        "kafka.ssl.certificate.location": pem_files["cert"],
        "kafka.ssl.key.location": pem_files["key"],
    }
    expected = Security("SASL_SSL", pem_files["ca"], pem_files["cert"], pem_files["key"],
                        "bob", "bob-secret", "PLAIN")  # fmt: skip
    for parsed in both(librdkafka):
        assert parsed.security == expected
    # Spark hands option names over in any case; librdkafka's user wins over JAAS's
    mixed = {"Kafka.Security.Protocol": "SASL_SSL", "kafka.SSL.truststore.location":
             pem_files["ca"], "kafka.sasl.jaas.config": JAAS, "kafka.sasl.username": "carol",
             "kafka.sasl.password": "carol-secret"}  # fmt: skip
    for parsed in both(mixed):
        assert parsed.security == Security("SASL_SSL", pem_files["ca"], None, None, "carol",
                                           "carol-secret")  # fmt: skip
    tls = {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": pem_files["ca"]}
    for parsed in both(tls):
        assert parsed.security == Security("SSL", pem_files["ca"])
    plain = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
        'required username="dave" password="dave-secret";',
    }
    for parsed in both(plain):
        assert parsed.security == Security("SASL_SSL", None, None, None, "dave", "dave-secret",
                                           "PLAIN")  # fmt: skip


@pytest.mark.timeout(30)
def test_what_reaches_the_clients_and_the_executors(pem_files: dict[str, str]) -> None:
    """Spark pickles the reader's partitions and the writers for the executors:
    the security goes with them, and becomes each client's keyword arguments."""
    import pickle

    from annal.client.security import client_security
    from annal.pipeline.options import client_args
    from annal.pipeline.read import OffsetRange
    from annal.pipeline.source import _ranges

    secured = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.jaas.config": JAAS,
               "kafka.ssl.truststore.location": pem_files["ca"]}  # fmt: skip
    read, write = both(secured)
    ranges = _ranges(read, {"t": {"0": 0}}, {"t": {"0": 10}})
    assert len(ranges) == 1 and isinstance(ranges[0], OffsetRange)
    for shipped in (ranges[0], write, read):
        copy = pickle.loads(pickle.dumps(shipped))
        assert copy.security == read.security and copy.security.sasl_password == SECRET
    args = client_args(read.security)
    assert args["security_protocol"] == "SASL_SSL" and args["sasl_plain_password"] == SECRET
    assert client_security(**args) == read.security
    assert client_args(None) == {}


@pytest.mark.timeout(30)
def test_bad_security_options_are_refused_naming_them(pem_files: dict[str, str]) -> None:
    base = {"kafka.security.protocol": "SASL_SSL", "kafka.ssl.truststore.location":
            pem_files["ca"], "kafka.sasl.jaas.config": JAAS}  # fmt: skip
    for bad, match in (
        ({"kafka.ssl.keystore.password": SECRET}, r"option kafka\.ssl\.keystore\.password is "
         "not among the security options"),
        ({"kafka.sasl.kerberos.service.name": "kafka", "kafka.security.providers": "x"},
         r"options kafka\.sasl\.kerberos\.service\.name, kafka\.security\.providers are not"),
        ({"kafka.ssl.truststore.type": "JKS"}, r"kafka\.ssl\.truststore\.type='JKS': only PEM"),
        ({"kafka.security.protocol": "SASL_PLAINTEXT"}, "expected PLAINTEXT, SSL or SASL_SSL"),
        ({"kafka.sasl.mechanism": "GSSAPI"}, "sasl_mechanism 'GSSAPI'"),
        ({"kafka.ssl.truststore.location": "/nowhere/ca.pem"}, "/nowhere/ca.pem: no such file"),
        ({"kafka.sasl.jaas.config": ""}, r"kafka\.security\.protocol=SASL_SSL needs a user and "
         r"its password: kafka\.sasl\.jaas\.config"),
        ({"kafka.sasl.jaas.config": 'x required username="alice";'},
         "no sasl password for user 'alice'"),
        ({"kafka.security.protocol": "PLAINTEXT"}, "set security_protocol='SSL'"),
        ({"kafka.ssl.truststore.location": "", "kafka.security.protocol": "SSL"},
         "a SASL user is given: set security_protocol='SASL_SSL'"),
    ):  # fmt: skip
        options = {**base, **bad}
        for streaming in (False, True):
            with pytest.raises(OptionError, match=match) as refused:
                read_options({"bootstrap.servers": "h:1", "subscribe": "t", **options}, streaming)
            assert SECRET not in str(refused.value) and "w0rd" not in str(refused.value)
            with pytest.raises(OptionError, match=match) as refused:
                write_options({"bootstrap.servers": "h:1", "topic": "t", "checkpointLocation":
                               "/c", **options}, streaming)  # fmt: skip
            assert SECRET not in str(refused.value) and "w0rd" not in str(refused.value)
    with pytest.raises(OptionError, match="option kafka.ssl.no.such is not among"):
        read_options({"bootstrap.servers": "h:1", "subscribe": "t", "kafka.ssl.no.such": "1"},
                     False)  # fmt: skip


@pytest.mark.timeout(30)
def test_the_password_is_in_no_repr(pem_files: dict[str, str]) -> None:
    from annal.pipeline.source import AnnalBatchReader, _ranges

    for secret in ({"kafka.sasl.jaas.config": JAAS},
                   {"kafka.sasl.username": "alice", "kafka.sasl.password": SECRET}):  # fmt: skip
        secured = {"kafka.security.protocol": "SASL_SSL",
                   "kafka.ssl.truststore.location": pem_files["ca"], **secret}  # fmt: skip
        read, write = both(secured)
        ranges = _ranges(read, {}, {"t": {"0": 5, "1": 5}})
        shown = [repr(read), str(read), repr(write), repr(read.security), repr(ranges)]
        shown.append(repr(AnnalBatchReader(read).options))
        for text in shown:
            assert "alice" in text or "OffsetRange" in text
            assert SECRET not in text and "w0rd" not in text, text


@pytest.mark.timeout(30)
def test_the_mirror_job_takes_security_from_a_command_config(
    pem_files: dict[str, str], tmp_path: Path
) -> None:
    from annal.pipeline.job import build_parser, security_options

    config = tmp_path / "client.properties"
    config.write_text(
        "# Kafka's client names\nsecurity.protocol=SASL_SSL\n"
        f"ssl.truststore.location={pem_files['ca']}\n"
        "sasl.jaas.config="
        + JAAS.replace("\\", "\\\\")  # a properties file's escape
        + "\nbootstrap.servers=elsewhere:9092\n"
    )
    options = security_options(config)
    assert options == {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.jaas.config": JAAS,
                       "kafka.ssl.truststore.location": pem_files["ca"]}  # fmt: skip
    read, write = both(options)
    assert read.security == write.security and read.security.sasl_password == SECRET
    args = build_parser().parse_args(["--bootstrap-server", "h:1", "--source", "a", "--sink",
                                      "b", "--checkpoint", "/c", "--command-config",
                                      str(config)])  # fmt: skip
    assert args.command_config == config
    config.write_text("security.protocol=SASL_SSL\nssl.keystore.password=x\n")
    with pytest.raises(OptionError, match=r"client.properties: .*kafka\.ssl\.keystore\.password"):
        security_options(config)
