"""What a broker's Prometheus page (``metrics.port``) serves, for tests."""

from __future__ import annotations

import urllib.request

from annal.deploy.runner import BrokerProcess
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(broker: BrokerProcess) -> Samples:
    """Every sample a broker's /metrics serves: (name, sorted labels) → value."""
    port = broker.metrics_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode("utf-8")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
