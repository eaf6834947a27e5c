"""The znode layout (docs/architecture.md): paths and JSON, byte for byte."""

from __future__ import annotations

import json

import pytest
from annal.zk import layout
from annal.zk.layout import BrokerRegistration, LayoutError, PartitionState, TopicAssignment


def test_paths() -> None:
    assert layout.broker_path(3) == "/brokers/ids/3"
    assert layout.topic_path("orders") == "/brokers/topics/orders"
    assert layout.partition_state_path("orders", 2) == "/brokers/topics/orders/partitions/2/state"
    assert layout.delete_topic_path("orders") == "/admin/delete_topics/orders"
    assert layout.topic_config_path("orders") == "/config/topics/orders"
    assert layout.consumer_owner_path("g", "orders", 1) == "/consumers/g/owners/orders/1"
    assert layout.consumer_offset_path("g", "orders", 1) == "/consumers/g/offsets/orders/1"
    for bad in ["", ".", "..", "a/b", "x" * 250, "spaces here"]:
        with pytest.raises(LayoutError, match="illegal topic name"):
            layout.topic_path(bad)


def test_json_shapes() -> None:
    registration = BrokerRegistration(1, "10.0.0.5", 9092, None, 1_700_000_000_000)
    assert json.loads(registration.encode()) == {
        "version": 5,
        "host": "10.0.0.5",
        "port": 9092,
        "endpoints": ["GRPC://10.0.0.5:9092"],
        "listener_security_protocol_map": {"GRPC": "PLAINTEXT"},
        "rack": None,
        "timestamp": "1700000000000",
    }
    assert BrokerRegistration.decode(1, registration.encode()) == registration
    both = BrokerRegistration(1, "10.0.0.5", 9092, "r1", 1, kafka_host="k.example", kafka_port=9093)
    encoded = json.loads(both.encode())
    assert encoded["endpoints"] == ["GRPC://10.0.0.5:9092", "PLAINTEXT://k.example:9093"]
    protocols = encoded["listener_security_protocol_map"]
    assert protocols == {"GRPC": "PLAINTEXT", "PLAINTEXT": "PLAINTEXT"}
    assert BrokerRegistration.decode(1, both.encode()) == both
    assert both.kafka_endpoint == "k.example:9093" and registration.kafka_endpoint is None
    assignment = TopicAssignment({0: (1, 2, 3), 1: (2, 3, 1)})
    assert json.loads(assignment.encode()) == {
        "version": 2,
        "partitions": {"0": [1, 2, 3], "1": [2, 3, 1]},
        "adding_replicas": {},
        "removing_replicas": {},
    }
    assert TopicAssignment.decode("t", assignment.encode()).partitions == {
        0: (1, 2, 3),
        1: (2, 3, 1),
    }
    state = PartitionState(leader=2, leader_epoch=5, isr=(2, 3), controller_epoch=7)
    assert json.loads(state.encode()) == {
        "controller_epoch": 7,
        "leader": 2,
        "version": 1,
        "leader_epoch": 5,
        "isr": [2, 3],
    }
    assert PartitionState.decode("t", 0, state.encode()) == state
    assert json.loads(layout.encode_controller(4))["brokerid"] == 4
    assert layout.decode_controller_epoch(layout.encode_controller_epoch(12)) == 12
    cluster_id = layout.new_cluster_id()
    assert len(cluster_id) == 22 and "=" not in cluster_id
    assert json.loads(layout.encode_cluster_id(cluster_id)) == {"version": "1", "id": cluster_id}


def test_bad_znode_content_names_the_znode() -> None:
    with pytest.raises(LayoutError, match="/brokers/ids/3 does not hold JSON"):
        BrokerRegistration.decode(3, b"not json")
    with pytest.raises(LayoutError, match="has no 'leader' field"):
        PartitionState.decode("t", 0, b'{"isr": []}')
