"""``annal console --command-config`` on a secured cluster (``annal cluster up
--security sasl_ssl``): the console reads and acts as its configured user, so
the cluster's ACLs decide, and a refusal is shown as the cluster's error."""

from __future__ import annotations

import re
import signal
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_process import start_console
from secured_cluster import secured_cluster

PASSWORD = "watcher-s3cret"


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """One broker with ACLs on; user ``watcher`` may Describe and Read topic
    ``events`` and nothing else."""
    with secured_cluster(tmp_path / "cluster", [
        ["topics", "create", "--topic", "events", "--partitions", "2"],
        ["topics", "create", "--topic", "secret", "--partitions", "1"],
        ["configs", "--entity-type", "users", "--entity-name", "watcher", "--alter",
         "--add-config", f"SCRAM-SHA-512=[password={PASSWORD}]"],
        ["acls", "--add", "--allow-principal", "User:watcher", "--operation", "Describe",
         "--operation", "Read", "--operation", "DescribeConfigs", "--topic", "events"],
    ]) as status:  # fmt: skip
        yield status


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as answer:
        text: str = answer.read().decode("utf-8")
        return text


def post(url: str, fields: dict[str, str]) -> str:
    data = urllib.parse.urlencode(fields).encode()
    with urllib.request.urlopen(url, data=data, timeout=60) as answer:  # follows the 303
        text: str = answer.read().decode("utf-8")
        return text


@pytest.mark.timeout(180)
def test_the_console_acts_with_its_own_credentials(secured: dict[str, Any], tmp_path: Path) -> None:
    keystore = str(Path(secured["ca"]).parent / "admin.pem")
    config = tmp_path / "watcher.properties"
    config.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.truststore.location={secured['ca']}\n"
        f"ssl.keystore.location={keystore}\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="watcher" password="{PASSWORD}";\n'
    )
    console, url = start_console(secured["endpoint"], "--command-config", str(config))
    try:
        topics = get(url + "topics")
        assert 'id="topic-events"' in topics and 'id="topic-secret"' not in topics
        token = re.search(r'name="csrf" value="([^"]+)"', topics)
        assert token is not None
        refused = post(url + "actions/create-topic", {"csrf": token.group(1), "name": "mine"})
        notice = re.search(r'<div id="notice" class="notice error">([^<]*)</div>', refused)
        assert notice is not None, refused
        assert "AUTHORIZATION_FAILED" in notice.group(1) and "Traceback" not in refused
        assert 'id="topic-mine"' not in get(url + "topics")
        elected = post(url + "actions/elect-leaders", {"csrf": token.group(1)})
        assert "CLUSTER_AUTHORIZATION_FAILED" in elected
    finally:
        console.send_signal(signal.SIGTERM)
        output, _ = console.communicate(timeout=30)
    assert console.returncode == 0, output
    assert PASSWORD not in output
