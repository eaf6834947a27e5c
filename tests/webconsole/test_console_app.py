"""The console's web layer without a cluster: a stand-in view answers (or fails)
as the cluster would; escaping, CSRF, read-only mode and the unreachable banner."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from annal.client.cluster import ClientError
from annal.webconsole import actions, browser
from annal.webconsole.app import Console, make_app
from annal.webconsole.sampler import Sample, Sampler

from annal import errors

pytestmark = pytest.mark.timeout(60)


class StandIn:
    """Answers as ClusterView does; ``down`` makes every call fail as with no broker."""

    bootstrap = "127.0.0.1:1"
    timeout_s = 1.0

    def __init__(self) -> None:
        self.down = False
        self.created: list[str] = []
        self.admin = self.actions_admin = self

    def _check(self) -> None:
        if self.down:
            raise ClientError(errors.BROKER_NOT_AVAILABLE, "no broker answered at 127.0.0.1:1")

    def ping(self) -> None:
        self._check()

    def overview(self) -> dict[str, Any]:
        self._check()
        return {"cluster_id": "c1", "controller": 1, "topics": 1, "partitions": 1,
                "under_replicated": 0, "offline": 1, "zookeeper": None,
                "brokers": [{"id": 1, "endpoint": "h:1", "rack": "-", "listeners": [], "up": True,
                             "controller": True, "zookeeper": None},
                            {"id": 2, "endpoint": "h:2", "rack": "-", "listeners": [], "up": False,
                             "controller": False, "zookeeper": None}]}  # fmt: skip

    def topics(self) -> list[dict[str, Any]]:
        self._check()
        return [{"name": "<b>t</b>", "internal": False, "partitions": 1, "replication_factor": 1,
                 "size": 2048, "under_replicated": 0, "offline": 1}]  # fmt: skip

    def groups(self) -> list[dict[str, Any]]:
        self._check()
        return []

    def create_topic(self, name: str, partitions: int, rf: int, config: Any) -> None:
        if name == "forbidden":
            raise ClientError(errors.TOPIC_AUTHORIZATION_FAILED, "not authorized")
        self.created.append(name)

    def zk(self) -> None:
        return None


def run(console: Console, body: Callable[[TestClient[Any, Any]], Awaitable[None]]) -> None:
    async def main() -> None:
        async with TestClient(TestServer(make_app(console))) as client:
            await body(client)

    asyncio.run(main())


def make(read_only: bool = False) -> tuple[Console, StandIn]:
    view = StandIn()
    sampler = Sampler(lambda: Sample(0.0), 60)
    return Console(view, sampler, read_only=read_only), view  # type: ignore[arg-type]


def test_pages_escape_what_the_cluster_says_and_show_health() -> None:
    console, view = make()

    async def body(client: TestClient[Any, Any]) -> None:
        page = await (await client.get("/topics")).text()
        assert "&lt;b&gt;t&lt;/b&gt;" in page and "<b>t</b>" not in page
        assert "2.0 KiB" in page and 'class="bad"' in page  # an offline partition
        cluster = await (await client.get("/")).text()
        assert 'id="broker-2" class="bad"' in cluster and ">down<" in cluster
        partial = await (await client.get("/?partial=1")).text()
        assert partial.lstrip().startswith("<div class=\"cards\">") and "<html" not in partial
        assert (await client.get("/static/plotly.js")).status == 200
        assert (await (await client.get("/api/health")).json())["ok"] is True
        view.down = True
        down = await client.get("/topics")
        assert down.status == 200
        assert "BROKER_NOT_AVAILABLE" in await down.text()
        health = await (await client.get("/api/health")).json()
        assert health["ok"] is False and "BROKER_NOT_AVAILABLE" in health["error"]
        api = await client.get("/api/topics")
        assert api.status == 502 and "BROKER_NOT_AVAILABLE" in (await api.json())["error"]
        view.down = False
        assert "BROKER_NOT_AVAILABLE" not in await (await client.get("/topics")).text()

    run(console, body)


def test_posts_need_the_csrf_token_and_show_the_clusters_error() -> None:
    console, view = make()

    async def body(client: TestClient[Any, Any]) -> None:
        page = await (await client.get("/topics")).text()
        token = re.search(r'name="csrf" value="([^"]+)"', page)
        assert token is not None and token.group(1) == console.csrf
        refused = await client.post("/actions/create-topic", data={"name": "x"})
        assert refused.status == 403 and view.created == []
        wrong = await client.post("/actions/create-topic", data={"name": "x", "csrf": "no"})
        assert wrong.status == 403 and view.created == []
        done = await client.post("/actions/create-topic",
                                 data={"name": "fresh", "csrf": token.group(1)})  # fmt: skip
        assert done.status == 200 and "Topic fresh created." in await done.text()
        assert view.created == ["fresh"]
        denied = await client.post("/actions/create-topic",
                                   data={"name": "forbidden", "csrf": token.group(1)})  # fmt: skip
        text = await denied.text()
        assert "TOPIC_AUTHORIZATION_FAILED: not authorized" in text and "Traceback" not in text
        bad = await client.post("/actions/create-topic", data={
            "name": "y", "partitions": "many", "csrf": token.group(1)})  # fmt: skip
        assert "partitions must be a number" in await bad.text()

    run(console, body)


def test_read_only_refuses_changes() -> None:
    console, view = make(read_only=True)

    async def body(client: TestClient[Any, Any]) -> None:
        page = await (await client.get("/topics")).text()
        assert "read-only" in page and "disabled" in page
        answer = await client.post("/actions/create-topic",
                                   data={"name": "x", "csrf": console.csrf})  # fmt: skip
        assert "read-only" in await answer.text() and view.created == []

    run(console, body)


def test_values_are_shown_as_text_json_or_hex() -> None:
    assert browser.render(None, "text") == {"text": "null", "null": True, "note": ""}
    assert browser.render(b"<script>", "text")["text"] == "<script>"
    assert browser.render(b'{"a":[1,2]}', "json")["text"] == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert browser.render(b"plain", "json") == {"text": "plain", "null": False, "note": "not JSON"}
    assert browser.render(bytes(range(18)), "hex")["text"] == (
        "00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f\n10 11"
    )
    assert browser.render(b"\xff\xfeok", "text")["text"] == "\ufffd\ufffdok"
    assert browser.parse_time("1700000000000") == 1_700_000_000_000
    assert browser.parse_time("2023-11-14T22:13:20") == 1_700_000_000_000
    with pytest.raises(ValueError):
        browser.parse_time("yesterday")


def test_configs_text_is_name_value_pairs() -> None:
    assert actions.parse_configs("a=1, b = 2\nc=") == {"a": "1", "b": "2", "c": ""}
    assert actions.parse_configs("  ") == {}
    with pytest.raises(ValueError, match="not name=value"):
        actions.parse_configs("retention")


def test_the_console_is_a_client_of_the_cluster() -> None:
    """It reads the cluster as any client does: nothing of the brokers' internals."""
    from test_boundaries import imported_modules

    forbidden = {"annal.broker", "annal.controller", "annal.storage"}
    offenders = {f: sorted(names & forbidden)
                 for f, names in imported_modules("webconsole").items() if names & forbidden}
    assert offenders == {}
    assert imported_modules("webconsole")  # the package was read


def test_a_slow_cluster_does_not_hold_a_page(monkeypatch: pytest.MonkeyPatch) -> None:
    from annal.webconsole import app

    console, view = make()
    release = threading.Event()
    monkeypatch.setattr(view, "groups", lambda: release.wait(10) and [])
    monkeypatch.setattr(app, "PAGE_TIMEOUT_S", 0.3)

    async def body(client: TestClient[Any, Any]) -> None:
        page = await (await client.get("/groups")).text()
        assert "REQUEST_TIMED_OUT" in page
        release.set()

    run(console, body)


def test_metrics_give_each_groups_lag_for_prometheus() -> None:
    """/metrics: lag per partition, its sum and max per group, and log ends, from the
    sampler's latest sample, as a lag exporter gives them."""
    from prometheus_client.parser import text_string_to_metric_families

    from annal.topic_partition import TopicPartition as TP

    ends = {TP("orders", 0): 120, TP("orders", 1): 80}
    sample = Sample(time.time(), ends, {"billing": {TP("orders", 0): 100, TP("orders", 1): 80}})
    console, _ = make()
    console.sampler.samples.append(sample)

    async def body(client: TestClient[Any, Any]) -> None:
        answer = await client.get("/metrics")
        assert answer.status == 200 and answer.content_type == "text/plain"
        found = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(await answer.text())
            for s in family.samples
        }
        lag = "annal_consumergroup_lag"
        assert found[(lag, (("group", "billing"), ("partition", "0"), ("topic", "orders")))] == 20
        assert found[(lag, (("group", "billing"), ("partition", "1"), ("topic", "orders")))] == 0
        assert found[("annal_consumergroup_sum_lag", (("group", "billing"),))] == 20
        assert found[("annal_consumergroup_max_lag", (("group", "billing"),))] == 20
        latest = ("annal_partition_latest_offset", (("partition", "0"), ("topic", "orders")))
        assert found[latest] == 120
        assert found[("annal_console_sample_up", ())] == 1
        assert found[("annal_console_sample_age_seconds", ())] < 60

    run(console, body)
