"""How every ``annal`` command reports a failed request: the error's code and
message, and for the codes a user can act on, what to check next."""

from __future__ import annotations

import sys

from annal import errors
from annal.errors import AnnalError

HINTS = {
    errors.BROKER_NOT_AVAILABLE: (
        "no broker answered: is the cluster up, and is --bootstrap-server "
        "(or --zookeeper) where it listens?"
    ),
    errors.NETWORK_EXCEPTION: "ZooKeeper did not answer: check --zookeeper (host:port[/chroot])",
    errors.REQUEST_TIMED_OUT: "the broker did not answer in time; try again",
    errors.BROKER_BUSY: "the broker is at its request limits (queued.max.requests); try again",
    errors.UNKNOWN_TOPIC_OR_PARTITION: "see the topics there are with: annal topics list",
    errors.LEADER_NOT_AVAILABLE: "leaders are moving (a broker stopped or started); try again",
    errors.NOT_LEADER_OR_FOLLOWER: "leaders are moving (a broker stopped or started); try again",
    errors.NOT_CONTROLLER: "the controller is moving; try again in a moment",
}


# What a message says happened, when it says more than its code: (words, hint).
MESSAGE_HINTS = (
    ("WRONG_VERSION_NUMBER", "the TLS handshake met a listener that does not speak TLS: "
     "a GRPC:// listener takes no security.protocol=SSL in --command-config"),
    ("CERTIFICATE_VERIFY_FAILED", "the broker's certificate is not signed by the CA in "
     "ssl.truststore.location (--command-config)"),
    ("andshake failed", "the TLS handshake failed: check --command-config's CA, and its "
     "client certificate when the broker requires one"),
    ("no live broker with id", "annal cluster status (or topics describe) shows the brokers' ids"),
)  # fmt: skip


def fail(prog: str, exc: BaseException) -> int:
    """Print ``exc`` for the user of ``prog`` (a hint below when one helps) and
    return the exit status of a failed request, 1."""
    print(f"{prog}: {exc}", file=sys.stderr)
    if isinstance(exc, AnnalError):
        text = str(exc)
        hint = next((h for words, h in MESSAGE_HINTS if words in text), None)
        if hint is None:
            hint = HINTS.get(exc.code) or ("it may pass if tried again" if exc.retriable else "")
        if hint:
            print(f"{prog}: hint: {hint}", file=sys.stderr)
    return 1
