"""How a follower reaches its leaders' Kafka listener: which one, and as whom (docs/security.md).

``inter.broker.listener.name`` names the listener followers fetch over: the
gRPC listener (``GRPC``/``GRPCS``), or one of the broker's Kafka listeners,
whose name every broker uses (a leader without a listener of that name is
fetched from over gRPC).  Over a Kafka listener the follower is a client
like any other, with the listener's security protocol:

* ``SSL``/``SASL_SSL``: TLS, trusting ``ssl.truststore.location`` (the
  listener's, else the system's CAs) and presenting the listener's keystore
  (its own certificate); the leader's host name is checked against its
  certificate unless ``ssl.endpoint.identification.algorithm`` is empty.
* ``SASL_PLAINTEXT``/``SASL_SSL``: a SASL login with
  ``sasl.mechanism.inter.broker.protocol`` (by default the listener's first
  enabled mechanism) as the user of the JAAS line
  ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (Kafka's name;
  ``sasl.jaas.config`` for every listener).  That user fetches as a replica,
  so it needs ClusterAction on the cluster: make it a super user.

When gRPC is served over TLS (``GRPCS``), followers must not copy records
over a listener without TLS.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from annal.broker.listeners import (
    GRPC,
    GRPCS,
    LISTENER_PREFIX,
    PLAINTEXT,
    KafkaListenerConfig,
    Listener,
    ListenerError,
)
from annal.kafkaproto.client_security import ConnectionSecurity, SaslLogin
from annal.security.jaas import jaas_login

JAAS = "sasl.jaas.config"


def inter_broker_listener(
    named: str | None, listener: Listener, kafka: tuple[KafkaListenerConfig, ...]
) -> str:
    """The listener followers fetch over, checked against the broker's own (see the
    module docstring); by default PLAINTEXT (GRPCS when gRPC is over TLS)."""
    where = f"inter.broker.listener.name={named}"
    if named is None:
        return GRPCS if listener.protocol == GRPCS else PLAINTEXT
    if named in (GRPC, GRPCS):
        if named != listener.protocol:
            raise ListenerError(f"{where}: the gRPC listener is {listener}")
        return named
    found = next((k for k in kafka if k.name == named), None)
    if found is None:
        names = [listener.protocol, *(k.name for k in kafka)]
        raise ListenerError(f"{where}: listeners has no {named}:// listener (it has {names})")
    if listener.protocol == GRPCS and found.tls is None:
        raise ListenerError(
            f"{where} ({found.security_protocol}) with {listener}: replicas would copy records "
            "unencrypted; use GRPCS or a listener with TLS, or serve gRPC without TLS"
        )
    return named


def replica_connection_security(
    named: str,
    kafka: tuple[KafkaListenerConfig, ...],
    values: Mapping[str, Any],
    raw: Mapping[str, str],
) -> ConnectionSecurity | None:
    """How a follower connects to the leaders' ``named`` listener; None when it
    fetches over gRPC."""
    if named in (GRPC, GRPCS):
        return None
    found = next((k for k in kafka if k.name == named), None)
    if found is None:  # the default, PLAINTEXT, which this broker does not serve itself
        return ConnectionSecurity()
    cafile = certfile = None
    if found.tls is not None:
        cafile, certfile = found.tls.truststore, found.tls.keystore
    login = None
    if found.sasl:
        login = _login(found, values, raw)
    return ConnectionSecurity(
        found.security_protocol,
        cafile,
        certfile,
        certfile,
        login,
        check_hostname=bool(values["ssl.endpoint.identification.algorithm"].strip()),
    )


def _login(
    found: KafkaListenerConfig, values: Mapping[str, Any], raw: Mapping[str, str]
) -> SaslLogin:
    where = f"inter.broker.listener.name={found.name} ({found.security_protocol})"
    mechanism = values["sasl.mechanism.inter.broker.protocol"] or found.sasl_mechanisms[0]
    if mechanism not in found.sasl_mechanisms:
        raise ListenerError(
            f"sasl.mechanism.inter.broker.protocol={mechanism}: listener {found.name} "
            f"offers {', '.join(found.sasl_mechanisms)}"
        )
    key = f"{LISTENER_PREFIX}{found.name.lower()}.{mechanism.lower()}.{JAAS}"
    text = raw.get(key) or raw.get(JAAS, "")
    user, password = jaas_login(text)
    if not user or password is None:
        raise ListenerError(
            f"{where}: brokers log in to each other with {mechanism}; set {key} (or {JAAS}) "
            'to a JAAS line with username="..." password="..."'
            + (" (the one given lacks them)" if text else "")
        )
    return SaslLogin(mechanism, user, password)
