"""Many znodes in one pipelined round: the controller's reads and writes of
partition states and topic assignments.

A controller that moves a thousand leaderships must not wait for a thousand
round trips one after another.  As Kafka's controller does, every request of
a batch is sent at once with kazoo's asynchronous API and the answers are
collected afterwards, so a batch costs about one round trip however many
znodes it names.  Each write is still its own multi-op, fenced by the check of
``/controller_epoch`` at the controller's zkVersion and conditioned on the
state's own zkVersion (``ZkClient._fenced``, one znode at a time, does the
same): a stale state fails alone and is answered as such, while a failed
epoch check fails the whole batch with ``ControllerMovedError``.

A batch that loses the connection part way fails whole with ``ZkError``; what
was written before stays written (each write is conditional, so the caller
reads again and decides again).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)

from annal.topic_partition import TopicPartition

from . import layout
from .client import ControllerEpoch, StaleVersionError, ZkClient, ZkError, check_fence
from .layout import PartitionState, TopicAssignment

K = TypeVar("K")

# A partition's state and its znode's version, as read.
Versioned = tuple[PartitionState, int]
# A write's outcome: the znode's new version, or why it was not written.
Written = int | StaleVersionError


class BatchedZk:
    """The batched reads and writes; ``zk`` serves everything else."""

    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk

    # -- reads -------------------------------------------------------------------

    def _get_many(self, paths: Mapping[K, str]) -> dict[K, tuple[bytes, int]]:
        """(data, version) of every path that exists, keyed as given."""
        kazoo = self.zk.kazoo
        with _failing("read"):
            pending = [(key, kazoo.get_async(path)) for key, path in paths.items()]
            found: dict[K, tuple[bytes, int]] = {}
            for key, answer in pending:
                try:
                    data, stat = answer.get()
                except NoNodeError:
                    continue
                found[key] = (bytes(data), int(stat.version))
            return found

    def partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, Versioned]:
        """The state of each partition that has one."""
        raw = self._get_many({tp: layout.partition_state_path(*tp) for tp in partitions})
        return {
            tp: (PartitionState.decode(tp.topic, tp.partition, data), version)
            for tp, (data, version) in raw.items()
        }

    def topic_assignments(self, topics: Iterable[str]) -> dict[str, tuple[TopicAssignment, int]]:
        """The assignment and its znode's version of each topic that exists."""
        raw = self._get_many({topic: layout.topic_path(topic) for topic in topics})
        return {
            topic: (TopicAssignment.decode(topic, data), version)
            for topic, (data, version) in raw.items()
        }

    def topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        """Each topic's config overrides ({} for a topic without any)."""
        names = list(topics)
        raw = self._get_many({topic: layout.topic_config_path(topic) for topic in names})
        return {
            topic: layout.decode_topic_config(topic, raw[topic][0]) if topic in raw else {}
            for topic in names
        }

    # -- a leader's writes (not fenced: leaders change ISRs on their own) -------------

    def write_partition_states(
        self, writes: Sequence[tuple[TopicPartition, PartitionState, int]]
    ) -> list[int | Exception]:
        """Each state written if its znode is still at the version given, in one
        pipelined round: for each, in order, the new version or why it was not
        written (StaleVersionError when the version moved or the znode is gone)."""
        kazoo = self.zk.kazoo
        with _failing("write"):
            pending = [
                (tp, kazoo.set_async(layout.partition_state_path(*tp), state.encode(), version))
                for tp, state, version in writes
            ]
            out: list[int | Exception] = []
            for tp, answer in pending:
                try:
                    out.append(int(answer.get().version))
                except BadVersionError:
                    out.append(StaleVersionError(f"{_name(tp)} changed since it was read"))
                except NoNodeError:
                    out.append(StaleVersionError(f"{_name(tp)} no longer exists"))
            return out

    # -- topic creation (an admin's, not fenced) ------------------------------------

    def create_topics(
        self, topics: Mapping[str, tuple[TopicAssignment, Mapping[str, str]]]
    ) -> dict[str, bool]:
        """Create many topics in two rounds: every config override first, then
        every assignment (the controller acts on those).  False for a topic whose
        assignment existed already."""
        kazoo = self.zk.kazoo
        with _failing("create"):
            configs = [
                kazoo.create_async(layout.topic_config_path(t), layout.encode_topic_config(c),
                                   makepath=True)
                for t, (_, c) in topics.items() if c
            ]  # fmt: skip
            for answer in configs:
                try:
                    answer.get()
                except NodeExistsError:
                    pass  # left by an earlier attempt: the assignment decides
            made = [
                (t, kazoo.create_async(layout.topic_path(t), a.encode(), makepath=True))
                for t, (a, _) in topics.items()
            ]
            created: dict[str, bool] = {}
            for topic, answer in made:
                try:
                    answer.get()
                    created[topic] = True
                except NodeExistsError:
                    created[topic] = False
            return created

    # -- fenced writes -----------------------------------------------------------

    def update_partition_states(
        self, states: Mapping[TopicPartition, Versioned], fence: ControllerEpoch
    ) -> dict[TopicPartition, Written]:
        """Write each state if its znode is still at the version given."""
        ops = {
            tp: partial(_set_data, layout.partition_state_path(*tp), s.encode(), v)
            for tp, (s, v) in states.items()
        }
        return self._fenced_many(ops, fence, lambda stat: int(stat.version))

    def create_partition_states(
        self, states: Mapping[TopicPartition, PartitionState], fence: ControllerEpoch
    ) -> dict[TopicPartition, Written]:
        """Create each partition's state znode (version 0), with the parents it
        lacks; a state that exists already is answered StaleVersionError."""
        topics = sorted({tp.topic for tp in states})
        parents = [layout.partitions_path(t) for t in topics]
        parents += [layout.partition_path(*tp) for tp in sorted(states)]
        for level in (parents[: len(topics)], parents[len(topics) :]):
            self._fenced_many({path: partial(_create, path, b"") for path in level}, fence, _zero)
        ops = {
            tp: partial(_create, layout.partition_state_path(*tp), s.encode())
            for tp, s in states.items()
        }
        return self._fenced_many(ops, fence, _zero)

    def delete_trees(self, roots: Sequence[str], fence: ControllerEpoch) -> None:
        """Delete each root and everything under it (a root that does not exist
        is skipped): the tree is listed level by level, each level in one round,
        then deleted deepest level first, each level in one round of fenced
        multi-ops."""
        kazoo = self.zk.kazoo
        levels = [list(roots)]
        with _failing("listing"):
            while levels[-1]:
                asked = [(path, kazoo.get_children_async(path)) for path in levels[-1]]
                below = []
                for path, answer in asked:
                    try:
                        below += [f"{path}/{child}" for child in answer.get()]
                    except NoNodeError:
                        continue
                levels.append(below)
        for level in reversed(levels):
            if level:  # a znode gone meanwhile is answered stale, and that is fine
                self._fenced_many({path: partial(_delete, path) for path in level}, fence, _zero)

    def _fenced_many(
        self,
        ops: Mapping[K, Callable[[Any], object]],
        fence: ControllerEpoch,
        version_of: Callable[[Any], int],
    ) -> dict[K, Written]:
        """One fenced multi-op per key, all sent before any answer is read."""
        kazoo = self.zk.kazoo
        with _failing("write"):
            pending = []
            for key, build in ops.items():
                txn = kazoo.transaction()
                txn.check(layout.CONTROLLER_EPOCH, fence.zk_version)
                build(txn)
                pending.append((key, txn.commit_async()))
            answers = [(key, list(answer.get())) for key, answer in pending]
        out: dict[K, Written] = {}
        for key, (check, result) in answers:
            check_fence(check, fence)
            if isinstance(result, BadVersionError):
                out[key] = StaleVersionError(f"{_name(key)} changed since it was read")
            elif isinstance(result, NoNodeError):
                out[key] = StaleVersionError(f"{_name(key)} no longer exists")
            elif isinstance(result, NodeExistsError):
                out[key] = StaleVersionError(f"{_name(key)} exists already")
            elif isinstance(result, Exception):
                raise ZkError(f"ZooKeeper multi-op on {_name(key)} failed: {type(result).__name__}")
            else:
                out[key] = version_of(result)
        return out


@contextmanager
def _failing(what: str) -> Iterator[None]:
    """A batch that kazoo cannot finish (the connection lost part way) fails
    whole, as ZkError."""
    try:
        yield
    except KazooException as exc:
        raise ZkError(f"ZooKeeper batched {what} failed: {type(exc).__name__} {exc}") from exc


def _set_data(path: str, data: bytes, version: int, txn: Any) -> None:
    txn.set_data(path, data, version)


def _create(path: str, data: bytes, txn: Any) -> None:
    txn.create(path, data)


def _delete(path: str, txn: Any) -> None:
    txn.delete(path)


def _zero(_: object) -> int:
    return 0


def _name(key: object) -> str:
    if isinstance(key, TopicPartition):
        return f"the state of {key.topic}-{key.partition}"
    return str(key)


def stale(results: Mapping[K, Written]) -> Sequence[K]:
    """The keys whose write was refused."""
    return [key for key, result in results.items() if isinstance(result, StaleVersionError)]
