"""Brokers and clients keep large buffers mapped between requests instead of
faulting their pages in afresh each time (annal/allocator.py)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

CHURN = """
import resource, sys, threading
if sys.argv[1] == "raised":
    from annal.allocator import keep_large_buffers
    assert keep_large_buffers()
elif sys.argv[1] == "client":  # any client's first connection raises them
    from annal.client.cluster import ClusterConnection
    ClusterConnection("127.0.0.1:1")

def requests():  # what a fetch does with its megabyte: read, serialize, copy
    for _ in range(100):
        read = bytearray(1 << 20)
        answer = bytes(read)
        sent = answer + b"."
        del read, answer, sent

first = threading.Thread(target=requests)  # warm the thread's heap
first.start(); first.join()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
second = threading.Thread(target=requests)
second.start(); second.join()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", CHURN, mode], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.mark.timeout(120)
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_megabyte_buffers_reuse_their_pages_once_the_thresholds_are_raised() -> None:
    # 100 rounds of three 1 MiB buffers: 256 pages each when they are mapped afresh
    assert page_faults("default") > 10_000
    assert page_faults("raised") < 1_000


@pytest.mark.timeout(120)
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_a_client_process_raises_the_thresholds_with_its_first_connection() -> None:
    assert page_faults("client") < 1_000
