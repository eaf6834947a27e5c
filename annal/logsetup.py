"""How a broker process writes its own log lines.

``log.format`` picks one line of text per event (the default) or one JSON
object per line (``{"time", "level", "logger", "thread", "message"}``, plus
``"exception"`` with the traceback), for log shippers.

``--log-file`` makes the process write to a file it rotates by size:
``broker.log`` → ``broker.log.1`` → … → ``broker.log.<backups>`` (the oldest
is dropped).  The file is also the process's stdout and stderr (``dup2``),
so a traceback or a line printed outside ``logging`` lands in it too, and
after each rotation they follow the new file.
"""

from __future__ import annotations

import datetime
import json
import logging
import logging.handlers
import os
import sys
from pathlib import Path

TEXT_FORMAT = "%(asctime)s %(levelname)s [%(name)s] %(message)s"
DEFAULT_MAX_BYTES = 100 * 1024 * 1024
DEFAULT_BACKUPS = 5


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        event = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "thread": record.threadName,
            "message": record.getMessage(),
        }
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        return json.dumps(event, ensure_ascii=False)


class StdioRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A size-rotated log file that is also the process's stdout and stderr."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self._adopt_stdio()

    def doRollover(self) -> None:
        super().doRollover()
        self._adopt_stdio()

    def _adopt_stdio(self) -> None:
        if self.stream is None:
            return
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        fd = self.stream.fileno()
        os.dup2(fd, 1)
        os.dup2(fd, 2)


def configure(
    level: str,
    log_format: str = "text",
    log_file: Path | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    backups: int = DEFAULT_BACKUPS,
) -> None:
    """Send every log record to stderr, or to ``log_file`` rotated by size."""
    handler: logging.Handler
    if log_file is None:
        handler = logging.StreamHandler(sys.stderr)
    else:
        handler = StdioRotatingFileHandler(log_file, max_bytes, backups)
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level))
