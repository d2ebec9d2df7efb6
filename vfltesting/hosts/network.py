"""Hosts on a switch, as network namespaces joined by veth links that a test can cut or slow down.

Each host is a namespace with a loopback of its own and one interface, ``eth0``, whose other end
is a port of a bridge in a namespace of its own (the switch). Nothing is added to the machine's
own namespace: no address, no route, no link, so the tests can neither reach nor disturb the
machine's real network, and a party can reach another only through the switch (each host's
loopback is its own). Host names resolve through ``/etc/netns/<namespace>/hosts``, which
``ip netns exec`` bind-mounts over ``/etc/hosts`` for every command it runs there.

A fault is set on the switch's side of a host's link, as a pulled cable or a dead switch port
would be: ``cut`` takes that port down, so every frame to and from the host is dropped and the
host's own ``eth0`` loses its carrier; neither end gets a reset. ``throttle`` puts a token bucket
filter (``tc tbf``; netem is not available on these machines) on both ends of the link.

Every name carries the creating process's PID and a random tag, so that two test runs on one
machine do not collide, and ``Network.close`` deletes every namespace and hosts file it made.
A run that was killed before it could clean up leaves namespaces whose PID is gone: the next
``Network`` deletes those.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

#: Where ``ip netns exec`` looks for per-namespace files to bind-mount over ``/etc``.
NETNS_ETC = Path("/etc/netns")
#: Every namespace this module makes starts with this, then the PID of the process that made it.
PREFIX = "vflh"
_OURS = re.compile(rf"^{PREFIX}-(\d+)-[0-9a-f]+-")
#: The switch's subnet; it exists only inside the namespaces made here.
SUBNET = "10.231.0"
#: The bridge inside the switch namespace.
BRIDGE = "switch"


class NetworkError(RuntimeError):
    """A command that sets up or changes the network failed; the message has its output."""


def cannot_make_namespaces() -> str | None:
    """Why network namespaces cannot be made here (None: they can): the tests' skip reason."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add); this process runs as uid " + str(os.geteuid())
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian: apt-get install -y iproute2)"
    probe = f"{PREFIX}-{os.getpid()}-probe{secrets.token_hex(2)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


@dataclass(frozen=True)
class Host:
    """One machine: its namespace, host name, address, and the switch port its cable plugs into."""

    key: str
    name: str
    namespace: str
    address: str
    port: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run on this host: inside its namespace, with its hosts file as ``/etc/hosts``."""
        return ["ip", "netns", "exec", self.namespace, *argv]


def _ip(*args: str) -> None:
    _run(["ip", *args])


def _run(argv: Sequence[str]) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True)
    if done.returncode != 0:
        raise NetworkError(f"`{' '.join(argv)}` exited {done.returncode}: {done.stderr.strip()}")


class Network:
    """Hosts keyed by a short name (``server``, ``party2``, ...) on one switch; a context manager.

    ``names`` maps each key to the host name the others know it by (``server.vfl.test``).
    """

    def __init__(self, names: dict[str, str]) -> None:
        remove_stale_namespaces()
        self.tag = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}"
        self.switch = f"{self.tag}-switch"
        self.hosts = {
            key: Host(key, name, f"{self.tag}-{key}", f"{SUBNET}.{i + 1}", f"p-{key}"[:15])
            for i, (key, name) in enumerate(names.items())
        }
        self._made: list[str] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        self._add_namespace(self.switch)
        _ip("-n", self.switch, "link", "add", BRIDGE, "type", "bridge")
        _ip("-n", self.switch, "link", "set", BRIDGE, "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(f"{h.address} {h.name}\n" for h in self.hosts.values())
        for host in self.hosts.values():
            self._add_namespace(host.namespace)
            etc = NETNS_ETC / host.namespace
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts_file)
            _ip("-n", self.switch, "link", "add", host.port, "type", "veth", "peer", "name", "eth0")
            _ip("-n", self.switch, "link", "set", "eth0", "netns", host.namespace)
            _ip("-n", self.switch, "link", "set", host.port, "master", BRIDGE, "up")
            _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _ip("-n", host.namespace, "link", "set", "eth0", "up")

    def _add_namespace(self, namespace: str) -> None:
        _ip("netns", "add", namespace)
        self._made.append(namespace)
        _ip("-n", namespace, "link", "set", "lo", "up")

    # ---- faults -----------------------------------------------------------------------------

    def cut(self, key: str) -> None:
        """Take host ``key``'s switch port down: its link is dead both ways, with no reset sent."""
        _ip("-n", self.switch, "link", "set", self.hosts[key].port, "down")

    def restore(self, key: str) -> None:
        """Bring host ``key``'s switch port up again."""
        _ip("-n", self.switch, "link", "set", self.hosts[key].port, "up")

    @contextlib.contextmanager
    def link_down(self, key: str) -> Iterator[None]:
        """Host ``key``'s link down inside the block, up again on leaving it, whatever happened."""
        self.cut(key)
        try:
            yield
        finally:
            self.restore(key)

    def throttle(self, key: str, *, rate: str, burst: str, latency: str) -> None:
        """A token bucket on both ends of host ``key``'s link (``tc qdisc ... tbf``), e.g. rate "2mbit"."""
        host = self.hosts[key]
        for namespace, dev in ((host.namespace, "eth0"), (self.switch, host.port)):
            tbf = ["tbf", "rate", rate, "burst", burst, "latency", latency]
            _run(["tc", "-n", namespace, "qdisc", "replace", "dev", dev, "root", *tbf])

    def unthrottle(self, key: str) -> None:
        host = self.hosts[key]
        for namespace, dev in ((host.namespace, "eth0"), (self.switch, host.port)):
            _run(["tc", "-n", namespace, "qdisc", "del", "dev", dev, "root"])

    # ---- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Delete every namespace (their links go with them) and hosts file this network made."""
        for namespace in reversed(self._made):
            subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)
            shutil.rmtree(NETNS_ETC / namespace, ignore_errors=True)
        self._made.clear()

    def __enter__(self) -> Network:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def remove_stale_namespaces() -> list[str]:
    """Delete the namespaces (and hosts files) of runs whose process is gone; returns their names."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
    stale = []
    for line in listed:
        name = line.split(" ")[0]
        found = _OURS.match(name)
        if found and not Path(f"/proc/{found.group(1)}").exists():
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
            shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
            stale.append(name)
    return stale
