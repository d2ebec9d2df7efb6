"""One archive per host: what ``vfl-certs bundle`` hands each party, the server, an operator or a caller.

A deployment spreads over hosts that belong to different organisations, and each needs its own
key, its certificate, the CA's certificate, a config and a way to run the daemon, and nothing of
anyone else's. Copying files out of ``certs/`` by hand is where a key ends up on the wrong host.
So the CA's holder runs ``vfl-certs bundle`` once per host and sends each archive to its owner:

- ``--party N``: ``certs/ca.pem``, ``party-N.pem``, ``party-N.key``; ``partyN.toml`` dialling the
  server's address; ``vfl-client@.service``; ``README.txt``.
- ``--server``: ``ca.pem``, ``server.pem``, ``server.key``; ``server.toml`` listening on every
  interface; ``vfl-server.service``; ``README.txt``.
- ``--operator NAME`` and ``--caller NAME``: ``ca.pem``, ``NAME.pem``, ``NAME.key`` and a
  ``README.txt`` of the commands (``vfl-jobs``, the console; the inference endpoint).

Never in an archive: the CA's key, or any key but the host's own. Keys are stored with mode
0600 (and the tar headers say so), the rest 0644. The configs use absolute paths under
``prefix`` (default ``/etc/vfl``), and the unit's ``--config`` names the config there, so an
archive unpacked there runs as it is; the data paths are placeholders the owner fills in. The
run directory is ``/var/lib/vfl/runs`` under the default prefix and ``<prefix>/runs`` under
another (an install kept in one folder), unless ``run_dir`` says; the config's ``run_dir`` and
the unit's ``WorkingDirectory`` and ``ReadWritePaths`` follow it.
"""

from __future__ import annotations

import io
import re
import tarfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath

from vflcore.security.certs import CertsError

#: Where an unpacked archive's files live on its host, and where the systemd units look for them.
DEFAULT_PREFIX = PurePosixPath("/etc/vfl")
#: The run directory under the default prefix; the systemd units' own paths are these two.
DEFAULT_RUN_DIR = PurePosixPath("/var/lib/vfl/runs")
DEFAULT_LISTEN = "0.0.0.0:50051"
KEY_MODE, FILE_MODE = 0o600, 0o644


@dataclass(frozen=True)
class Member:
    """One file of an archive: its name inside the archive's folder, its bytes, its mode."""

    name: str
    data: bytes
    mode: int = FILE_MODE


@dataclass(frozen=True)
class Bundle:
    """What goes to one host: a folder name and its files."""

    folder: str
    members: tuple[Member, ...]

    def write(self, out: Path) -> Path:
        """``<out>/<folder>.tar.gz``, written with mode 0600 (it holds a key); returns its path."""
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{self.folder}.tar.gz"
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            now = int(time.time())
            for member in self.members:
                info = tarfile.TarInfo(f"{self.folder}/{member.name}")
                info.size, info.mode, info.mtime = len(member.data), member.mode, now
                archive.addfile(info, io.BytesIO(member.data))
        path.touch(mode=KEY_MODE, exist_ok=True)
        path.chmod(KEY_MODE)
        path.write_bytes(buffer.getvalue())
        return path


def _read(certs: Path, name: str, how: str) -> bytes:
    path = certs / name
    if not path.is_file():
        raise CertsError(f"{path} does not exist; issue it first with: {how} (or pass the folder with --out)")
    return path.read_bytes()


def _identity(certs: Path, stem: str, how: str) -> tuple[Member, ...]:
    """The CA's certificate and the host's own certificate and key: never another host's, never the CA's key."""
    return (
        Member("certs/ca.pem", _read(certs, "ca.pem", "vfl-certs init")),
        Member(f"certs/{stem}.pem", _read(certs, f"{stem}.pem", how)),
        Member(f"certs/{stem}.key", _read(certs, f"{stem}.key", how), KEY_MODE),
    )


def run_dir_for(prefix: PurePosixPath, run_dir: PurePosixPath | None = None) -> PurePosixPath:
    """``run_dir`` if given; else ``/var/lib/vfl/runs`` under the default prefix, ``<prefix>/runs`` under another."""
    if run_dir is not None:
        return run_dir
    return DEFAULT_RUN_DIR if prefix == DEFAULT_PREFIX else prefix / "runs"


def _unit(name: str, prefix: PurePosixPath, run_dir: PurePosixPath) -> Member:
    """The shipped unit with its config folder and its writable folder moved where the archive puts them.

    The shipped unit writes in ``/var/lib/vfl``, the run directory's parent (the vfl user's home);
    with another run directory it writes in that directory only.
    """
    text = resources.files("vflcore.deploy").joinpath(name).read_text()
    home = DEFAULT_RUN_DIR.parent if run_dir == DEFAULT_RUN_DIR else run_dir
    moved = {str(DEFAULT_RUN_DIR.parent): str(home), str(DEFAULT_PREFIX): str(prefix)}
    text = re.sub("|".join(map(re.escape, moved)), lambda found: moved[found.group()], text)  # one pass
    return Member(name, text.encode())


#: Step 1 of every daemon host's README: from the wheelhouse, which needs no package index.
INSTALL_STEP = """1. Install the product. Copy the wheelhouse here (made once with `make wheelhouse` on a machine
   that reaches the package index: the wheel, CPU torch and every dependency), then, offline:
     python3 -m venv /opt/vfl/venv
     /opt/vfl/venv/bin/pip install --no-index --find-links wheelhouse vfl-service
   (docs/tutorials/separate-hosts.md, "Installing on a host", has the same with a package index instead.)"""


def _run_dir_step(run_dir: PurePosixPath) -> str:
    return f"sudo install -d -o vfl -g vfl {run_dir}   (the run directory, the vfl user's to write)"


def party_bundle(
    certs: Path,
    party: int,
    server_address: str,
    prefix: PurePosixPath = DEFAULT_PREFIX,
    run_dir: PurePosixPath | None = None,
) -> Bundle:
    certs_at, runs = prefix / "certs", run_dir_for(prefix, run_dir)
    config = f"""# Passive party {party}'s daemon: vfl-client --party {party} --config {prefix}/party{party}.toml
# Written by vfl-certs bundle. Fill in the data paths, then see README.txt.

[client]
server = "{server_address}"   # the active party's vfl-server
party = {party}
run_dir = "{runs}"

[tls]
ca = "{certs_at}/ca.pem"
cert = "{certs_at}/party-{party}.pem"
key = "{certs_at}/party-{party}.key"

# The tables jobs may name. [data] is the one named "default"; a job file says dataset = "...".
[data]
path = "/srv/vfl/party{party}.csv"   # FILL IN: this party's table (CSV or Parquet)
id_column = "id"
"""
    readme = f"""Party {party}'s host: what is here and what to run.

  certs/ca.pem, certs/party-{party}.pem   the project CA and this party's certificate
  certs/party-{party}.key                this party's private key (mode 0600); no other host has it
  party{party}.toml                      the daemon's config: it dials {server_address}
  vfl-client@.service             the systemd unit (instance = the party id)

{INSTALL_STEP}
2. sudo mkdir -p {prefix} && sudo tar -xzf vfl-party-{party}.tar.gz -C {prefix} --strip-components=1
   sudo chown -R root:vfl {prefix} && sudo chmod 0640 {prefix}/certs/party-{party}.key
   (the key stays unreadable to anyone but root and the vfl user the unit runs as)
   {_run_dir_step(runs)}
3. Edit {prefix}/party{party}.toml: the path of this party's table.
4. sudo cp {prefix}/vfl-client@.service /etc/systemd/system/ && sudo systemctl daemon-reload
   sudo systemctl enable --now vfl-client@{party}
5. journalctl -u vfl-client@{party} -f shows it connect and wait for jobs.

docs/tutorials/separate-hosts.md ("Installing on a host", "Three hosts from the archives") has the whole walk.
"""
    members = (
        *_identity(certs, f"party-{party}", f"vfl-certs party {party}"),
        Member(f"party{party}.toml", config.encode()),
        _unit("vfl-client@.service", prefix, runs),
        Member("README.txt", readme.encode()),
    )
    return Bundle(f"vfl-party-{party}", members)


def server_bundle(
    certs: Path,
    listen: str = DEFAULT_LISTEN,
    prefix: PurePosixPath = DEFAULT_PREFIX,
    run_dir: PurePosixPath | None = None,
) -> Bundle:
    certs_at, runs = prefix / "certs", run_dir_for(prefix, run_dir)
    config = f"""# The active party's service: vfl-server --config {prefix}/server.toml
# Written by vfl-certs bundle. Fill in the datasets, then see README.txt.

[server]
listen = "{listen}"
run_dir = "{runs}"

[tls]
ca = "{certs_at}/ca.pem"
cert = "{certs_at}/server.pem"
key = "{certs_at}/server.key"

[datasets]
default = {{ path = "/srv/vfl/party1.csv", id_column = "id", label_column = "label" }}   # FILL IN

[serving]
enabled = true
grpc_listen = "0.0.0.0:8001"
rest_listen = "0.0.0.0:8000"

# The operators' console, over mutual TLS with operator certificates (docs/how-to/console.md).
[console]
enabled = false
listen = "0.0.0.0:8443"
"""
    readme = f"""The server's host (the active party): what is here and what to run.

  certs/ca.pem, certs/server.pem   the project CA and the server's certificate (its host names)
  certs/server.key                 the server's private key (mode 0600); no other host has it
  server.toml                      the service's config: it listens on {listen}
  vfl-server.service               the systemd unit

{INSTALL_STEP}
2. sudo mkdir -p {prefix} && sudo tar -xzf vfl-server.tar.gz -C {prefix} --strip-components=1
   sudo chown -R root:vfl {prefix} && sudo chmod 0640 {prefix}/certs/server.key
   {_run_dir_step(runs)}
3. Edit {prefix}/server.toml: the labelled table(s) under [datasets]; [console] if operators use it.
4. sudo cp {prefix}/vfl-server.service /etc/systemd/system/ && sudo systemctl daemon-reload
   sudo systemctl enable --now vfl-server
5. Operators submit jobs with vfl-jobs (their own archive, vfl-certs bundle --operator NAME).
"""
    members = (
        *_identity(certs, "server", "vfl-certs server --dns HOST"),
        Member("server.toml", config.encode()),
        _unit("vfl-server.service", prefix, runs),
        Member("README.txt", readme.encode()),
    )
    return Bundle("vfl-server", members)


def operator_bundle(certs: Path, name: str, server_address: str, console: str | None = None) -> Bundle:
    host = server_address.rpartition(":")[0] or server_address
    readme = f"""Operator {name}: submit, list, watch and cancel jobs on the server at {server_address}.

  certs/ca.pem, certs/{name}.pem   the project CA and your certificate
  certs/{name}.key                 your private key (mode 0600)

  export VFL_SERVER={server_address} VFL_CA=$PWD/certs/ca.pem
  export VFL_CERT=$PWD/certs/{name}.pem VFL_KEY=$PWD/certs/{name}.key
  vfl-jobs list
  vfl-jobs submit job.toml --watch

The console (if the server enables it): https://{console or host + ":8443"}/ in a browser holding
certs/{name}.pem and certs/{name}.key as its client certificate (see docs/how-to/console.md).
"""
    members = (*_identity(certs, name, f"vfl-certs operator {name}"), Member("README.txt", readme.encode()))
    return Bundle(f"vfl-operator-{name}", members)


def caller_bundle(certs: Path, name: str, endpoint: str) -> Bundle:
    readme = f"""Inference caller {name}: ask the server's endpoint at {endpoint} for predictions.

  certs/ca.pem, certs/{name}.pem   the project CA and your certificate
  certs/{name}.key                 your private key (mode 0600)

  curl --cacert certs/ca.pem --cert certs/{name}.pem --key certs/{name}.key https://{endpoint}/v2/health/ready

The request format is KServe v2 (docs/reference/inference.md); tritonclient works as it is.
"""
    members = (*_identity(certs, name, f"vfl-certs caller {name}"), Member("README.txt", readme.encode()))
    return Bundle(f"vfl-caller-{name}", members)


__all__ = [
    "DEFAULT_LISTEN",
    "DEFAULT_PREFIX",
    "DEFAULT_RUN_DIR",
    "INSTALL_STEP",
    "Bundle",
    "Member",
    "caller_bundle",
    "operator_bundle",
    "party_bundle",
    "run_dir_for",
    "server_bundle",
]
