"""``annal console`` in a real browser (Debian's headless Chromium, driven by
selenium) against a live 3-broker cluster: what each page shows, live updates
as brokers die and lag grows, escaping of untrusted record bytes, and an admin
form.  Screenshots of the pages go to $ANNAL_SCREENSHOTS (or a temporary dir)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from console_process import start_console
from environment import require_module, unavailable

FAST = {"replica.lag.time.max.ms": "1500", "zookeeper.session.timeout.ms": "6000"}
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[Any]:
    webdriver = require_module("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            unavailable(f"{path} is missing; make setup installs chromium and chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update",
                     "--disable-sync", f"--user-data-dir={tmp_path / 'chromium'}",
                     "--window-size=1400,1000"):  # fmt: skip
        options.add_argument(argument)
    browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    browser.set_page_load_timeout(30)
    yield browser
    browser.quit()


@pytest.fixture
def screenshots(tmp_path: Path) -> Callable[[Any, str], None]:
    directory = Path(os.environ.get("ANNAL_SCREENSHOTS") or tmp_path / "screenshots")
    directory.mkdir(parents=True, exist_ok=True)

    def shoot(browser: Any, name: str) -> None:
        path = directory / f"{name}.png"
        browser.save_screenshot(str(path))
        print(f"screenshot: {path}")

    return shoot


def shows(browser: Any, predicate: Callable[[Any], object], timeout_s: float, what: str) -> None:
    """Wait until ``predicate(browser)`` holds; the page may be redrawn under it."""

    def check() -> object:
        try:
            return predicate(browser)
        except Exception:  # a stale element while #live is redrawn
            return False

    wait_until(check, timeout_s, what, poll_s=0.2)


def css(browser: Any, selector: str) -> Any:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.CSS_SELECTOR, selector)


def lag(browser: Any) -> int:
    from selenium.webdriver.common.by import By

    cells = browser.find_elements(By.CSS_SELECTOR, "#offsets td.lag")
    return sum(int(c.text) for c in cells if c.text.strip().isdigit())


def consume_and_stop(kafka_bootstrap: str, count: int) -> None:
    """A group of Kafka's clients reads ``count`` records, commits and leaves."""
    kafka = require_module("kafka")
    consumer = kafka.KafkaConsumer(
        "orders", bootstrap_servers=kafka_bootstrap, group_id="billing",
        auto_offset_reset="earliest", enable_auto_commit=False,
    )  # fmt: skip
    seen = 0
    deadline = time.monotonic() + 30
    while seen < count and time.monotonic() < deadline:
        batches = consumer.poll(timeout_ms=500, max_records=count - seen)
        seen += sum(len(m) for m in batches.values())
    consumer.commit()
    consumer.close()
    assert seen == count


@pytest.mark.timeout(240)
def test_console_pages_in_a_browser(
    broker_factory: Callable[..., BrokerProcess],
    driver: Any,
    screenshots: Callable[[Any, str], None],
) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    brokers = {i: broker_factory(i, settings=FAST) for i in (1, 2, 3)}
    bootstrap = ",".join(b.endpoint for b in brokers.values())
    with AdminClient(bootstrap) as admin:
        admin.create_topic("orders", 3, 3)
        wait_until(lambda: all(len(p.isr) == 3 for p in admin.describe_topics(["orders"])[0]
                               .partitions), 30, "orders in sync")  # fmt: skip
    with Producer(bootstrap) as producer:
        for i in range(30):
            producer.send("orders", json.dumps({"order": i}).encode(), key=f"k{i}".encode(),
                          partition=i % 3, headers=[("source", b"web")])  # fmt: skip
        producer.send("orders", b"<script>alert(1)</script>", key=b"html", partition=0)
        producer.flush()
    consume_and_stop(brokers[1].kafka_endpoint, 20)
    console, url = start_console(brokers[1].endpoint)  # it finds the others itself
    try:
        base = url.rstrip("/")
        # the cluster: three brokers up, one of them the controller
        driver.get(base + "/")
        for i in (1, 2, 3):
            assert ">up<" in css(driver, f"#broker-{i}").get_attribute("innerHTML")
        assert "controller" in css(driver, "#brokers").text
        assert css(driver, "#under-replicated").text == "0"
        screenshots(driver, "1-cluster")

        driver.get(base + "/topics")
        assert "orders" in css(driver, "#topic-orders").text
        screenshots(driver, "2-topics")
        driver.get(base + "/topics/orders")
        assert len(driver.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")) == 3
        assert "retention.ms" in css(driver, "#configs").text
        shows(driver, lambda b: int(css(b, "#produce-chart").get_attribute("data-points")) > 0,
              20, "the produce rate chart drawn")  # fmt: skip
        screenshots(driver, "3-topic")

        # a group that read 20 records and stopped: its lag grows with the log
        driver.get(base + "/groups")
        assert "billing" in css(driver, "#groups").text
        screenshots(driver, "4-groups")
        driver.get(base + "/groups/billing")
        before = lag(driver)
        assert before == 11, before
        with Producer(bootstrap) as producer:
            for i in range(15):
                producer.send("orders", b"more", partition=i % 3)
            producer.flush()
        shows(driver, lambda b: lag(b) == before + 15, 20, "lag grown by 15 on the page")
        shows(driver, lambda b: int(css(b, "#lag-chart").get_attribute("data-points")) > 1,
              20, "the lag chart drawn")  # fmt: skip
        screenshots(driver, "5-group")

        # the message browser: text as it is, never as markup
        driver.get(base + "/messages?topic=orders&partition=0&limit=20&format=text")
        record = css(driver, "#record-10")
        assert "html" in record.text and "<script>alert(1)</script>" in record.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in driver.page_source
        with pytest.raises(NoAlertPresentException):
            driver.switch_to.alert.text  # noqa: B018
        assert 'k0' in css(driver, "#record-0").text and "source" in css(driver, "#record-0").text
        screenshots(driver, "6-messages")
        driver.get(base + "/messages?topic=orders&partition=0&limit=3&format=json")
        assert '"order": 0' in css(driver, "#record-0").text
        driver.get(base + "/messages?topic=orders&partition=0&limit=1&format=hex&offset=10")
        assert "3c 73 63 72 69 70 74 3e" in css(driver, "#record-10").text  # <script>

        # an admin action through its form
        driver.get(base + "/topics")
        form = css(driver, "#create-topic")
        form.find_element(By.NAME, "name").send_keys("made-in-console")
        form.find_element(By.NAME, "partitions").send_keys("2")
        form.find_element(By.NAME, "replication_factor").send_keys("2")
        form.find_element(By.CSS_SELECTOR, "button").click()
        shows(driver, lambda b: "Topic made-in-console created." in css(b, "#notice").text,
              30, "the create topic outcome")  # fmt: skip
        assert "made-in-console" in css(driver, "#topic-made-in-console").text
        screenshots(driver, "7-topic-created")

        # a broker dies: the open cluster page shows it within seconds
        driver.get(base + "/")
        brokers[3].kill()
        shows(driver, lambda b: ">down<" in css(b, "#broker-3").get_attribute("innerHTML")
              and int(css(b, "#under-replicated").text) > 0, 30,
              "broker 3 down and partitions under-replicated")  # fmt: skip
        screenshots(driver, "8-cluster-broker-down")
        driver.get(base + "/topics/orders")
        shows(driver, lambda b: len(b.find_elements(By.CSS_SELECTOR, "#partitions tr.warn")) == 3,
              20, "orders' partitions under-replicated")  # fmt: skip
        screenshots(driver, "9-topic-under-replicated")

        # the broker the console was given dies: it reads the cluster through another
        driver.get(base + "/")
        brokers[1].kill()
        shows(driver, lambda b: ">down<" in css(b, "#broker-1").get_attribute("innerHTML")
              and ">up<" in css(b, "#broker-2").get_attribute("innerHTML"), 30,
              "broker 1 down, seen through broker 2")  # fmt: skip
        assert not driver.find_element(By.ID, "banner").is_displayed()
        screenshots(driver, "10-cluster-two-down")

        # no broker left: a banner, and the console keeps serving
        brokers[2].kill()
        shows(driver, lambda b: b.find_element(By.ID, "banner").is_displayed(), 30,
              "the unreachable banner")  # fmt: skip
        assert "BROKER_NOT_AVAILABLE" in css(driver, "#banner").text
        screenshots(driver, "11-cluster-unreachable")
        assert console.poll() is None
    finally:
        console.send_signal(signal.SIGTERM)
        output, _ = console.communicate(timeout=30)
    assert console.returncode == 0, output
    assert "Traceback" not in output, output
