"""The producer's settings as Kafka's producer checks them (docs/architecture.md):
acks, compression, idempotence and what it needs, and the transactional
producer's (KIP-98: a ``transactional_id`` implies idempotence, hence
``acks="all"``).

Thread safety: pure functions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from annal.storage.batch import Compression

logger = logging.getLogger(__name__)

CODECS = {c.name.lower(): c for c in Compression}
# Kafka's spellings of acks: "all" is -1, the whole ISR.
ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}
MAX_IN_FLIGHT_FOR_IDEMPOTENCE = 5  # Kafka's limit; annal sends one batch per partition anyway
MAX_PRODUCER_EPOCH = 32767
INT32_MAX = 2**31 - 1

Serializer = Callable[[object], bytes | None]


def identity(value: object) -> bytes | None:
    """The default serializer: bytes as they are, text as UTF-8."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"cannot send {type(value).__name__} without a serializer")


def idempotence(
    enabled: bool | None,
    acks: int | None,
    acks_given: object,
    retries: int | None,
    max_in_flight: int | None,
    transactional_id: str | None = None,
) -> bool:
    """Whether the producer is idempotent: ``enabled``, checked against the
    settings it needs; when None, True unless a setting given rules it out.
    A transactional id needs idempotence (Kafka's producer refuses
    ``enable.idempotence=false`` with one, and every setting that rules it out)."""
    conflicts = []
    if acks != -1:
        conflicts.append(f"acks={acks_given!r} (it needs acks='all')")
    if retries is not None and retries < 1:
        conflicts.append(f"retries={retries} (it needs retries > 0)")
    if max_in_flight is not None and max_in_flight > MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
        conflicts.append(
            f"max_in_flight={max_in_flight} (it needs at most {MAX_IN_FLIGHT_FOR_IDEMPOTENCE})"
        )
    if transactional_id is not None:
        if not transactional_id:
            raise ValueError("transactional_id must not be empty (None: no transactions)")
        if enabled is False:
            raise ValueError(
                "transactional_id needs idempotence: leave enable_idempotence at its "
                "default or set it True"
            )
        if conflicts:
            raise ValueError(
                f"transactional_id (which implies idempotence) cannot go with "
                f"{'; '.join(conflicts)}"
            )
        return True
    if enabled is None:
        if conflicts:
            logger.info("idempotence is off: %s", "; ".join(conflicts))
        return not conflicts
    if enabled and conflicts:
        raise ValueError(f"enable_idempotence=True cannot go with {'; '.join(conflicts)}")
    return enabled
