"""The user and password of a ``sasl.jaas.config`` setting (Java's JAAS login syntax).

Kafka's clients, and its brokers as clients of each other, say who they log
in as with one line such as::

    org.apache.kafka.common.security.scram.ScramLoginModule required
        username="alice" password="alice-secret";

Only the ``username`` and ``password`` options matter here (PLAIN's and
SCRAM's login modules take the same two); other options are ignored.  Values
are quoted as Java quotes them: a backslash escapes the next character.
"""

from __future__ import annotations

import re

_OPTION = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


def jaas_login(text: str) -> tuple[str | None, str | None]:
    """``(username, password)`` of a ``sasl.jaas.config`` value; None for a missing one."""
    found = {key: re.sub(r"\\(.)", r"\1", value) for key, value in _OPTION.findall(text)}
    return found.get("username"), found.get("password")
