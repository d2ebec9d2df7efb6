"""The ``vfl-certs`` command: create the project CA and issue server, party, operator and caller certificates.

    vfl-certs init --out certs [--dns NAME ...] [--ip ADDR ...] [--parties 2 3] [--force]
    vfl-certs server --out certs --dns vfl.example.org --ip 10.0.0.5 [--force]
    vfl-certs party N --out certs [--force]
    vfl-certs operator NAME --out certs [--force]    # submits and manages jobs, not a party
    vfl-certs caller NAME --out certs [--force]      # an inference caller, not a party
    vfl-certs show FILE.pem

Every run says in plain words which files it wrote or kept. A problem is one line on stderr that
names the file and what to do, with exit status 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import sys
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from vflcore.security.bundle import (
    DEFAULT_LISTEN,
    DEFAULT_PREFIX,
    DEFAULT_RUN_DIR,
    caller_bundle,
    operator_bundle,
    party_bundle,
    server_bundle,
)
from vflcore.security.certs import (
    CA_CERT_FILE,
    CA_KEY_FILE,
    SERVER_STEM,
    CertificateAuthority,
    CertsError,
    IssuedCert,
    create_ca,
    is_ca,
    is_signed_by,
    issue_caller_cert,
    issue_operator_cert,
    issue_party_cert,
    issue_server_cert,
    load_ca,
    load_certificate,
)
from vflcore.security.identity import (
    caller_from_certificate,
    operator_from_certificate,
    party_common_name,
    party_from_certificate,
)

_DEFAULT_DNS = ("localhost",)
_DEFAULT_IPS = ("127.0.0.1",)
_USAGE_ERROR = 2


def main(argv: list[str] | None = None) -> int:
    """Run ``vfl-certs`` with ``argv`` (default: the process arguments); return the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors; keep that out of callers
        return exc.code if isinstance(exc.code, int) else _USAGE_ERROR
    try:
        run: Callable[[argparse.Namespace], None] = args.run
        run(args)
    except CertsError as exc:
        print(f"vfl-certs: {exc}", file=sys.stderr)
        return _USAGE_ERROR
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vfl-certs", description="Issue the certificates of a VFL project.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = commands.add_parser("init", help="create the CA, the server certificate and party certificates")
    _add_out(init)
    _add_names(init)
    init.add_argument("--parties", nargs="+", type=_party, default=[2, 3], metavar="N", help="default: 2 3")
    init.add_argument("--force", action="store_true", help="replace existing files, including the CA")
    init.set_defaults(run=_init)

    server = commands.add_parser("server", help="issue the server certificate for real host names or IPs")
    _add_out(server)
    _add_names(server)
    server.add_argument("--days", type=int, default=825)
    server.add_argument("--force", action="store_true", help="replace an existing server certificate")
    server.set_defaults(run=_server)

    party = commands.add_parser("party", help="issue one party's client certificate")
    party.add_argument("party", type=_party, metavar="N")
    _add_out(party)
    party.add_argument("--days", type=int, default=825)
    party.add_argument("--force", action="store_true", help="replace an existing certificate of this party")
    party.set_defaults(run=_party_command)

    operator = commands.add_parser(
        "operator",
        help="issue a client certificate for an operator, who manages jobs (no party)",
        description=(
            "Issue an operator's client certificate (CN NAME, URI SAN vfl://operator/NAME). An operator may "
            "submit, list, watch and cancel jobs on the server's Control API, and is recorded as the submitter "
            "of the jobs it submits. It cannot join a job as a party nor serve as the server. Like every "
            "client certificate of the project CA, the inference endpoint accepts it."
        ),
    )
    operator.add_argument("name", help="the operator's name, e.g. alice; files NAME.pem and NAME.key")
    _add_out(operator)
    operator.add_argument("--days", type=int, default=825)
    operator.add_argument("--force", action="store_true", help="replace an existing certificate of this name")
    operator.set_defaults(run=_operator_command)

    caller = commands.add_parser("caller", help="issue a client certificate for an inference caller (no party)")
    caller.add_argument("name", help="the caller's name, e.g. scoring-app; files NAME.pem and NAME.key")
    _add_out(caller)
    caller.add_argument("--days", type=int, default=825)
    caller.add_argument("--force", action="store_true", help="replace an existing certificate of this name")
    caller.set_defaults(run=_caller_command)

    bundle = commands.add_parser(
        "bundle",
        help="write one host's archive: its key and certificate, the CA certificate, a config, the unit, a README",
        description=(
            "Write <to>/vfl-<host>.tar.gz for one host: its own key (mode 0600) and certificate, the CA "
            "certificate, a config template with the addresses filled in, the systemd unit and a README of what "
            "to run. The CA's key and other hosts' keys are never in it. Issue the certificate first."
        ),
    )
    who = bundle.add_mutually_exclusive_group(required=True)
    who.add_argument("--party", type=_party, metavar="N", help="a passive party's host")
    who.add_argument("--server", action="store_true", help="the active party's host (vfl-server)")
    who.add_argument("--operator", metavar="NAME", help="an operator's machine (vfl-jobs, the console)")
    who.add_argument("--caller", metavar="NAME", help="an inference caller's machine")
    _add_out(bundle)
    bundle.add_argument("--to", type=Path, default=Path("bundles"), help="where the archive goes (default: bundles)")
    bundle.add_argument(
        "--server-address", metavar="HOST:PORT", help="the server as the host dials it (--party, --operator)"
    )
    bundle.add_argument("--endpoint", metavar="HOST:PORT", help="the inference endpoint's REST address (--caller)")
    bundle.add_argument(
        "--listen", default=DEFAULT_LISTEN, help=f"--server: where it listens (default {DEFAULT_LISTEN})"
    )
    bundle.add_argument(
        "--prefix",
        type=PurePosixPath,
        default=DEFAULT_PREFIX,
        help=f"the config's folder on the host ({DEFAULT_PREFIX}); the unit's --config names it",
    )
    bundle.add_argument(
        "--run-dir",
        type=PurePosixPath,
        help=f"the run directory on the host, in the config and the unit (default {DEFAULT_RUN_DIR} with the "
        "default --prefix, PREFIX/runs with another)",
    )
    bundle.set_defaults(run=_bundle)

    show = commands.add_parser("show", help="print what a certificate says")
    show.add_argument("file", type=Path, metavar="FILE.pem")
    show.set_defaults(run=_show)
    return parser


def _add_out(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("certs"), help="folder of the files (default: certs)")


def _add_names(parser: argparse.ArgumentParser) -> None:
    # Clients check the host they dial against these names, so list every name or IP they will use.
    parser.add_argument("--dns", nargs="+", action="extend", default=[], metavar="NAME", help="host name SAN")
    parser.add_argument("--ip", nargs="+", action="extend", type=_ip, default=[], metavar="ADDR", help="IP SAN")


def _party(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a party id (a positive integer; passive parties are 2, 3, ...)"
        )
    return int(text)


def _ip(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IP address; use --dns for host names") from exc


def _server_names(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    if not args.dns and not args.ip:
        return list(_DEFAULT_DNS), list(_DEFAULT_IPS)
    return list(args.dns), list(args.ip)


def _init(args: argparse.Namespace) -> None:
    out: Path = args.out
    ca = _init_ca(out, args.force)
    dns_names, ips = _server_names(args)
    server = IssuedCert(out / f"{SERVER_STEM}.pem", out / f"{SERVER_STEM}.key")
    if _keep(server, ca, args.force, f"vfl-certs server --out {out} --dns NAME --ip ADDR --force"):
        _say_kept(server, "server certificate", load_certificate(server.cert_path))
    else:
        issued = issue_server_cert(out, ca, dns_names=dns_names, ips=ips, force=True)
        _say_wrote(issued, "server certificate")
    for party in args.parties:
        stem = party_common_name(party)
        pair = IssuedCert(out / f"{stem}.pem", out / f"{stem}.key")
        if _keep(pair, ca, args.force, f"vfl-certs party {party} --out {out} --force"):
            _say_kept(pair, f"certificate of party {party}", load_certificate(pair.cert_path))
        else:
            _say_wrote(issue_party_cert(out, ca, party, force=True), f"certificate of party {party}")
    _say_where_files_go(out, args.parties)


def _init_ca(out: Path, force: bool) -> CertificateAuthority:
    cert_path, key_path = out / CA_CERT_FILE, out / CA_KEY_FILE
    if not force and (cert_path.exists() or key_path.exists()):
        ca = load_ca(out)
        print(f"kept the existing CA {cert_path} (pass --force to start a new CA and reissue everything)")
        return ca
    create_ca(out, force=True)
    print(f"wrote {cert_path} and {key_path}: the project CA. Keep {key_path} private; it signs certificates.")
    return load_ca(out)


def _keep(pair: IssuedCert, ca: CertificateAuthority, force: bool, reissue: str) -> bool:
    """Whether ``init`` keeps an existing pair; refuses to keep one that the current CA did not issue."""
    if force or not (pair.cert_path.exists() or pair.key_path.exists()):
        return False
    if not (pair.cert_path.exists() and pair.key_path.exists()):
        missing = pair.key_path if pair.cert_path.exists() else pair.cert_path
        raise CertsError(f"{missing} is missing; reissue the pair with `{reissue}`")
    if not is_signed_by(load_certificate(pair.cert_path), ca.cert):
        raise CertsError(f"{pair.cert_path} was not issued by {ca.cert_path}; reissue it with `{reissue}`")
    return True


def _server(args: argparse.Namespace) -> None:
    dns_names, ips = _server_names(args)
    ca = load_ca(args.out)
    issued = issue_server_cert(args.out, ca, dns_names=dns_names, ips=ips, days=args.days, force=args.force)
    _say_wrote(issued, "server certificate")
    print(f"Copy {issued.cert_path} and {issued.key_path} to the server and restart vfl-server.")


def _party_command(args: argparse.Namespace) -> None:
    ca = load_ca(args.out)
    issued = issue_party_cert(args.out, ca, args.party, days=args.days, force=args.force)
    _say_wrote(issued, f"certificate of party {args.party}")
    print(f"Give party {args.party}: {ca.cert_path}, {issued.cert_path} and {issued.key_path}.")


def _operator_command(args: argparse.Namespace) -> None:
    ca = load_ca(args.out)
    issued = issue_operator_cert(args.out, ca, args.name, days=args.days, force=args.force)
    _say_wrote(issued, f"operator certificate {args.name!r}")
    print(
        f"Give the operator: {ca.cert_path}, {issued.cert_path} and {issued.key_path} "
        "(it may submit, list, watch and cancel jobs; it cannot join as a party)."
    )


def _caller_command(args: argparse.Namespace) -> None:
    ca = load_ca(args.out)
    issued = issue_caller_cert(args.out, ca, args.name, days=args.days, force=args.force)
    _say_wrote(issued, f"inference caller certificate {args.name!r}")
    print(f"Give the caller: {ca.cert_path}, {issued.cert_path} and {issued.key_path} (it cannot join as a party).")


def _bundle(args: argparse.Namespace) -> None:
    def needed(value: str | None, flag: str, why: str) -> str:
        if not value:
            raise CertsError(f"{flag} HOST:PORT is needed with {why}: the address goes into its config and README")
        return value

    if args.party is not None:
        address = needed(args.server_address, "--server-address", "--party")
        made = party_bundle(args.out, args.party, address, args.prefix, args.run_dir)
    elif args.server:
        made = server_bundle(args.out, args.listen, args.prefix, args.run_dir)
    elif args.operator is not None:
        made = operator_bundle(args.out, args.operator, needed(args.server_address, "--server-address", "--operator"))
    else:
        made = caller_bundle(args.out, args.caller, needed(args.endpoint, "--endpoint", "--caller"))
    path = made.write(args.to)
    keys = [m.name for m in made.members if m.name.endswith(".key")]
    print(f"wrote {path} (mode 0600): {len(made.members)} files; the only key in it: {', '.join(keys)}")


def _show(args: argparse.Namespace) -> None:
    cert = load_certificate(args.file)
    print(f"file:     {args.file}")
    print(f"subject:  {cert.subject.rfc4514_string()}")
    print(f"issuer:   {cert.issuer.rfc4514_string()}")
    print(f"SANs:     {', '.join(_san_entries(cert)) or 'none'}")
    print(f"valid:    {_when(cert.not_valid_before_utc)} to {_when(cert.not_valid_after_utc)} ({_status(cert)})")
    print(_role_line(cert))
    print(f"CA:       {'yes' if is_ca(cert) else 'no'}")


def _role_line(cert: x509.Certificate) -> str:
    """One line naming the role ``cert`` has in the project, labelled by that role.

    One line, not a "none" per role a certificate lacks: a caller's certificate read
    ``party: none``, ``operator: none`` and never said what it was.
    """
    party = party_from_certificate(cert)
    if party is not None:
        return f"party:    {party} (joins the jobs that name party {party})"
    operator = operator_from_certificate(cert)
    if operator is not None:
        return f"operator: {operator} (submits, lists, watches and cancels jobs; not a party)"
    caller = caller_from_certificate(cert)
    if caller is not None:
        return f"caller:   {caller} (calls the inference endpoint; not a party, not an operator)"
    if is_ca(cert):
        return "role:     the CA (signs the project's certificates)"
    if _is_server(cert):
        return "role:     server (the certificate vfl-server presents to parties and callers)"
    return "role:     none (not a party, operator, caller or server certificate of vfl-certs)"


def _is_server(cert: x509.Certificate) -> bool:
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False
    return ExtendedKeyUsageOID.SERVER_AUTH in usages


def _say_wrote(issued: IssuedCert, what: str) -> None:
    cert = load_certificate(issued.cert_path)
    print(
        f"wrote {issued.cert_path} and {issued.key_path} (key mode 0600): {what}{_for_names(cert)}, "
        f"valid until {_when(cert.not_valid_after_utc)}"
    )


def _say_kept(pair: IssuedCert, what: str, cert: x509.Certificate) -> None:
    print(f"kept {pair.cert_path}: the existing {what}{_for_names(cert)} (pass --force to replace it)")


def _say_where_files_go(out: Path, parties: Sequence[int]) -> None:
    print(f"Copy to the server: {out / CA_CERT_FILE}, {out / SERVER_STEM}.pem, {out / SERVER_STEM}.key.")
    for party in parties:
        stem = party_common_name(party)
        print(f"Copy to party {party}: {out / CA_CERT_FILE}, {out / stem}.pem, {out / stem}.key.")
    print(f"Never copy {out / CA_KEY_FILE} to another machine, and never commit any .key file.")


def _for_names(cert: x509.Certificate) -> str:
    entries = _san_entries(cert)
    return f" for {', '.join(entries)}" if entries else ""


def _san_entries(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return (
        [f"DNS:{name}" for name in san.get_values_for_type(x509.DNSName)]
        + [f"IP:{ip}" for ip in san.get_values_for_type(x509.IPAddress)]
        + [f"URI:{uri}" for uri in san.get_values_for_type(x509.UniformResourceIdentifier)]
    )


def _status(cert: x509.Certificate) -> str:
    now = dt.datetime.now(dt.UTC)
    if now < cert.not_valid_before_utc:
        return "NOT YET VALID"
    if now > cert.not_valid_after_utc:
        return "EXPIRED"
    return "valid now"


def _when(moment: dt.datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M} UTC"


if __name__ == "__main__":
    raise SystemExit(main())
