"""The service deployed on separate hosts: one folder, one venv and one daemon per host.

``Deployment`` follows ``docs/tutorials/separate-hosts.md`` ("Installing on a host") for each host of a
``Network``: a fresh venv with the project's wheel, the certificates that host needs and no
other (issued on the operator's host, which keeps the CA, with ``vfl-certs init``, then
``vfl-certs server --dns`` for the server's host name, ``vfl-certs party`` for each party and
``vfl-certs operator`` / ``caller``),
its own table, its config, and its daemon run from its venv inside its namespace. The server
listens on its host's address on the documented ports; the passive parties dial it by host
name, so TLS checks the name against the certificate. The test process only reads the hosts'
folders (logs, checkpoints), as someone with a console on every machine would; every network
call is made from inside a namespace.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from vfltesting.eventually import eventually
from vfltesting.hosts.console import Console
from vfltesting.hosts.install import CLEAN_ENV, install_host
from vfltesting.hosts.network import Host, Network
from vfltesting.service import log_events, toml_text

#: The documented default ports: the hosts are separate, so nothing else holds them.
CONTROL_PORT, GRPC_PORT, REST_PORT = 50051, 8001, 8000
#: Host names, by host key; ``.test`` is reserved for tests (RFC 2606).
HOST_NAMES = {
    "server": "server.vfl.test",
    "party2": "party2.vfl.test",
    "party3": "party3.vfl.test",
    "operator": "operator.vfl.test",
}
PASSIVE = (2, 3)
_ENV = CLEAN_ENV


class Deployment:
    """Every host of ``network`` set up under ``root/<host>``; ``start`` runs the daemons."""

    def __init__(
        self,
        root: Path,
        network: Network,
        wheel: Path,
        data: Path,
        *,
        server: Mapping[str, Any] | None = None,
        client: Mapping[str, Any] | None = None,
        serving: bool = True,
    ) -> None:
        self.root, self.network, self.data = root, network, data
        self.server_settings, self.client_settings = dict(server or {}), dict(client or {})
        self.serving = serving
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.bins = {key: install_host(self.folder(key) / "venv", wheel) for key in network.hosts}
        self._issue_certificates()
        self._place_data()

    # ---- layout -----------------------------------------------------------------------------

    def folder(self, key: str) -> Path:
        """Host ``key``'s own disk: its venv, certificates, data, config, run folder and log."""
        path = self.root / key
        path.mkdir(parents=True, exist_ok=True)
        return path

    def host(self, key: str) -> Host:
        return self.network.hosts[key]

    @property
    def server_address(self) -> str:
        return f"{self.host('server').name}:{CONTROL_PORT}"

    def runs(self, key: str) -> Path:
        return self.folder(key) / "runs"

    def log(self, key: str) -> Path:
        return self.folder(key) / "daemon.log"

    def events(self, key: str, name: str | None = None) -> list[dict[str, Any]]:
        """Host ``key``'s daemon's JSON log events (``name`` only, if given)."""
        return log_events(self.log(key), name)

    def run_on(self, key: str, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """``argv`` (a program of the host's venv and its arguments) run on host ``key``, in its folder."""
        command = self.host(key).command([str(self.bins[key] / argv[0]), *argv[1:]])
        return subprocess.run(command, capture_output=True, text=True, cwd=self.folder(key), env=_ENV, **kwargs)

    def _issue_certificates(self) -> None:
        """The CA stays on the operator's host; each host gets ``ca.pem`` and its own pair only."""
        ca = self.folder("operator") / "ca"
        steps = [
            ["vfl-certs", "init", "--out", str(ca), "--parties", *map(str, PASSIVE)],
            ["vfl-certs", "server", "--out", str(ca), "--dns", self.host("server").name, "--force"],
            # Each party's own certificate, as an operator adds a party to a running project.
            *(["vfl-certs", "party", str(p), "--out", str(ca), "--force"] for p in PASSIVE),
            ["vfl-certs", "operator", "alice", "--out", str(ca)],
            ["vfl-certs", "caller", "scoring-app", "--out", str(ca)],
        ]
        for argv in steps:
            done = self.run_on("operator", argv)
            assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"
        # Each host gets its archive (``vfl-certs bundle``), unpacked into its folder as the
        # archive's README says: the CA certificate and its own pair, never another host's key.
        bundles = self.folder("operator") / "bundles"
        archives = {
            "server": ["--server"],
            **{f"party{p}": ["--party", str(p), "--server-address", self.server_address] for p in PASSIVE},
            "operator": ["--operator", "alice", "--server-address", self.server_address],
            "scoring-app": ["--caller", "scoring-app", "--endpoint", f"{self.host('server').name}:{REST_PORT}"],
        }
        for name, who in archives.items():
            key = "operator" if name == "scoring-app" else name
            argv = ["vfl-certs", "bundle", *who, "--out", str(ca), "--to", str(bundles / name)]
            done = self.run_on("operator", [*argv, "--prefix", str(self.folder(key))])
            assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"
            [archive] = (bundles / name).glob("*.tar.gz")
            with tarfile.open(archive) as unpacked:
                for member in unpacked.getmembers():
                    member.name = member.name.split("/", 1)[1]  # tar --strip-components=1
                    if not (self.folder(key) / member.name).exists():
                        unpacked.extract(member, self.folder(key), filter="data")

    def _place_data(self) -> None:
        for key, party in [("server", 1), *((f"party{p}", p) for p in PASSIVE)]:
            (self.folder(key) / "data").mkdir(exist_ok=True)
            shutil.copy2(self.data / f"party{party}.csv", self.folder(key) / "data" / f"party{party}.csv")

    # ---- configs ----------------------------------------------------------------------------

    def _server_config(self) -> Path:
        here, address = self.folder("server"), self.host("server").address
        document: dict[str, dict[str, Any]] = {
            "server": {
                "listen": f"{address}:{CONTROL_PORT}",
                "run_dir": str(here / "runs"),
                "port_file": str(here / "port"),
                **self.server_settings,
            },
            "tls": {"ca": here / "certs/ca.pem", "cert": here / "certs/server.pem", "key": here / "certs/server.key"},
            "datasets": {"digits": {"path": here / "data/party1.csv", "id_column": "id", "label_column": "label"}},
        }
        if self.serving:
            document["serving"] = {
                "enabled": True,
                "grpc_listen": f"{address}:{GRPC_PORT}",
                "rest_listen": f"{address}:{REST_PORT}",
            }
        path = here / "server.toml"
        path.write_text(toml_text(document))
        return path

    def _client_config(self, party: int) -> Path:
        here = self.folder(f"party{party}")
        certs = here / "certs"
        document: dict[str, dict[str, Any]] = {
            "client": {"server": self.server_address, "party": party, "run_dir": str(here / "runs")}
            | self.client_settings,
            "tls": {"ca": certs / "ca.pem", "cert": certs / f"party-{party}.pem", "key": certs / f"party-{party}.key"},
            "datasets": {"digits": {"path": here / f"data/party{party}.csv", "id_column": "id"}},
        }
        path = here / f"party{party}.toml"
        path.write_text(toml_text(document))
        return path

    # ---- daemons ----------------------------------------------------------------------------

    def start_server(self, timeout_s: float = 120) -> None:
        """vfl-server on the server's host; returns once it listens (its port file is written)."""
        port_file = self.folder("server") / "port"
        port_file.unlink(missing_ok=True)
        self._start("server", ["vfl-server", "--config", str(self._server_config())])
        self.wait_for(lambda: port_file.exists() and bool(port_file.read_text().strip()), "the server to listen",
                      timeout_s, watch="server")  # fmt: skip

    def start_client(self, party: int) -> None:
        key = f"party{party}"
        self._start(key, ["vfl-client", "--party", str(party), "--config", str(self._client_config(party))])

    def start(self) -> None:
        self.start_server()
        for party in PASSIVE:
            self.start_client(party)

    def _start(self, key: str, argv: list[str]) -> None:
        argv = [*argv, "--log-format", "json", "--log-level", "info"]
        command = self.host(key).command([str(self.bins[key] / argv[0]), *argv[1:]])
        with self.log(key).open("ab") as sink:  # `ip netns exec` execs the daemon: its PID is the daemon's
            self.procs[key] = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=sink, cwd=self.folder(key), env=_ENV
            )

    def kill(self, key: str) -> None:
        """kill -9 the daemon of host ``key``, as a crash or a power cut would stop it."""
        self.procs[key].kill()
        self.procs[key].wait()

    def stop(self, timeout_s: float = 60) -> dict[str, int | None]:
        """SIGTERM every daemon still running; kill -9 those still up after ``timeout_s``; their exit codes."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        codes: dict[str, int | None] = {}
        deadline = time.monotonic() + timeout_s
        for key, proc in self.procs.items():
            try:
                codes[key] = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[key] = proc.wait()
        return codes

    def console(self) -> Console:
        """The operator's program on the operator's host, connected to the server by its name."""
        here = self.folder("operator")
        command = self.host("operator").command([str(self.bins["operator"] / "python"), "-m", "vfl_console"])
        endpoint = f"{self.host('server').name}:{GRPC_PORT}"
        return Console(command, here, self.server_address, endpoint, env=_ENV)

    # ---- waiting ----------------------------------------------------------------------------

    def tail(self, lines: int = 25) -> str:
        """The end of every host's daemon log, for a failing test's message."""
        out = []
        for key in self.procs:
            text = self.log(key).read_text(errors="replace").splitlines() if self.log(key).exists() else []
            out.append(f"--- {key} ({self.log(key)}):\n" + "\n".join(text[-lines:]))
        return "\n".join(out)

    def wait_for(self, condition: Callable[[], bool], what: str, timeout_s: float = 120, *, watch: str = "") -> None:
        """Check ``condition`` every 50 ms until it holds; past ``timeout_s`` (or if daemon ``watch`` exits), fail.

        Not more often: most conditions ask the operator's program, which asks the server (a pipe
        round trip, then an RPC over mTLS), and every wait here is for a job's state or a logged
        event, whose time the tests read from the logs, not from when this noticed it.
        """

        def holds() -> bool:
            if watch and self.procs[watch].poll() is not None:
                raise AssertionError(f"{watch}'s daemon exited ({self.procs[watch].returncode}) before {what}\n"
                                     + self.tail())  # fmt: skip
            return condition()

        eventually(holds, what, timeout_s, every=0.05, explain=self.tail)

    def logged(self, key: str, name: str, count: int = 1) -> Callable[[], bool]:
        """A condition: host ``key``'s daemon has logged event ``name`` at least ``count`` times."""
        return lambda: len(self.events(key, name)) >= count
