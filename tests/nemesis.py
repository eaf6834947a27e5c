"""A network cut between processes on one machine: one broker loses ZooKeeper
and its peers, while clients still reach it.

    with NetworkCut() as cut:
        cut.isolate(victim_pid, peer_pids, zookeeper_port)   # the partition
        ...
        cut.heal()

Every process on 127.0.0.1 shares the loopback device, so addresses cannot
tell them apart.  Their sockets can: each cut process is put in a cgroup of
the ``net_cls`` controller, which marks its packets with a class id, and an
nftables table drops, on the output hook,

* the victim's packets to ZooKeeper's port and to its peers' listening ports
  (its session goes silent; its fetchers and requests to peers stall), and
* the peers' packets to the victim's listening ports (the controller's
  requests and the followers' fetches stall),

as a firewall between hosts would.  Established connections are not reset:
they go silent, and each side's own timeouts notice, as in a real partition.
The test process (clients) stays in the root cgroup and is not cut.

Needs root, nftables (``nft``; ``make setup`` installs it) and the
``net_cls`` cgroup controller (mounted here when no hierarchy has it).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import TracebackType

from environment import require_command, unavailable

TABLE = "annal_nemesis"
VICTIM_CLASS = 0x00A10001
PEER_CLASS = 0x00A10002
_OWN_MOUNT = Path("/run/annal-nemesis-net_cls")


def _net_cls_root() -> Path:
    """Where the net_cls controller is mounted (mounting it when nowhere)."""
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if fields[2] == "cgroup" and "net_cls" in fields[3].split(","):
            return Path(fields[1])
    _OWN_MOUNT.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "cgroup", "-o", "net_cls", "net_cls", str(_OWN_MOUNT)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        unavailable(f"cannot mount the net_cls cgroup controller: {done.stderr.strip()}")
    return _OWN_MOUNT


def listening_ports(pid: int) -> set[int]:
    """The TCP ports ``pid`` listens on (its sockets, matched in /proc/net/tcp)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class NetworkCut:
    """See the module docstring.  Not thread-safe: one test drives it."""

    def __init__(self) -> None:
        if os.geteuid() != 0:
            unavailable("a network cut needs root (cgroups and nftables)")
        self._nft = require_command("nft")
        self._root = _net_cls_root()
        self._groups: dict[int, Path] = {}
        self._moved: list[int] = []

    def __enter__(self) -> NetworkCut:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.heal()

    def _group(self, class_id: int) -> Path:
        group = self._groups.get(class_id)
        if group is None:
            group = self._root / f"annal-nemesis-{class_id:08x}"
            group.mkdir(exist_ok=True)
            (group / "net_cls.classid").write_text(str(class_id))
            self._groups[class_id] = group
        return group

    def _move(self, pid: int, class_id: int) -> None:
        (self._group(class_id) / "cgroup.procs").write_text(str(pid))
        self._moved.append(pid)

    def _run(self, script: str) -> None:
        done = subprocess.run([self._nft, "-f", "-"], input=script, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"nft refused the rules: {done.stderr.strip()}\n{script}")

    def isolate(self, victim: int, peers: list[int], zookeeper_port: int) -> None:
        """Cut process ``victim`` off from ZooKeeper and from ``peers`` (pids)."""
        victim_ports = listening_ports(victim)
        peer_ports = set().union(*(listening_ports(p) for p in peers)) if peers else set()
        self._move(victim, VICTIM_CLASS)
        for pid in peers:
            self._move(pid, PEER_CLASS)
        out = ", ".join(str(p) for p in sorted({zookeeper_port} | peer_ports))
        back = ", ".join(str(p) for p in sorted(victim_ports))
        self._run(
            f"table inet {TABLE} {{\n"
            "  chain out {\n"
            "    type filter hook output priority 0; policy accept;\n"
            f"    meta cgroup {VICTIM_CLASS} tcp dport {{ {out} }} drop\n"
            f"    meta cgroup {PEER_CLASS} tcp dport {{ {back} }} drop\n"
            "  }\n"
            "}\n"
        )

    def heal(self) -> None:
        """Drop the rules and put every moved process back; safe to call twice."""
        subprocess.run([self._nft, "delete", "table", "inet", TABLE], capture_output=True)
        for pid in self._moved:
            try:
                (self._root / "cgroup.procs").write_text(str(pid))
            except OSError:
                pass  # it ended meanwhile
        self._moved.clear()
        for group in self._groups.values():
            try:
                group.rmdir()
            except OSError:
                pass
        self._groups.clear()
