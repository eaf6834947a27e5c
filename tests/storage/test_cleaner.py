"""Log compaction against a dict model, tombstones, lag, collisions, crash safety."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from annal.storage import files
from annal.storage.cleaner import LogCleaner, OffsetMap, clean_log, describe_dirty_range
from annal.storage.config import LogConfig
from annal.storage.log import Log
from annal.storage.manager import LogManager, LogManagerConfig
from annal.storage.records import Record, encode_batch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logutil import FakeClock, open_log, read_all

DAY = 24 * 3600 * 1000


def put(log: Log, pairs: list[tuple[bytes, bytes | None]], timestamp: int) -> None:
    records = [Record(i, timestamp, k, v) for i, (k, v) in enumerate(pairs)]
    log.append_as_leader(encode_batch(records), 0)


def latest_by_key(records: list[Record]) -> dict[bytes | None, Record]:
    latest: dict[bytes | None, Record] = {}
    for r in records:
        latest[r.key] = r
    return latest


def compact(log: Log, clock: FakeClock, **kwargs: int) -> int:
    dirty = describe_dirty_range(log, 0, clock.now_ms)
    return clean_log(
        log, dirty.first_dirty_offset, dirty.first_uncleanable_offset, now_ms=clock.now_ms, **kwargs
    )


def test_keeps_last_value_of_every_key_with_offsets_and_order(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", clock, cleanup_policy="compact", segment_bytes=400)
    for round_ in range(6):
        put(log, [(b"k%d" % k, b"r%d-%d" % (round_, k)) for k in range(5)], clock.now_ms)
    log.roll()
    before = read_all(log)
    end = compact(log, clock)
    assert end == 30
    after = read_all(log)
    assert [(r.key, r.value) for r in after] == [(b"k%d" % k, b"r5-%d" % k) for k in range(5)]
    assert [r.offset for r in after] == [25, 26, 27, 28, 29]
    assert latest_by_key(after) == latest_by_key(before)
    assert log.log_end_offset == 30
    assert put(log, [(b"k0", b"x")], clock.now_ms) is None and log.log_end_offset == 31
    log.close()


def test_hash_collisions_never_drop_a_different_key(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", clock, cleanup_policy="compact", segment_bytes=300)
    for round_ in range(3):
        put(log, [(b"key-%d" % k, b"%d" % round_) for k in range(20)], clock.now_ms)
    log.roll()
    compact(log, clock, hash_fn=lambda key: 7)  # every key collides
    after = read_all(log)
    assert sorted(r.key for r in after if r.key) == sorted(b"key-%d" % k for k in range(20))
    assert {r.value for r in after} == {b"2"}
    log.close()


def test_offset_map_compares_keys() -> None:
    m = OffsetMap(10, hash_fn=lambda key: 1)
    m.put(b"a", 1)
    m.put(b"b", 2)
    m.put(b"a", 3)
    assert (m.get(b"a"), m.get(b"b"), m.get(b"c")) == (3, 2, None)
    assert len(m) == 2


def test_tombstones_kept_for_delete_retention_then_removed(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(
        tmp_path / "t-0",
        clock,
        cleanup_policy="compact",
        segment_bytes=300,
        delete_retention_ms=DAY,
    )
    put(log, [(b"a", b"1"), (b"b", b"1")], clock.now_ms)
    put(log, [(b"a", None)], clock.now_ms)
    log.roll()
    compact(log, clock)
    assert [(r.key, r.value) for r in read_all(log)] == [(b"b", b"1"), (b"a", None)]
    clock.advance(DAY + 1)
    compact(log, clock)
    assert [(r.key, r.value) for r in read_all(log)] == [(b"b", b"1")]
    log.close()


def test_min_compaction_lag_protects_young_segments(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(
        tmp_path / "t-0",
        clock,
        cleanup_policy="compact",
        segment_bytes=200,
        min_compaction_lag_ms=60_000,
    )
    put(log, [(b"a", b"old")], clock.now_ms - 120_000)
    log.roll()
    put(log, [(b"a", b"young")], clock.now_ms)
    log.roll()
    put(log, [(b"a", b"newest")], clock.now_ms)
    dirty = describe_dirty_range(log, 0, clock.now_ms)
    assert dirty.first_uncleanable_offset == 1  # the young segment starts there
    compact(log, clock)
    # the old value is not superseded within the cleanable range: nothing removed
    assert [r.value for r in read_all(log)] == [b"old", b"young", b"newest"]
    clock.advance(120_000)
    log.roll()
    compact(log, clock)
    assert [r.value for r in read_all(log)] == [b"newest"]
    log.close()


def test_dirty_ratio_threshold_and_checkpoint(tmp_path: Path) -> None:
    clock = FakeClock()
    config = LogConfig.from_properties(
        {"cleanup.policy": "compact", "segment.bytes": "300", "min.cleanable.dirty.ratio": "0.5"}
    )
    manager = LogManager(
        [tmp_path / "d1"],
        config,
        broker_id=1,
        settings=LogManagerConfig(cleaner_enable=False),
        time_ms=clock,
    )
    manager.startup()
    try:
        log = manager.get_or_create_log(files.TopicPartition("t", 0))
        for round_ in range(4):
            put(log, [(b"k%d" % k, b"%d" % round_) for k in range(3)], clock.now_ms)
        log.roll()
        cleaner = LogCleaner(manager, time_ms=clock)
        assert cleaner.clean_once()
        checkpoint = cleaner.first_dirty_offsets()
        assert checkpoint[files.TopicPartition("t", 0)] == 12
        assert (tmp_path / "d1" / files.CLEANER_CHECKPOINT).exists()
        # one small dirty batch on a large clean head: ratio below 0.5, nothing to do
        put(log, [(b"k0", b"x")], clock.now_ms)
        log.roll()
        assert describe_dirty_range(log, 12, clock.now_ms).dirty_ratio < 0.5
        assert not cleaner.clean_once()
    finally:
        manager.shutdown()


def test_producer_state_batches_survive_as_empty_batches(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", clock, cleanup_policy="compact")
    first = encode_batch(
        [Record(0, clock.now_ms, b"a", b"1")], producer_id=77, producer_epoch=1, base_sequence=0
    )
    log.append_as_leader(first, 0)
    put(log, [(b"a", b"2")], clock.now_ms)
    log.roll()
    compact(log, clock)
    from annal.storage.batch import iter_batches

    headers = list(iter_batches(log.read(0, 1 << 20)))
    assert headers[0].producer_id == 77 and headers[0].record_count == 0
    assert [r.value for r in read_all(log)] == [b"2"]
    log.close()


OPS = st.lists(
    st.tuples(st.integers(0, 12), st.one_of(st.none(), st.binary(min_size=1, max_size=30))),
    min_size=1,
    max_size=120,
)


@settings(
    max_examples=int(os.environ.get("ANNAL_MODEL_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    ops=OPS,
    batch_size=st.integers(1, 7),
    passes=st.integers(1, 3),
    lag_ms=st.sampled_from([0, 0, 5_000, 50_000]),
)
def test_compaction_matches_a_dict_model(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[int, bytes | None]],
    batch_size: int,
    passes: int,
    lag_ms: int,
) -> None:
    """Batches are one second apart; with a compaction lag the youngest stay dirty."""
    clock = FakeClock()
    directory = tmp_path_factory.mktemp("model") / "t-0"
    log = open_log(
        directory,
        clock,
        cleanup_policy="compact",
        segment_bytes=350,
        delete_retention_ms=DAY,
        min_compaction_lag_ms=lag_ms,
    )
    model: dict[bytes, tuple[int, bytes | None]] = {}
    offset = 0
    batches = list(range(0, len(ops), batch_size))
    for n, i in enumerate(batches):
        chunk = ops[i : i + batch_size]
        put(log, [(b"key%d" % k, v) for k, v in chunk], clock.now_ms - 1000 * (len(batches) - n))
        for k, v in chunk:
            model[b"key%d" % k] = (offset, v)
            offset += 1
    log.roll()
    before = read_all(log)
    uncleanable = describe_dirty_range(log, 0, clock.now_ms).first_uncleanable_offset
    for _ in range(passes):
        compact(log, clock)
    after = read_all(log)
    offsets = [r.offset for r in after]
    assert offsets == sorted(set(offsets)), "order or uniqueness broken"
    assert {(r.offset, r.key, r.value) for r in after} <= {
        (r.offset, r.key, r.value) for r in before
    }
    # every key's latest record (tombstones too, within delete.retention.ms) survives
    kept = {(r.offset, r.key) for r in after}
    assert all((o, k) in kept for k, (o, _) in model.items())
    # a record goes only when a later record of its key lies in the cleanable range
    latest_cleanable = latest_by_key([r for r in before if r.offset < uncleanable])
    for r in before:
        if (r.offset, r.key) not in kept:
            assert latest_cleanable[r.key].offset > r.offset
    if lag_ms == 0:
        assert {r.key: (r.offset, r.value) for r in after} == model
    # a reopen after compaction (crash, no clean shutdown) reads the same
    shutil.copytree(directory, directory.parent / "copy" / "t-0")
    log.close()
    again = Log.open(directory.parent / "copy" / "t-0", log.config)
    assert [(r.offset, r.key, r.value) for r in read_all(again)] == [
        (r.offset, r.key, r.value) for r in after
    ]
    again.close()


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.suffix == ".log"}


@pytest.mark.parametrize(
    "step", ["cleaned", "swap", "swap+some-deleted", "swap+all-deleted", "done"]
)
def test_crash_at_each_step_of_the_swap(tmp_path: Path, step: str) -> None:
    clock = FakeClock()
    config = LogConfig.from_properties({"cleanup.policy": "compact", "segment.bytes": "400"})
    live = tmp_path / "live" / "t-0"
    log = Log.open(live, config, time_ms=clock)
    for round_ in range(8):
        put(log, [(b"k%d" % k, b"%d-%d" % (round_, k)) for k in range(4)], clock.now_ms)
    log.roll()
    before_records = [(r.offset, r.key, r.value) for r in read_all(log)]
    before = snapshot(live)
    compact(log, clock)
    after_records = [(r.offset, r.key, r.value) for r in read_all(log)]
    log.close()
    after = snapshot(live)
    replaced = sorted(name for name in before if before[name] != after.get(name))
    outputs = sorted(name for name in after if after[name] != before.get(name))
    assert replaced and outputs

    crashed = tmp_path / "crash" / "t-0"
    crashed.mkdir(parents=True)
    for name, data in before.items():
        (crashed / name).write_bytes(data)
    if step == "cleaned":
        for name in outputs:
            (crashed / (name + files.CLEANED_SUFFIX)).write_bytes(after[name])
    elif step.startswith("swap"):
        for name in outputs:
            (crashed / (name + files.SWAP_SUFFIX)).write_bytes(after[name])
        doomed = replaced if step == "swap+all-deleted" else replaced[:1] if "some" in step else []
        for name in doomed:
            (crashed / name).rename(crashed / (name + files.DELETED_SUFFIX))
    else:
        for name in replaced:
            (crashed / name).unlink()
        for name, data in after.items():
            (crashed / name).write_bytes(data)
    recovered = Log.open(crashed, config, time_ms=clock)
    got = [(r.offset, r.key, r.value) for r in read_all(recovered)]
    expected = before_records if step == "cleaned" else after_records
    assert got == expected
    assert not [p for p in crashed.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]
    recovered.close()
