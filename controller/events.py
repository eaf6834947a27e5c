"""The controller's events, its settings, and the seams it is built with.

``Event`` is what the watches, the session listener and the timers put on
the controller's queue (see ``controller.py``); ``RequestGate`` is its hold
on the requests queued to brokers (``channel.ControllerChannel`` in a broker).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol


class Event(enum.Enum):
    ELECT = "elect"
    RECONNECTED = "reconnected"
    SESSION_LOST = "session-lost"
    RELOAD = "reload"
    BROKER_CHANGE = "broker-change"
    TOPIC_CHANGE = "topic-change"
    PARTITION_CHANGE = "partition-change"
    TOPIC_DELETION = "topic-deletion"
    ISR_CHANGE = "isr-change"
    PREFERRED_ELECTION = "preferred-election"
    REASSIGNMENT = "reassignment"
    AUTO_REBALANCE = "auto-rebalance"
    CONTROLLED_SHUTDOWN = "controlled-shutdown"
    LOG_DIR_EVENT = "log-dir-event"
    OFFLINE_REPLICAS = "offline-replicas"
    SHUTDOWN = "shutdown"


@dataclass(frozen=True, slots=True)
class RebalanceSettings:
    """Kafka's auto.leader.rebalance.enable and leader.imbalance.* settings."""

    enabled: bool = True
    check_interval_s: float = 300.0
    per_broker_percentage: int = 10


class RequestGate(Protocol):
    """The controller's hold on the requests it queued to brokers (its channel)."""

    def hold(self) -> None:
        """Queued requests wait (the session is suspended); must not block."""

    def release(self) -> None:
        """Queued requests go out again."""

    def discard(self) -> None:
        """Drop every queued request (the controller resigned)."""


class _OpenGate:
    def hold(self) -> None:
        pass

    def release(self) -> None:
        pass

    def discard(self) -> None:
        pass


class NotInOffice(Exception):
    """The controller may not act: its session was lost, ``/controller`` or
    ``/controller_epoch`` moved on, or it is stopping.  The event loop resigns."""
