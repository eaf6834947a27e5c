"""Broker configuration: properties files, overrides, checks, derived topic defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
from annal.broker.config import AUTHORIZERS, BrokerConfig, ConfigError, Listener, parse_properties
from tls_certs import issue, make_ca

BASE = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181/annal"}


def test_properties_file_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a comment\n"
        "broker.id=3\n"
        "zookeeper.connect: zk1:2181,zk2:2181/annal\n"
        "listeners=GRPC://0.0.0.0:9092\n"
        "advertised.listeners=GRPC://broker3.example:9092\n"
        "log.dirs=/data/a, /data/b\n"
        "log.retention.hours=1\n"
        "log.segment.bytes=\\\n"
        "   1048576\n"
    )
    config = BrokerConfig.load(path, {"num.partitions": "6"})
    assert config.broker_id == 3
    assert config.zookeeper_connect == "zk1:2181,zk2:2181/annal"
    assert config.listener == Listener("0.0.0.0", 9092)
    assert config.advertised_listener == Listener("broker3.example", 9092)
    assert config.log_dirs == ("/data/a", "/data/b")
    assert config.num_partitions == 6
    log = config.log_config()
    assert log.retention_ms == 3600 * 1000
    assert log.segment_bytes == 1048576


def test_defaults_follow_kafka() -> None:
    config = BrokerConfig.from_properties(BASE)
    assert config.listener.port == 9092
    assert config.log_dirs == ("/tmp/annal-logs",)
    assert config.default_replication_factor == 1
    assert config.offsets_topic_num_partitions == 50
    assert config.zookeeper_session_timeout_ms == 18000
    assert config.num_recovery_threads_per_data_dir == 1
    log = config.log_config()
    assert log.retention_ms == 168 * 3600 * 1000 and log.segment_bytes == 1 << 30


def test_retention_precedence() -> None:
    ms = BrokerConfig.from_properties({**BASE, "log.retention.ms": "5", "log.retention.hours": "9"})
    assert ms.log_config().retention_ms == 5
    minutes = BrokerConfig.from_properties({**BASE, "log.retention.minutes": "2"})
    assert minutes.log_config().retention_ms == 120_000


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"broker.idd": "1"}, "unknown broker config 'broker.idd' (did you mean 'broker.id'?)"),
        ({"broker.id": "one"}, "broker.id='one': expected an integer"),
        ({"broker.id": "-2"}, "broker.id='-2': must be at least 0"),
        ({"listeners": "GRPC://x:1,http://x:2"}, "names HTTP://, which listener.security.pro"),
        ({"listeners": "GRPC://x:1,a-b://x:2"}, "listeners='a-b://x:2': expected NAME://host:port"),
        ({"listeners": "GRPC://x:99999"}, "port 0-65535"),
        ({"auto.create.topics.enable": "yes"}, "expected true or false"),
        ({"log.cleanup.policy": "shred"}, "expected delete, compact or compact,delete"),
        ({"log.segment.bytes": "10"}, "must be at least 14"),
        ({"num.recovery.threads.per.data.dir": "0"}, "must be at least 1"),
    ],
)
def test_bad_settings_are_named(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_properties({**BASE, **props})
    assert message in str(info.value)


def test_required_settings() -> None:
    with pytest.raises(ConfigError, match="broker.id is required"):
        BrokerConfig.from_properties({"zookeeper.connect": "x:1"})
    with pytest.raises(ConfigError, match="zookeeper.connect is required"):
        BrokerConfig.from_properties({"broker.id": "1"})


def test_properties_syntax_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"server.properties: not a properties file"):
        parse_properties("a=1\nb=\\uZZZZ\n", "server.properties")
    with pytest.raises(ConfigError, match="cannot read config file"):
        BrokerConfig.load(tmp_path / "missing.properties")


def test_the_whole_java_properties_format() -> None:
    text = (
        "# a comment\n! another\n"
        "zookeeper.connect localhost:2181\n"  # whitespace separates too
        "log.dirs : /var/a,\\\n    /var/b\n"  # a continuation line
        "broker.id=\\u0037\n"  # a unicode escape
        "key\\ with\\ spaces=v\n"
    )
    assert parse_properties(text) == {
        "zookeeper.connect": "localhost:2181",
        "log.dirs": "/var/a,/var/b",
        "broker.id": "7",
        "key with spaces": "v",
    }


# A broker file as Kafka 2.x ships it, comments left out.
STOCK_SERVER_PROPERTIES = """
broker.id=0
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kafka-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
zookeeper.connect=localhost:2181
zookeeper.connection.timeout.ms=18000
group.initial.rebalance.delay.ms=0
"""


def test_a_stock_kafka_server_properties_loads_with_its_unused_settings_named(
    tmp_path: Path,
) -> None:
    path = tmp_path / "server.properties"
    path.write_text(STOCK_SERVER_PROPERTIES)
    config = BrokerConfig.load(path)
    assert config.broker_id == 0 and config.num_partitions == 1
    assert config.num_recovery_threads_per_data_dir == 1
    assert config.ignored == (
        "num.io.threads",
        "num.network.threads",
        "socket.receive.buffer.bytes",
        "socket.send.buffer.bytes",
    )
    # the transaction log's settings are taken (docs/transactions.md)
    assert config.transaction_state_log_replication_factor == 1
    assert config.transaction_state_log_min_isr == 1
    with pytest.raises(ConfigError, match="did you mean 'num.partitions'"):
        BrokerConfig.load(path, {"num.partition": "3"})  # unknown stays an error


def test_a_kafka_protocol_listener_beside_grpc() -> None:
    config = BrokerConfig.from_properties(
        {
            **BASE,
            "listeners": "GRPC://0.0.0.0:9092,PLAINTEXT://0.0.0.0:9093",
            "advertised.listeners": "GRPC://b1.example:9092,PLAINTEXT://b1.example:19093",
        }
    )
    assert config.listener == Listener("0.0.0.0", 9092)
    assert config.kafka_listener == Listener("0.0.0.0", 9093, "PLAINTEXT")
    assert config.advertised_listener == Listener("b1.example", 9092)
    assert config.kafka_advertised_listener == Listener("b1.example", 19093, "PLAINTEXT")
    only_grpc = BrokerConfig.from_properties(
        {**BASE, "listeners": "GRPC://h:1,PLAINTEXT://h:2", "advertised.listeners": "GRPC://a:1"}
    )
    assert only_grpc.kafka_advertised_listener == Listener("h", 2, "PLAINTEXT")
    assert BrokerConfig.from_properties(BASE).kafka_listener is None


@pytest.mark.parametrize(
    ("listeners", "advertised", "message"),
    [
        ("PLAINTEXT://:9093", None, "a GRPC:// or GRPCS:// listener is required"),
        ("GRPC://:1,GRPC://:2", None, "names GRPC twice"),
        ("GRPC://:1,GRPCS://:2", None, "names GRPCS and GRPC"),
        ("GRPCS://:1", None, "a GRPCS:// listener needs ssl.keystore.location"),
        ("GRPC://:1", "PLAINTEXT://h:2", "advertised.listeners names PLAINTEXT, which listeners"),
        ("GRPC://:1,SSL://:2", None, "SSL://:2: a TLS listener needs ssl.keystore.location"),
        ("GRPC://:1,SASL_PLAINTEXT://:2,sasl_plaintext://:3", None, "names SASL_PLAINTEXT twice"),
    ],
)
def test_bad_listener_lists_are_named(listeners: str, advertised: str | None, message: str) -> None:
    props = {**BASE, "listeners": listeners}
    if advertised is not None:
        props["advertised.listeners"] = advertised
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_properties(props)


def test_tls_settings_are_checked(tmp_path: Path) -> None:
    keystore = tmp_path / "broker.pem"
    issue(make_ca("annal test CA"), "broker").write_keystore(keystore)  # read when used
    tls = {**BASE, "listeners": "GRPCS://h:1", "ssl.keystore.location": str(keystore)}
    config = BrokerConfig.from_properties(tls)
    assert config.tls is not None and config.tls.client_auth == "none"
    assert config.inter_broker_security().tls
    assert not BrokerConfig.from_properties(BASE).inter_broker_security().tls
    with pytest.raises(ConfigError, match="ssl.client.auth=required needs ssl.truststore"):
        BrokerConfig.from_properties({**tls, "ssl.client.auth": "required"})
    with pytest.raises(ConfigError, match="ssl.truststore.location='/nope': no such file"):
        BrokerConfig.from_properties({**tls, "ssl.truststore.location": "/nope"})
    with pytest.raises(ConfigError, match="annal reads PEM files only"):
        BrokerConfig.from_properties({**tls, "ssl.keystore.type": "JKS"})
    with pytest.raises(ConfigError, match="expected none, requested or required"):
        BrokerConfig.from_properties({**tls, "ssl.client.auth": "maybe"})


def test_followers_fetch_over_the_kafka_listener_unless_told_or_tls(tmp_path: Path) -> None:
    both = {**BASE, "listeners": "GRPC://h:1,PLAINTEXT://h:2"}
    assert BrokerConfig.from_properties(both).replica_fetch_over_kafka
    assert BrokerConfig.from_properties(BASE).replica_fetch_over_kafka  # the leaders' listeners
    told = {**both, "inter.broker.listener.name": "grpc"}
    assert not BrokerConfig.from_properties(told).replica_fetch_over_kafka
    keystore = tmp_path / "broker.pem"
    keystore.write_text("-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n")
    tls = {
        **both,
        "listeners": "GRPCS://h:1,PLAINTEXT://h:2",
        "ssl.keystore.location": str(keystore),
    }
    assert not BrokerConfig.from_properties(tls).replica_fetch_over_kafka
    for props, message in [
        ({**tls, "inter.broker.listener.name": "PLAINTEXT"}, "would copy records unencrypted"),
        ({**tls, "inter.broker.listener.name": "GRPC"}, "the gRPC listener is GRPCS://h:1"),
        ({**BASE, "inter.broker.listener.name": "PLAINTEXT"}, "has no PLAINTEXT:// listener"),
        ({**both, "inter.broker.listener.name": "SSL"}, "listeners has no SSL:// listener"),
    ]:
        with pytest.raises(ConfigError, match=message):
            BrokerConfig.from_properties(props)


def test_several_kafka_listeners_each_with_its_security_protocol(tmp_path: Path) -> None:
    keystore = tmp_path / "broker.pem"
    keystore.write_text("-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n")
    config = BrokerConfig.from_properties(
        {
            **BASE,
            "listeners": "GRPC://:1,CLIENT://:2,INTERNAL://:3,SASL_PLAINTEXT://:4",
            "advertised.listeners": "CLIENT://public.example:2",
            "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:PLAINTEXT,"
            "SASL_PLAINTEXT:SASL_PLAINTEXT",
            "ssl.keystore.location": str(keystore),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
            "inter.broker.listener.name": "internal",
        }
    )
    found = {k.name: k for k in config.kafka_listeners}
    assert [(k.name, k.security_protocol) for k in config.kafka_listeners] == [
        ("CLIENT", "SASL_SSL"), ("INTERNAL", "PLAINTEXT"), ("SASL_PLAINTEXT", "SASL_PLAINTEXT"),
    ]  # fmt: skip
    assert found["CLIENT"].advertised.host == "public.example"
    assert found["CLIENT"].tls is not None and found["CLIENT"].sasl_mechanisms == ("SCRAM-SHA-512",)
    assert found["SASL_PLAINTEXT"].sasl_mechanisms == ("PLAIN",)
    assert found["INTERNAL"].tls is None and not found["INTERNAL"].sasl
    assert config.kafka_listener is not None and config.kafka_listener.port == 3
    assert config.inter_broker_listener_name == "INTERNAL" and config.replica_fetch_over_kafka


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"listener.security.protocol.map": "A:TLS"}, "'TLS' is not a security protocol"),
        ({"listeners": "GRPC://:1,SASL_SSL://:2"}, "a TLS listener needs ssl.keystore"),
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "GSSAPI not supported"),
        ({"listener.name.nope.ssl.client.auth": "required"}, "no listener named NOPE"),
        ({"listeners": "GRPC://:1,PLAINTEXT://:2", "listener.name.plaintext.log.dirs": "/x"},
         "'log.dirs' is not set per listener"),
        ({"authorizer.class.name": "com.example.Mine"}, "annal's authorizer is Kafka's ACL"),
        ({"listeners": "GRPC://:1,SASL_PLAINTEXT://:2",
          "inter.broker.listener.name": "SASL_PLAINTEXT"},
         r"brokers log in to each other with SCRAM-SHA-256; set "
         r"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config"),
        ({"listeners": "GRPC://:1,SASL_PLAINTEXT://:2",
          "inter.broker.listener.name": "SASL_PLAINTEXT",
          "sasl.jaas.config": 'x required username="b";'}, "the one given lacks them"),
        ({"listeners": "GRPC://:1,SASL_PLAINTEXT://:2",
          "inter.broker.listener.name": "SASL_PLAINTEXT",
          "sasl.mechanism.inter.broker.protocol": "PLAIN"},
         "sasl.mechanism.inter.broker.protocol=PLAIN: listener SASL_PLAINTEXT offers"),
        ({"sasl.mechanism.inter.broker.protocol": "PLAIN,SCRAM-SHA-256"}, "one mechanism"),
        ({"listeners": "GRPC://:1,SASL_SSL://:2",
          "listener.name.sasl_ssl.gssapi.sasl.jaas.config": "x"},
         "'gssapi.sasl.jaas.config' is not set per listener"),
    ],
)  # fmt: skip
def test_bad_security_settings_are_named(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_properties({**BASE, **props})


def test_kafka_authorizer_names_and_super_users() -> None:
    for name in AUTHORIZERS:
        config = BrokerConfig.from_properties(
            {**BASE, "authorizer.class.name": name, "super.users": "User:admin; User:broker-1"}
        )
        assert config.authorizer == name
        assert config.super_users == {"User:admin", "User:broker-1"}
        assert not config.allow_everyone_if_no_acl_found


def test_followers_log_in_to_a_secured_inter_broker_listener(tmp_path: Path) -> None:
    keystore = tmp_path / "broker.pem"
    keystore.write_text("-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    props = {
        **BASE,
        "listeners": "GRPCS://:1,SASL_SSL://:2",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.location": str(ca),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "inter.broker.listener.name": "SASL_SSL",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="broker" password="se\\"cret";',
    }  # fmt: skip
    config = BrokerConfig.from_properties(props)
    security = config.replica_kafka_security
    assert config.replica_fetch_over_kafka and security is not None
    assert (security.protocol, security.cafile, security.certfile) == (
        "SASL_SSL", str(ca), str(keystore),
    )  # fmt: skip
    assert security.login is not None and security.check_hostname
    assert (security.login.mechanism, security.login.username) == ("SCRAM-SHA-512", "broker")
    assert security.login.password == 'se"cret'
    assert 'se"cret' not in repr(config.replica_kafka_security)
    plain = BrokerConfig.from_properties(
        {**props, "sasl.mechanism.inter.broker.protocol": "PLAIN",
         "sasl.jaas.config": 'x required username="b2" password="p2";',
         "ssl.endpoint.identification.algorithm": ""}
    )  # fmt: skip
    assert plain.replica_kafka_security is not None
    assert plain.replica_kafka_security.login is not None
    assert plain.replica_kafka_security.login.username == "b2"
    assert not plain.replica_kafka_security.check_hostname
    # gRPC over TLS refuses a follower listener without it, with SASL or not
    del props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    for listener in ("SASL_PLAINTEXT", "PLAINTEXT"):
        with pytest.raises(ConfigError, match="replicas would copy records unencrypted"):
            BrokerConfig.from_properties(
                {**props, "listeners": f"GRPCS://:1,{listener}://:2",
                 "inter.broker.listener.name": listener}
            )  # fmt: skip
