"""The console sampler's maths (lag, produce and consume rates) and its ring buffer."""

from __future__ import annotations

import threading

import pytest
from annal.webconsole import sampler as s

from annal.topic_partition import TopicPartition as TP

pytestmark = pytest.mark.timeout(30)


def sample(at: float, ends: dict[TP, int], **committed: dict[TP, int]) -> s.Sample:
    return s.Sample(at, ends, committed)


def test_lag_is_log_end_minus_committed_never_negative() -> None:
    ends = {TP("t", 0): 100, TP("t", 1): 50, TP("t", 2): 7}
    committed = {TP("t", 0): 90, TP("t", 1): 60, TP("t", 2): -1, TP("gone", 0): 3}
    assert s.partition_lag(ends, committed) == {TP("t", 0): 10, TP("t", 1): 0}
    assert s.total_lag(ends, committed) == 10
    assert s.total_lag({}, {}) == 0


def test_produce_rate_per_topic_between_two_samples() -> None:
    a = sample(100.0, {TP("t", 0): 10, TP("t", 1): 0, TP("u", 0): 5})
    b = sample(102.0, {TP("t", 0): 30, TP("t", 1): 10, TP("u", 0): 5, TP("new", 0): 99})
    assert s.produce_rate(a, b, "t") == 15.0
    assert s.produce_rates(a, b) == {"new": 0.0, "t": 15.0, "u": 0.0}


def test_offsets_going_backwards_count_as_no_progress() -> None:
    a = sample(0.0, {TP("t", 0): 500}, g={TP("t", 0): 400})
    b = sample(5.0, {TP("t", 0): 20}, g={TP("t", 0): 0})  # recreated topic, reset group
    assert s.produce_rate(a, b, "t") == 0.0
    assert s.consume_rate(a, b, "g") == 0.0


def test_rate_over_no_time_is_zero() -> None:
    a = sample(7.0, {TP("t", 0): 1})
    assert s.produce_rate(a, sample(7.0, {TP("t", 0): 9}), "t") == 0.0
    assert s.rate(10, 0) == 0.0 and s.rate(10, 4) == 2.5


def test_consume_rate_of_a_group_and_of_one_topic() -> None:
    a = sample(0.0, {}, g={TP("t", 0): 0, TP("u", 0): 10, TP("v", 0): -1})
    b = sample(10.0, {}, g={TP("t", 0): 50, TP("u", 0): 60, TP("v", 0): 30})
    assert s.consume_rate(a, b, "g") == 10.0  # v had nothing committed before
    assert s.consume_rate(a, b, "g", "u") == 5.0
    assert s.consume_rate(a, b, "other") == 0.0


def test_series_over_samples() -> None:
    samples = [
        sample(0.0, {TP("t", 0): 0}, g={TP("t", 0): 0}),
        sample(1.0, {TP("t", 0): 10}, g={TP("t", 0): 5}),
        sample(2.0, {TP("t", 0): 30}),  # the group was not read this time
        sample(4.0, {TP("t", 0): 30}, g={TP("t", 0): 30}),
    ]
    assert s.produce_series(samples, "t") == [(1.0, 10.0), (2.0, 20.0), (4.0, 0.0)]
    assert s.lag_series(samples, "g") == [(0.0, 0.0), (1.0, 5.0), (4.0, 0.0)]
    assert s.consume_series(samples, "g") == [(1.0, 5.0)]
    assert s.produce_series(samples[:1], "t") == [] and s.lag_series([], "g") == []


def test_ring_keeps_the_newest_items_oldest_first() -> None:
    ring: s.Ring[int] = s.Ring(3)
    assert ring.latest() is None and ring.items() == [] and len(ring) == 0
    for i in range(5):
        ring.append(i)
    assert ring.items() == [2, 3, 4] and ring.latest() == 4 and len(ring) == 3
    assert ring.capacity == 3
    with pytest.raises(ValueError):
        s.Ring(0)


def test_an_hour_of_samples_fits() -> None:
    assert s.capacity_for(3600, 5) == 721
    assert s.capacity_for(3600, 7) == 516
    assert s.Sampler(lambda: sample(0, {}), 5).samples.capacity == 721
    with pytest.raises(ValueError):
        s.capacity_for(3600, 0)


def test_sampler_keeps_samples_and_survives_failures() -> None:
    calls: list[int] = []
    done = threading.Event()

    def read() -> s.Sample:
        calls.append(1)
        if len(calls) == 2:
            raise ConnectionError("no broker answered")
        if len(calls) >= 4:
            done.set()
        return sample(float(len(calls)), {})

    sampler = s.Sampler(read, 0.01, horizon_s=0.02)  # room for 3 samples
    sampler.sample_once()
    assert len(sampler.samples) == 1 and sampler.error is None
    sampler.sample_once()
    assert sampler.error == "ConnectionError: no broker answered"
    sampler.start()
    assert done.wait(10)
    sampler.stop()
    assert sampler.error is None
    assert [x.at for x in sampler.samples.items()][-1] >= 4.0
    assert len(sampler.samples) <= 3
