"""The console's ``/metrics``: consumer-group lag for Prometheus, as a lag exporter
(Burrow, kafka-lag-exporter) gives it, from the sampler's latest sample.

* ``annal_consumergroup_lag{group, topic, partition}``: log end offset minus the
  group's committed offset (partitions the group committed);
* ``annal_consumergroup_sum_lag{group}`` and ``annal_consumergroup_max_lag{group}``;
* ``annal_partition_latest_offset{topic, partition}``: each partition's log end;
* ``annal_console_sample_age_seconds``: how old that sample is, and
  ``annal_console_sample_up``: 1 when the last read of the cluster succeeded.

Brokers serve their own metrics (``metrics.port``); lag needs both a group's
committed offsets and every partition's log end, which no one broker holds, so
it comes from a client of the whole cluster, as in Kafka's ecosystem.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from annal.webconsole import sampler as sampling
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class LagCollector(Collector):
    def __init__(self, sampler: sampling.Sampler) -> None:
        self._sampler = sampler

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "annal_console_sample_up", "1 when the console's last read of the cluster succeeded"
        )
        up.add_metric([], 0.0 if self._sampler.error else 1.0)
        yield up
        sample = self._sampler.samples.latest()
        if sample is None:
            return
        age = GaugeMetricFamily(
            "annal_console_sample_age_seconds", "Age of the sample these metrics come from"
        )
        age.add_metric([], max(time.time() - sample.at, 0.0))
        yield age
        latest = GaugeMetricFamily(
            "annal_partition_latest_offset", "Log end offset of a partition",
            labels=["topic", "partition"],
        )  # fmt: skip
        for tp, offset in sorted(sample.end_offsets.items()):
            latest.add_metric([tp.topic, str(tp.partition)], offset)
        yield latest
        lag = GaugeMetricFamily(
            "annal_consumergroup_lag",
            "Records of a partition past the group's committed offset",
            labels=["group", "topic", "partition"],
        )
        total = GaugeMetricFamily(
            "annal_consumergroup_sum_lag", "The group's lag over all its partitions",
            labels=["group"],
        )  # fmt: skip
        largest = GaugeMetricFamily(
            "annal_consumergroup_max_lag", "The group's largest lag of one partition",
            labels=["group"],
        )  # fmt: skip
        for group, committed in sorted(sample.committed.items()):
            lags = sampling.partition_lag(sample.end_offsets, committed)
            for tp, value in sorted(lags.items()):
                lag.add_metric([group, tp.topic, str(tp.partition)], value)
            total.add_metric([group], sum(lags.values()))
            largest.add_metric([group], max(lags.values(), default=0))
        yield lag
        yield total
        yield largest


def exposition(sampler: sampling.Sampler) -> bytes:
    """The metrics in Prometheus' text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LagCollector(sampler))
    return generate_latest(registry)
