"""Keep large buffers in the process's heap instead of mapping them afresh per request.

A fetch answer moves about a megabyte per partition through several buffers
(the read from the segment, the serialized answer, gRPC's copy; on the
client, gRPC's message, the parsed field, the decoded columns), and a
produce request as much the other way.  glibc's malloc serves blocks above its
mmap threshold with a fresh mapping and gives a thread heap's free top back to
the kernel once it exceeds the trim threshold; with the defaults that happens
to these buffers on every request, and each one costs page faults and zeroing
of every page again.  On a busy fetch path that was most of the broker's CPU:
about 400 ns per 100-byte record served, against 150 ns with the thresholds
raised (the memory stays mapped and is reused by the next request).  A
reader turning fetches into Arrow batches spent a fifth of its CPU the same
way.

``keep_large_buffers`` raises both thresholds with ``mallopt`` where the C
library is glibc, and does nothing elsewhere.  Brokers call it at start, and
every client's ``ClusterConnection`` once per process.  The price is up to the
trim threshold of free memory kept per malloc arena.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import platform

logger = logging.getLogger(__name__)

# mallopt parameters, from glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for its adaptive threshold
TRIM_THRESHOLD = 64 << 20


@functools.cache
def keep_large_buffers() -> bool:
    """Raise malloc's mmap and trim thresholds (once per process); False where
    that is not possible."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    if not done:
        logger.warning("could not raise malloc's mmap and trim thresholds")
    return done
