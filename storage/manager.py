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

Start-up loads the logs on ``recovery_threads_per_data_dir`` threads per log
dir (``loading.py``).

Background work (retention, flushes, checkpoints, the cleaner, delayed
deletes, producer id expiration) runs on one Scheduler thread owned by the
manager, started by ``startup`` and stopped by ``shutdown``.  None of it
visits a log that has nothing to do: the logs mark what changed in their dir
(``dirty.py``), so a checkpoint tick rewrites only the checkpoints of dirs
whose offsets moved and the flush tick visits only logs holding records a
finite ``flush.ms`` must flush; retention, producer expiration and the
cleaner pass over a log with a glance at a few attributes.

Thread safety: ``self._lock`` guards the map of logs; each Log guards itself.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import files
from .checkpoints import OffsetCheckpointFile
from .config import LogConfig
from .dir_failure import LogDirFailureChannel
from .dirty import DirtyMarks
from .errors import LogDirError, LogDirOfflineError
from .loading import LogLoadError, run_per_dir
from .log import Clock, Log, wall_clock_ms
from .meta import MetaProperties, read_meta_properties, write_meta_properties
from .producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from .scheduler import Scheduler

logger = logging.getLogger(__name__)

SHUTDOWN_THREADS_PER_DIR = 4  # at least; num.recovery.threads.per.data.dir if more
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
    recovery_threads_per_data_dir: int = 1  # num.recovery.threads.per.data.dir


@dataclass(frozen=True, slots=True)
class _LogToLoad:
    """A partition directory found at start-up, with what the dir's checkpoints say."""

    tp: files.TopicPartition
    directory: Path
    log_dir: Path
    recovery_point: int
    log_start_offset: int
    high_watermark: int | None
    clean: bool


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
        self._load_failed = False  # then nothing may overwrite the dirs' checkpoints
        self._marks = {d: DirtyMarks() for d in self.log_dirs}
        self.cleaner: object | None = None
        # where I/O errors take a log dir offline (storage/dir_failure.py)
        self.failures = LogDirFailureChannel()

    # -- start-up --------------------------------------------------------

    def startup(self) -> None:
        """Check and load every log dir, then start the background work."""
        for log_dir in self.log_dirs:
            self._check_log_dir(log_dir)
        self._load_logs()
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
            self.checkpoint_changed_recovery_points,
            s.flush_recovery_point_interval_ms,
            s.flush_recovery_point_interval_ms,
        )
        self._scheduler.schedule(
            "log-start-offset-checkpoint",
            self.checkpoint_changed_log_start_offsets,
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

    def _load_logs(self) -> None:
        """Load every log of every dir, ``recovery_threads_per_data_dir`` at a time
        per dir.  When any fails, the others are closed again, nothing is
        written (markers and checkpoints stay as they are) and LogLoadError
        names every failed log."""
        started = time.monotonic()
        found = {d: self._scan_log_dir(d) for d in self.log_dirs}
        seen: dict[files.TopicPartition, Path] = {}
        for log_dir, wanted in found.items():
            for plan in wanted:
                if plan.tp in seen:
                    raise LogDirError(
                        f"duplicate log directories for {plan.tp}: {seen[plan.tp]} and {log_dir}"
                    )
                seen[plan.tp] = log_dir
        threads = self.settings.recovery_threads_per_data_dir
        loaded, failed = run_per_dir(found, self._open_found, threads)
        if failed:
            self._load_failed = True
            for _, log in loaded:
                log.close()
            raise LogLoadError([(plan.directory, exc) for plan, exc in failed], len(seen))
        with self._lock:
            for plan, log in loaded:
                self._logs[plan.tp] = log
                self._log_dir_of[plan.tp] = plan.log_dir
        for log_dir in self.log_dirs:
            marker = log_dir / files.CLEAN_SHUTDOWN_FILE
            if marker.exists():
                marker.unlink()
                files.fsync_dir(log_dir)
        logger.info(
            "loaded %d logs from %d log dirs in %.1f s (%d recovery threads per dir)",
            len(loaded),
            len(self.log_dirs),
            time.monotonic() - started,
            threads,
        )

    def _scan_log_dir(self, log_dir: Path) -> list[_LogToLoad]:
        """The partition directories of ``log_dir`` with their checkpointed offsets;
        logs deleted before the last stop are removed, strangers left alone."""
        clean = (log_dir / files.CLEAN_SHUTDOWN_FILE).exists()
        recovery_points = OffsetCheckpointFile(log_dir / files.RECOVERY_POINT_CHECKPOINT).read()
        start_offsets = OffsetCheckpointFile(log_dir / files.LOG_START_OFFSET_CHECKPOINT).read()
        high_watermarks = OffsetCheckpointFile(log_dir / files.REPLICATION_CHECKPOINT).read()
        found = []
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
            found.append(
                _LogToLoad(
                    tp,
                    path,
                    log_dir,
                    recovery_points.get(tp, 0),
                    start_offsets.get(tp, 0),
                    high_watermarks.get(tp),
                    clean,
                )
            )
        return found

    def _open_found(self, plan: _LogToLoad) -> Log:
        """Open (recovering when needed) one log found at start-up; any thread."""
        log = Log.open(
            plan.directory,
            self.default_config,
            recovery_point=plan.recovery_point,
            log_start_offset=plan.log_start_offset,
            had_clean_shutdown=plan.clean,
            time_ms=self._time_ms,
            background=self._scheduler.submit,
            producer_id_expiration_ms=self.settings.producer_id_expiration_ms,
            failure=self.failures,
            marks=self._marks[plan.log_dir],
        )
        hw = plan.high_watermark
        log.update_high_watermark(log.log_end_offset if hw is None else hw)
        return log

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
                if config is not None and config != log.config:
                    log.update_config(config)
                return log
            online = [d for d in self.log_dirs if self.failures.reason(d) is None]
            if not online:
                raise LogDirError(f"cannot create the log of {tp}: every log dir is offline")
            if len(online) == 1:
                log_dir = online[0]
            else:
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
                marks=self._marks[log_dir],
            )
            self._logs[tp] = log
            self._log_dir_of[tp] = log_dir
            self._marks[log_dir].checkpoints_changed()
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
        self._marks[log_dir].checkpoints_changed()  # its entries go
        log.close()
        doomed = log_dir / f"{tp}.{uuid.uuid4().hex}-delete"
        log.directory.rename(doomed)
        files.fsync_dir(log_dir)
        self._scheduler.submit(lambda: shutil.rmtree(doomed, ignore_errors=True))
        if not self._started:
            shutil.rmtree(doomed, ignore_errors=True)
        return True

    # -- background work ---------------------------------------------------

    def compacted_logs(self) -> dict[files.TopicPartition, Log]:
        """The open logs whose cleanup.policy has compact (what the cleaner looks at)."""
        found = [log for marks in self._marks.values() for log in marks.compacted_logs()]
        return {log.topic_partition: log for log in found}

    def online_logs(self) -> dict[files.TopicPartition, Log]:
        """The logs whose dir is online (background work leaves the others alone)."""
        return {tp: log for tp, log in self.all_logs().items() if log.online}

    def cleanup_logs(self) -> int:
        """Retention over every log; returns the number of segments removed."""
        removed = 0
        now = self._time_ms()
        for log in self.all_logs().values():
            if log.retention_due(now) and log.online:
                removed += log.delete_old_segments()
                log.delete_pending_segments()
        return removed

    def remove_expired_producers(self) -> int:
        """Forget, in every log, producers silent for ``producer.id.expiration.ms``."""
        return sum(
            log.remove_expired_producers()
            for log in self.all_logs().values()
            if log.has_producers and log.online
        )

    def flush_dirty_logs(self) -> None:
        """Flush the logs whose ``flush.ms`` has passed; only logs holding unflushed
        records under a finite ``flush.ms`` are looked at."""
        for marks in self._marks.values():
            for log in marks.take_unflushed():
                try:
                    if log.flush_if_due():
                        marks.unflushed(log)
                except LogDirOfflineError:
                    pass  # the dir just went offline (logged once, by the channel)

    def _checkpoint(self, name: str, value: str, mark: str | None = None) -> None:
        """Write the checkpoint ``name`` of every online dir, ``value`` of each log;
        with ``mark`` (a ``DirtyMarks`` attribute) only of the dirs whose logs
        marked it out of date."""
        online = [d for d in self.log_dirs if self.failures.reason(d) is None]
        if mark is not None:
            online = [d for d in online if getattr(self._marks[d], mark)]
            for d in online:
                setattr(self._marks[d], mark, False)  # before reading: see dirty.py
        by_dir: dict[Path, dict[files.TopicPartition, int]] = {d: {} for d in online}
        if not by_dir:
            return
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

    def checkpoint_changed_recovery_points(self) -> None:
        """``checkpoint_recovery_points`` for the dirs where one moved (the timer's)."""
        self._checkpoint(files.RECOVERY_POINT_CHECKPOINT, "recovery_point", "recovery_points")

    def checkpoint_changed_log_start_offsets(self) -> None:
        """``checkpoint_log_start_offsets`` for the dirs where one moved (the timer's)."""
        self._checkpoint(files.LOG_START_OFFSET_CHECKPOINT, "log_start_offset", "log_start_offsets")

    def checkpoint_high_watermarks(self) -> None:
        self._checkpoint(files.REPLICATION_CHECKPOINT, "high_watermark")

    # -- shutdown ------------------------------------------------------------

    def shutdown(self) -> None:
        """Clean stop: flush, checkpoint, close, and leave the clean-shutdown marker."""
        self._scheduler.initiate_shutdown()
        self._scheduler.await_shutdown()
        logs = self.all_logs()
        if self._load_failed:  # the checkpoints hold the logs not loaded: left alone
            for log in logs.values():
                log.close()
            return
        online = list(self.online_logs().values())
        # As Kafka's shutdown, the recovery threads snapshot, flush and close
        # the logs (an idle log has nothing to flush and keeps its snapshot at
        # the log end), but one sync of the file systems then writes what every
        # log holds unwritten: its records, its snapshot, its leader epochs and
        # its trimmed indexes.  Thousands of logs cost one disk flush, not an
        # fsync or three each; each log's flush only moves its recovery point,
        # which reaches the disk in the checkpoint written after the sync.  The
        # work is file creation and truncation in the kernel, outside the
        # interpreter's lock, so it takes more threads than loading does
        # (docs/storage.md, "Flushing"); each thread takes its share of the
        # logs at once.
        workers = max(SHUTDOWN_THREADS_PER_DIR, self.settings.recovery_threads_per_data_dir)
        workers *= len(self.log_dirs)
        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="log-close") as pool:
            list(pool.map(_close_for_shutdown, [online[i::workers] for i in range(workers)]))
        for log in logs.values():
            log.close()  # those of offline dirs; the others are closed already
        closed = time.monotonic()
        os.sync()
        synced = time.monotonic()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        if time.monotonic() - began >= 1.0:
            logger.info(
                "closed %d logs in %.1f s: snapshots, flushes and closes %.1f s, sync %.1f s, "
                "checkpoints %.1f s", len(logs), time.monotonic() - began, closed - began,
                synced - closed, time.monotonic() - synced,
            )  # fmt: skip
        for log_dir in self.log_dirs:
            if self.failures.reason(log_dir) is not None:
                continue  # no clean-shutdown marker: the next start recovers its logs
            try:
                (log_dir / files.CLEAN_SHUTDOWN_FILE).touch()
                files.fsync_dir(log_dir)
            except OSError as exc:
                self.failures.fail(log_dir, f"marking {log_dir} shut down cleanly", exc)
        self._started = False


def _close_for_shutdown(logs: list[Log]) -> None:
    for log in logs:
        try:
            log.take_producer_snapshot(sync=False)  # synced with everything else
            log.flush(synced=True)  # the sync follows, before the recovery point is written
        except LogDirOfflineError:
            pass  # the dir went offline now; it is left for recovery
        log.close(sync_indexes=False)  # written by the sync too
