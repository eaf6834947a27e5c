"""The LogManager: every partition log of a broker, across its ``log.dirs``.

Each log dir holds ``meta.properties``, the checkpoint files and one
directory per partition::

    <log.dir>/meta.properties
    <log.dir>/recovery-point-offset-checkpoint
    <log.dir>/replication-offset-checkpoint
    <log.dir>/log-start-offset-checkpoint
    <log.dir>/cleaner-offset-checkpoint
    <log.dir>/.kafka_cleanshutdown        present only between a clean stop and the next start
    <log.dir>/<topic>-<partition>/...
    <log.dir>/<topic>-<partition>.<uuid>-delete/   a deleted log awaiting removal

A new partition goes to the directory that holds the fewest partitions.

Thread safety: ``self._lock`` guards the map of logs; each Log guards itself.
Background work (retention, flushes, checkpoints, the cleaner, delayed
deletes, producer id expiration) runs on one Scheduler thread owned by the manager, started by
``startup`` and stopped by ``shutdown``.
"""

from __future__ import annotations

import logging
import re
import shutil
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import files
from .checkpoints import OffsetCheckpointFile
from .config import LogConfig
from .dir_failure import LogDirFailureChannel
from .errors import LogDirError, LogDirOfflineError
from .log import Clock, Log, wall_clock_ms
from .meta import MetaProperties, read_meta_properties, write_meta_properties
from .producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from .scheduler import Scheduler

logger = logging.getLogger(__name__)

_DELETE_DIR = re.compile(r"^(.+)-(\d+)\.([0-9a-f]{32})-delete$")


@dataclass(frozen=True, slots=True)
class LogManagerConfig:
    """Broker-level settings of the log manager (Kafka's ``log.*`` names)."""

    retention_check_interval_ms: int = 300_000
    flush_scheduler_interval_ms: int = 1_000
    flush_recovery_point_interval_ms: int = 60_000
    flush_start_offset_interval_ms: int = 60_000
    cleaner_enable: bool = True
    cleaner_backoff_ms: int = 15_000
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    producer_id_expiration_check_interval_ms: int = 600_000


class LogManager:
    """Owns every partition log on a broker; see the module docstring."""

    def __init__(
        self,
        log_dirs: Sequence[Path | str],
        default_config: LogConfig | None = None,
        *,
        broker_id: int | None = None,
        cluster_id: str | None = None,
        settings: LogManagerConfig | None = None,
        time_ms: Clock | None = None,
    ) -> None:
        if not log_dirs:
            raise LogDirError("no log directory given (log.dirs is empty)")
        self.log_dirs = [Path(d).resolve() for d in log_dirs]
        self.default_config = default_config or LogConfig()
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.settings = settings or LogManagerConfig()
        self._time_ms = time_ms or wall_clock_ms
        self._lock = threading.RLock()
        self._logs: dict[files.TopicPartition, Log] = {}
        self._log_dir_of: dict[files.TopicPartition, Path] = {}
        self._scheduler = Scheduler()
        self._started = False
        self.cleaner: object | None = None
        # where I/O errors take a log dir offline (storage/dir_failure.py)
        self.failures = LogDirFailureChannel()

    # -- start-up --------------------------------------------------------

    def startup(self) -> None:
        """Check and load every log dir, then start the background work."""
        for log_dir in self.log_dirs:
            self._check_log_dir(log_dir)
        for log_dir in self.log_dirs:
            self._load_log_dir(log_dir)
        self._started = True
        self._scheduler.start()
        s = self.settings
        self._scheduler.schedule(
            "retention",
            self.cleanup_logs,
            s.retention_check_interval_ms,
            s.retention_check_interval_ms,
        )
        self._scheduler.schedule(
            "flush",
            self.flush_dirty_logs,
            s.flush_scheduler_interval_ms,
            s.flush_scheduler_interval_ms,
        )
        self._scheduler.schedule(
            "recovery-point-checkpoint",
            self.checkpoint_recovery_points,
            s.flush_recovery_point_interval_ms,
            s.flush_recovery_point_interval_ms,
        )
        self._scheduler.schedule(
            "log-start-offset-checkpoint",
            self.checkpoint_log_start_offsets,
            s.flush_start_offset_interval_ms,
            s.flush_start_offset_interval_ms,
        )
        self._scheduler.schedule(
            "producer-id-expiration",
            self.remove_expired_producers,
            s.producer_id_expiration_check_interval_ms,
            s.producer_id_expiration_check_interval_ms,
        )
        if s.cleaner_enable:
            from .cleaner import LogCleaner

            cleaner = LogCleaner(self, time_ms=self._time_ms)
            self.cleaner = cleaner
            self._scheduler.schedule(
                "log-cleaner", cleaner.clean_once, s.cleaner_backoff_ms, s.cleaner_backoff_ms
            )

    def _check_log_dir(self, log_dir: Path) -> None:
        if log_dir.exists() and not log_dir.is_dir():
            raise LogDirError(f"log dir {log_dir} exists and is not a directory")
        log_dir.mkdir(parents=True, exist_ok=True)
        meta_path = log_dir / files.META_PROPERTIES
        meta = read_meta_properties(meta_path)
        if meta is None:
            strangers = [
                p.name
                for p in log_dir.iterdir()
                if p.name not in files.LOG_DIR_FILES
                and not (p.is_dir() and files.parse_partition_dir_name(p.name))
            ]
            if strangers:
                raise LogDirError(
                    f"{log_dir} does not look like a log dir: it has no {files.META_PROPERTIES} "
                    f"and holds {', '.join(sorted(strangers)[:5])}; refusing to use it"
                )
            if self.broker_id is not None:
                write_meta_properties(meta_path, MetaProperties(0, self.broker_id, self.cluster_id))
            return
        if self.broker_id is not None and meta.broker_id != self.broker_id:
            raise LogDirError(
                f"{meta_path} belongs to broker.id {meta.broker_id}, but this broker is "
                f"{self.broker_id}"
            )
        if self.cluster_id is not None and meta.cluster_id not in (None, self.cluster_id):
            raise LogDirError(
                f"{meta_path} belongs to cluster {meta.cluster_id}, but this cluster is "
                f"{self.cluster_id}"
            )

    def _load_log_dir(self, log_dir: Path) -> None:
        marker = log_dir / files.CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = OffsetCheckpointFile(log_dir / files.RECOVERY_POINT_CHECKPOINT).read()
        start_offsets = OffsetCheckpointFile(log_dir / files.LOG_START_OFFSET_CHECKPOINT).read()
        high_watermarks = OffsetCheckpointFile(log_dir / files.REPLICATION_CHECKPOINT).read()
        for path in sorted(log_dir.iterdir()):
            if not path.is_dir():
                if path.name not in files.LOG_DIR_FILES and not path.name.endswith(".tmp"):
                    logger.warning(
                        "unknown file %s in log dir %s, left in place", path.name, log_dir
                    )
                continue
            if _DELETE_DIR.match(path.name):
                logger.info("removing %s, a log deleted before the last stop", path)
                shutil.rmtree(path, ignore_errors=True)
                continue
            parsed = files.parse_partition_dir_name(path.name)
            if parsed is None:
                logger.warning("%s is not a partition directory, left in place", path)
                continue
            tp = files.TopicPartition(*parsed)
            if tp in self._logs:
                raise LogDirError(
                    f"duplicate log directories for {tp}: {self._log_dir_of[tp]} and {log_dir}"
                )
            log = Log.open(
                path,
                self.default_config,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=start_offsets.get(tp, 0),
                had_clean_shutdown=clean,
                time_ms=self._time_ms,
                background=self._scheduler.submit,
                producer_id_expiration_ms=self.settings.producer_id_expiration_ms,
                failure=self.failures,
            )
            log.update_high_watermark(high_watermarks.get(tp, log.log_end_offset))
            self._logs[tp] = log
            self._log_dir_of[tp] = log_dir
        if clean:
            marker.unlink()
            files.fsync_dir(log_dir)

    # -- logs ------------------------------------------------------------

    def get_log(self, tp: files.TopicPartition) -> Log | None:
        with self._lock:
            return self._logs.get(tp)

    def all_logs(self) -> dict[files.TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)

    def get_or_create_log(self, tp: files.TopicPartition, config: LogConfig | None = None) -> Log:
        """The log of ``tp``, created in the least-loaded log dir when missing."""
        with self._lock:
            log = self._logs.get(tp)
            if log is not None:
                if config is not None:
                    log.update_config(config)
                return log
            online = [d for d in self.log_dirs if self.failures.reason(d) is None]
            if not online:
                raise LogDirError(f"cannot create the log of {tp}: every log dir is offline")
            counts = {d: 0 for d in online}
            for d in self._log_dir_of.values():
                if d in counts:
                    counts[d] += 1
            log_dir = min(online, key=lambda d: (counts[d], self.log_dirs.index(d)))
            log = Log.open(
                log_dir / files.partition_dir_name(tp.topic, tp.partition),
                config or self.default_config,
                time_ms=self._time_ms,
                background=self._scheduler.submit,
                producer_id_expiration_ms=self.settings.producer_id_expiration_ms,
                failure=self.failures,
            )
            self._logs[tp] = log
            self._log_dir_of[tp] = log_dir
            return log

    def log_dir_of(self, tp: files.TopicPartition) -> Path | None:
        with self._lock:
            return self._log_dir_of.get(tp)

    def delete_log(self, tp: files.TopicPartition) -> bool:
        """Take ``tp``'s log out of service; its directory is renamed and removed later."""
        with self._lock:
            log = self._logs.pop(tp, None)
            log_dir = self._log_dir_of.pop(tp, None)
        if log is None or log_dir is None:
            return False
        log.close()
        doomed = log_dir / f"{tp}.{uuid.uuid4().hex}-delete"
        log.directory.rename(doomed)
        files.fsync_dir(log_dir)
        self._scheduler.submit(lambda: shutil.rmtree(doomed, ignore_errors=True))
        if not self._started:
            shutil.rmtree(doomed, ignore_errors=True)
        return True

    # -- background work ---------------------------------------------------

    def online_logs(self) -> dict[files.TopicPartition, Log]:
        """The logs whose dir is online (background work leaves the others alone)."""
        return {tp: log for tp, log in self.all_logs().items() if log.online}

    def cleanup_logs(self) -> int:
        """Retention over every log; returns the number of segments removed."""
        removed = 0
        for log in self.online_logs().values():
            removed += log.delete_old_segments()
            log.delete_pending_segments()
        return removed

    def remove_expired_producers(self) -> int:
        """Forget, in every log, producers silent for ``producer.id.expiration.ms``."""
        return sum(log.remove_expired_producers() for log in self.online_logs().values())

    def flush_dirty_logs(self) -> None:
        for log in self.online_logs().values():
            try:
                log.flush_if_due()
            except LogDirOfflineError:
                pass  # the dir just went offline (logged once, by the channel)

    def _checkpoint(self, name: str, value: str) -> None:
        online = [d for d in self.log_dirs if self.failures.reason(d) is None]
        by_dir: dict[Path, dict[files.TopicPartition, int]] = {d: {} for d in online}
        with self._lock:
            for tp, log in self._logs.items():
                if self._log_dir_of[tp] in by_dir:
                    by_dir[self._log_dir_of[tp]][tp] = getattr(log, value)
        for log_dir, offsets in by_dir.items():
            try:
                OffsetCheckpointFile(log_dir / name).write(offsets)
            except OSError as exc:
                self.failures.fail(log_dir, f"writing {name} in {log_dir}", exc)

    def checkpoint_recovery_points(self) -> None:
        self._checkpoint(files.RECOVERY_POINT_CHECKPOINT, "recovery_point")

    def checkpoint_log_start_offsets(self) -> None:
        self._checkpoint(files.LOG_START_OFFSET_CHECKPOINT, "log_start_offset")

    def checkpoint_high_watermarks(self) -> None:
        self._checkpoint(files.REPLICATION_CHECKPOINT, "high_watermark")

    # -- shutdown ------------------------------------------------------------

    def shutdown(self) -> None:
        """Clean stop: flush, checkpoint, close, and leave the clean-shutdown marker."""
        self._scheduler.initiate_shutdown()
        self._scheduler.await_shutdown()
        logs = self.all_logs()
        for log in self.online_logs().values():
            try:
                log.flush()
                log.take_producer_snapshot()
            except LogDirOfflineError:
                pass  # the dir went offline now; it is left for recovery
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        for log in logs.values():
            log.close()
        for log_dir in self.log_dirs:
            if self.failures.reason(log_dir) is not None:
                continue  # no clean-shutdown marker: the next start recovers its logs
            try:
                (log_dir / files.CLEAN_SHUTDOWN_FILE).touch()
                files.fsync_dir(log_dir)
            except OSError as exc:
                self.failures.fail(log_dir, f"marking {log_dir} shut down cleanly", exc)
        self._started = False
