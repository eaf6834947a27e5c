"""A log dir that failed a write goes offline: Kafka's LogDirFailureChannel (KIP-112).

A full disk (ENOSPC), an I/O error (EIO), a short write or a failed fsync in
any log of a dir means the dir cannot be trusted with more data: a retry
could land after torn bytes, and the next write might tear too.  Every such
failure is reported here, once per dir it matters: the dir is marked
offline with the first reason, and every log in it refuses reads and writes
from then on with ``LogDirOfflineError`` (KAFKA_STORAGE_ERROR, which
clients retry after refreshing metadata).  The dir stays offline until the
process restarts; the logs' recovery then cuts any torn tail.

Listeners (the broker) hear of each newly offline dir once, on the thread
whose write failed; they must not block.

Thread safety: every method may be called from any thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from annal.storage.errors import LogDirOfflineError

logger = logging.getLogger(__name__)

DirListener = Callable[[Path, str], None]


class LogDirFailureChannel:
    """See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offline: dict[Path, str] = {}
        self._listeners: list[DirListener] = []

    def add_listener(self, listener: DirListener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def fail(self, log_dir: Path, what: str, exc: OSError) -> LogDirOfflineError:
        """Mark ``log_dir`` offline because ``what`` failed with ``exc``; the error
        to raise to the caller."""
        reason = f"{what} failed: {exc.strerror or exc}"
        with self._lock:
            first = log_dir not in self._offline
            if first:
                self._offline = {**self._offline, log_dir: reason}
            listeners = list(self._listeners) if first else []
            reason = self._offline[log_dir]
        if first:
            logger.error(
                "log dir %s is offline: %s; its logs are neither read nor written until the "
                "broker restarts",
                log_dir,
                reason,
            )
            for listener in listeners:
                listener(log_dir, reason)
        return LogDirOfflineError(log_dir, reason)

    def reason(self, log_dir: Path) -> str | None:
        """Why ``log_dir`` is offline; None while it is online.  Asked on every read
        and write, so without the lock: the map is replaced whole, never changed."""
        return self._offline.get(log_dir)

    def offline_dirs(self) -> dict[Path, str]:
        with self._lock:
            return dict(self._offline)
