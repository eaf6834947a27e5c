"""deploy/prometheus (scrape config, alert rules) and deploy/grafana (a dashboard):
valid for Prometheus' own checker, each alert firing on the series it watches
(promtool's rule tests), and every metric they name served by a real broker."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from annal.deploy.runner import BrokerProcess
from annal.webconsole import lag_metrics
from annal.webconsole.sampler import Sample, Sampler
from environment import require_command

from annal.topic_partition import TopicPartition

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "annal-dashboard.json"
METRIC = re.compile(r"\b((?:annal|process|python)_[a-z0-9_]+)")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_command("promtool"), *args], capture_output=True, text=True, timeout=60,
        cwd=PROMETHEUS,
    )  # fmt: skip


def test_prometheus_config_and_alert_rules_pass_promtool() -> None:
    checked = promtool("check", "config", "prometheus.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "alerts_test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # every alert of alerts.yml has a case in alerts_test.yml
    alerts = set(re.findall(r"- alert: (\w+)", (PROMETHEUS / "alerts.yml").read_text()))
    cases = set(re.findall(r"alertname: (\w+)", (PROMETHEUS / "alerts_test.yml").read_text()))
    assert alerts and alerts == cases


def referenced() -> set[str]:
    """The metric names the alert rules and the dashboard's queries use."""
    rules = (PROMETHEUS / "alerts.yml").read_text()
    panels = json.loads(DASHBOARD.read_text())["panels"]
    queries = [t["expr"] for p in panels for t in p["targets"]]
    return set(METRIC.findall(rules + "\n".join(queries)))


@pytest.mark.timeout(120)
def test_every_metric_they_use_is_served_by_a_broker(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(1, {"metrics.port": "0"})
    url = f"http://{broker.metrics_endpoint}/metrics"
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode("utf-8")
    families = set(re.findall(r"^# TYPE (\S+)", text, re.M))
    samples = set(re.findall(r"^([a-z_0-9]+)", text, re.M))
    # consumer-group lag comes from the web console's /metrics (a client of the
    # whole cluster, as lag exporters are), with a sample holding one group
    console = Sampler(lambda: Sample(0.0), 60)
    console.samples.append(Sample(time.time(), {TopicPartition("t", 0): 5},
                                  {"g": {TopicPartition("t", 0): 2}}))  # fmt: skip
    served = lag_metrics.exposition(console).decode()
    families |= set(re.findall(r"^# TYPE (\S+)", served, re.M))
    samples |= set(re.findall(r"^([a-z_0-9]+)", served, re.M))
    names = referenced()
    assert len(names) >= 15
    missing = sorted(
        n for n in names
        if n not in samples and n not in families
        and re.sub(r"_(bucket|count|sum)$", "", n) not in families
    )  # fmt: skip
    assert missing == [], f"named in deploy/ but not served: {missing}"
