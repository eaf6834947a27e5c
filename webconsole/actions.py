"""The console's admin actions, each one request (or a few) to the cluster.

They are made with the console's own credentials (``--command-config``), so
the cluster's ACLs decide (docs/security.md): a refusal comes back as the
cluster's error code (TOPIC_AUTHORIZATION_FAILED, ...) in the outcome's
message, never as an exception.

* create a topic (CreateTopics, as ``kafka-topics.sh --create``);
* set or delete a topic config override (AlterConfigs, as ``kafka-configs.sh``);
* reset a group's committed offsets to the earliest or latest offsets or to
  an offset, only while the group has no live member, as
  ``kafka-consumer-groups.sh --reset-offsets --execute`` (``annal.groupresetcmd``);
* preferred leader election (ElectLeaders, KIP-460; as
  ``kafka-leader-election.sh --election-type PREFERRED``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from annal.admin.client import AdminClient

from annal import errors
from annal.errors import AnnalError


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    message: str


def refused(exc: Exception) -> Outcome:
    """An error as the page shows it: the cluster's code and message, no traceback."""
    return Outcome(False, str(exc) or type(exc).__name__)


def parse_configs(text: str) -> dict[str, str]:
    """``name=value`` pairs, one a line or comma-separated; ValueError naming a bad one."""
    out: dict[str, str] = {}
    for item in text.replace(",", "\n").splitlines():
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"config {item!r} is not name=value")
        out[name.strip()] = value.strip()
    return out


def create_topic(admin: AdminClient, name: str, partitions: int, rf: int, configs: str) -> Outcome:
    try:
        admin.create_topic(name.strip(), partitions, rf, parse_configs(configs))
    except (AnnalError, ValueError) as exc:
        return refused(exc)
    return Outcome(True, f"Topic {name.strip()} created.")


def alter_config(
    admin: AdminClient, topic: str, name: str, value: str, delete: bool
) -> Outcome:
    name = name.strip()
    if not name:
        return Outcome(False, "a config name is needed")
    try:
        if delete:
            admin.alter_configs(topic, delete=[name])
        else:
            admin.alter_configs(topic, set_={name: value})
    except (AnnalError, ValueError) as exc:
        return refused(exc)
    if delete:
        return Outcome(True, f"Override {name} of topic {topic} deleted.")
    return Outcome(True, f"Topic {topic}: {name}={value} set.")


def elect_preferred(admin: AdminClient, topic: str | None) -> Outcome:
    try:
        outcomes = admin.elect_preferred_leaders({topic: []} if topic else None)
    except AnnalError as exc:
        return refused(exc)
    elected = [o for o in outcomes if o.error is errors.NONE]
    not_needed = [o for o in outcomes if o.error is errors.ELECTION_NOT_NEEDED]
    failed = [o for o in outcomes if o not in elected and o not in not_needed]
    text = f"Preferred leader election: {len(elected)} partition(s) elected"
    text += f", {len(not_needed)} already led by their preferred replica"
    if failed:
        text += "; failed: " + "; ".join(
            f"{o.topic}-{o.partition}: {o.error.name} {o.message}".rstrip() for o in failed[:10]
        )
    return Outcome(not failed, text + ".")


def reset_offsets(
    bootstrap: str, zk: Any, group: str, topic: str, to: str, offset: int | None
) -> Outcome:
    """Commit new offsets for ``group``'s partitions of ``topic`` (``to``: earliest,
    latest or offset), refused while the group has live members."""
    from annal.consumer.group_offsets import GroupOffsets
    from annal.consumer.simple import SimpleConsumer

    from annal import groupresetcmd

    if to not in ("earliest", "latest", "offset"):
        return Outcome(False, f"unknown reset {to!r}: earliest, latest or offset")
    if to == "offset" and offset is None:
        return Outcome(False, "a reset to an offset needs the offset")
    args = argparse.Namespace(
        group=group, topic=[topic.strip()], all_topics=False, from_file=None,
        to_earliest=to == "earliest", to_latest=to == "latest",
        to_offset=offset if to == "offset" else None, to_datetime=None, by_duration=None,
        to_current=False, shift_by=None,
    )  # fmt: skip
    try:
        with GroupOffsets(bootstrap, group, timeout_s=10) as offsets:
            members = groupresetcmd.live_members(offsets, zk)
            if members:
                return Outcome(False, f"Group {group} has {len(members)} live member(s); "
                               "offsets can only be reset while it is inactive: stop its "
                               "consumers first.")  # fmt: skip
            with SimpleConsumer(bootstrap, timeout_s=10) as consumer:
                resets = groupresetcmd.plan(args, offsets, consumer)
            offsets.commit({r.tp: r.new for r in resets})
    except (AnnalError, ValueError) as exc:
        return refused(exc)
    moved = ", ".join(f"{r.tp.topic}-{r.tp.partition}: {r.new}" for r in resets[:20])
    return Outcome(True, f"Offsets of group {group} reset: {moved or 'no partitions'}.")
