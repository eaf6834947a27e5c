"""What the logs of one log dir tell the log manager's background work.

The log manager's timers (checkpoints, time-based flushes, the cleaner) must
cost nothing while nothing happens, however many partitions the dir holds.
So the logs tell:

* a log whose recovery point or log start offset moves marks its dir's
  checkpoint out of date (``recovery_points``, ``log_start_offsets``): the
  next timer tick rewrites that checkpoint, a tick with nothing marked writes
  nothing;
* a log that starts holding unflushed records under a finite ``flush.ms``
  puts itself on the dir's list of logs to flush in time (``unflushed``): the
  flush tick visits only that list;
* a log whose ``cleanup.policy`` has compact is on the dir's list of
  compacted logs (``compacted``), the only logs the cleaner looks at.

Thread safety: the two marks are plain attributes (an assignment is atomic);
the manager clears a mark *before* it reads the offsets it writes, so a change
that races the write marks the checkpoint again for the next tick.
``self._lock`` guards the two lists.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .log import Log


class DirtyMarks:
    """One log dir's marks and lists; see the module docstring."""

    __slots__ = ("_compacted", "_lock", "_unflushed", "log_start_offsets", "recovery_points")

    def __init__(self) -> None:
        self.recovery_points = False
        self.log_start_offsets = False
        self._lock = threading.Lock()
        self._unflushed: set[Log] = set()
        self._compacted: set[Log] = set()

    def checkpoints_changed(self) -> None:
        """A log came or went: both checkpoints change."""
        self.recovery_points = True
        self.log_start_offsets = True

    def unflushed(self, log: Log) -> None:
        """``log`` holds records its ``flush.ms`` must flush in time."""
        with self._lock:
            self._unflushed.add(log)

    def take_unflushed(self) -> list[Log]:
        """The logs to look at, the list left empty: each one still unflushed
        after the look must be handed back with ``unflushed``."""
        with self._lock:
            taken = list(self._unflushed)
            self._unflushed.clear()
        return taken

    @property
    def unflushed_count(self) -> int:
        with self._lock:
            return len(self._unflushed)

    def compacted(self, log: Log, compacted: bool) -> None:
        """``log`` is compacted now, or no longer is (or was closed)."""
        with self._lock:
            if compacted:
                self._compacted.add(log)
            else:
                self._compacted.discard(log)

    def compacted_logs(self) -> list[Log]:
        with self._lock:
            return list(self._compacted)
