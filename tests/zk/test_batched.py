"""The controller's batched ZooKeeper rounds against a real ZooKeeper: many
states read and written at once, each write fenced by the controller epoch
and conditioned on its own version, and whole topic trees deleted."""

from __future__ import annotations

import pytest
from annal.zk import layout
from annal.zk.batched import BatchedZk, stale
from annal.zk.client import ControllerMovedError, StaleVersionError, ZkClient
from annal.zk.layout import PartitionState, TopicAssignment

from annal.topic_partition import TopicPartition


@pytest.mark.timeout(60)
def test_many_states_in_a_few_rounds(zk_connect: str) -> None:
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        term = zk.register_controller(1)
        assert term is not None
        batched = BatchedZk(zk)
        zk.create_topic("wide", TopicAssignment({p: (1, 2) for p in range(500)}),
                        {"retention.ms": "1000"})  # fmt: skip
        keys = [TopicPartition("wide", p) for p in range(500)]
        assert batched.partition_states(keys) == {}  # none yet
        created = batched.create_partition_states(
            {tp: PartitionState(1, 0, (1, 2), term.epoch) for tp in keys}, term
        )
        assert set(created.values()) == {0}
        again = batched.create_partition_states({keys[0]: PartitionState(2, 0, (2,), 1)}, term)
        assert isinstance(again[keys[0]], StaleVersionError)

        # one state moved on meanwhile: its write alone is refused
        zk.update_partition_state("wide", 7, PartitionState(1, 1, (1,), term.epoch), 0)
        written = batched.update_partition_states(
            {tp: (PartitionState(2, 1, (2,), term.epoch), 0) for tp in keys}, term
        )
        assert stale(written) == [keys[7]]
        read = batched.partition_states(keys)
        assert read[keys[0]] == (PartitionState(2, 1, (2,), term.epoch), 1)
        assert read[keys[7]] == (PartitionState(1, 1, (1,), term.epoch), 1)
        assert batched.topic_assignments(["wide", "none"])["wide"][1] == 0
        assert batched.topic_configs(["wide", "none"]) == {
            "wide": {"retention.ms": "1000"}, "none": {}
        }  # fmt: skip

        batched.delete_trees([layout.topic_path("wide"), layout.topic_config_path("wide"),
                              layout.delete_topic_path("wide")], term)  # fmt: skip
        assert zk.get(layout.topic_path("wide")) is None
        assert zk.get(layout.topic_config_path("wide")) is None


@pytest.mark.timeout(60)
def test_a_deposed_controllers_batch_writes_nothing(zk_connect: str) -> None:
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        term = zk.register_controller(1)
        assert term is not None
        zk.create_topic("fenced", TopicAssignment({0: (1,), 1: (1,)}))
        keys = [TopicPartition("fenced", p) for p in range(2)]
        BatchedZk(zk).create_partition_states(
            {tp: PartitionState(1, 0, (1,), term.epoch) for tp in keys}, term
        )
        epoch = zk.get_controller_epoch()
        assert epoch is not None
        zk.kazoo.set(layout.CONTROLLER_EPOCH, layout.encode_controller_epoch(term.epoch + 1),
                     version=epoch.zk_version)  # fmt: skip
        with pytest.raises(ControllerMovedError):
            BatchedZk(zk).update_partition_states(
                {tp: (PartitionState(-1, 1, (1,), term.epoch), 0) for tp in keys}, term
            )
        assert BatchedZk(zk).partition_states(keys)[keys[0]][0].leader == 1


@pytest.mark.timeout(60)
def test_many_topics_created_in_two_rounds(zk_connect: str) -> None:
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        zk.create_topic("taken", TopicAssignment({0: (1,)}))
        wanted = {f"made-{i}": (TopicAssignment({0: (1,), 1: (2,)}), {}) for i in range(200)}
        wanted["configured"] = (TopicAssignment({0: (1,)}), {"cleanup.policy": "compact"})
        wanted["taken"] = (TopicAssignment({0: (2,)}), {})
        made = BatchedZk(zk).create_topics(wanted)
        assert made.pop("taken") is False and set(made.values()) == {True}
        assert zk.get_topic_config("configured") == {"cleanup.policy": "compact"}
        found = zk.get_topic_assignment("made-199")
        assert found is not None and dict(found[0].partitions) == {0: (1,), 1: (2,)}
        taken = zk.get_topic_assignment("taken")
        assert taken is not None and dict(taken[0].partitions) == {0: (1,)}  # left as it was


@pytest.mark.timeout(60)
def test_a_leaders_isr_writes_go_in_one_round_each_on_its_own_version(zk_connect: str) -> None:
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        zk.create_topic("isr", TopicAssignment({p: (1, 2) for p in range(3)}))
        for p in range(3):
            zk.create_partition_state("isr", p, PartitionState(1, 0, (1,), 1))
        zk.update_partition_state("isr", 1, PartitionState(1, 1, (1,), 1), 0)  # moved on
        got = BatchedZk(zk).write_partition_states(
            [(TopicPartition("isr", p), PartitionState(1, 0, (1, 2), 1), 0) for p in range(3)]
            + [(TopicPartition("isr", 9), PartitionState(1, 0, (1,), 1), 0)]
        )
        assert got[0] == 1 and got[2] == 1
        assert isinstance(got[1], StaleVersionError) and isinstance(got[3], StaleVersionError)
        found = zk.get_partition_state("isr", 0)
        assert found is not None and found[0].isr == (1, 2)
