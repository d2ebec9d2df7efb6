"""Tests for certificate issuance (vflcore.security.certs), the vfl-certs command and TLS file loading."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from vflcore.security.certs import (
    CertificateAuthority,
    CertsError,
    KeyExistsError,
    create_ca,
    is_ca,
    is_signed_by,
    issue_caller_cert,
    issue_operator_cert,
    issue_party_cert,
    issue_self_signed_party_cert,
    issue_server_cert,
    load_ca,
    load_certificate,
)
from vflcore.security.certs_cli import main
from vflcore.security.identity import operator_from_certificate, party_from_certificate
from vflcore.security.tls import TlsConfigError, TlsFiles, channel_credentials, server_credentials


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _sans(cert: x509.Certificate) -> x509.SubjectAlternativeName:
    return cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value


def _usages(cert: x509.Certificate) -> list[x509.ObjectIdentifier]:
    return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def _role_lines(printed: str) -> list[str]:
    """The lines of `vfl-certs show` that say what a certificate is for."""
    return [line for line in printed.splitlines() if line.startswith(("party:", "operator:", "caller:", "role:"))]


class TestCreateCa:
    def test_writes_a_ca_certificate_and_key(self, tmp_path: Path) -> None:
        """create_ca writes ca.pem and ca.key, and the certificate is a CA named as asked."""
        issued = create_ca(tmp_path, common_name="acme-ca")
        cert = load_certificate(issued.cert_path)
        assert (issued.cert_path.name, issued.key_path.name) == ("ca.pem", "ca.key")
        assert is_ca(cert)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "acme-ca"

    def test_key_is_private_and_certificate_public(self, tmp_path: Path) -> None:
        """The CA key is mode 0600 and the certificate 0644."""
        issued = create_ca(tmp_path)
        assert _mode(issued.key_path) == 0o600
        assert _mode(issued.cert_path) == 0o644

    def test_refuses_to_overwrite_without_force(self, tmp_path: Path) -> None:
        """A second create_ca keeps the first key unless force is given."""
        issued = create_ca(tmp_path)
        before = issued.key_path.read_bytes()
        with pytest.raises(KeyExistsError, match="already exists"):
            create_ca(tmp_path)
        assert issued.key_path.read_bytes() == before
        create_ca(tmp_path, force=True)
        assert issued.key_path.read_bytes() != before

    def test_leaves_no_temporary_files(self, tmp_path: Path) -> None:
        """Atomic writes leave only the final files in the folder."""
        create_ca(tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.key", "ca.pem"]


class TestLoadCa:
    def test_names_the_missing_file_and_the_command(self, tmp_path: Path) -> None:
        """A missing CA file is named in the error together with `vfl-certs init`."""
        with pytest.raises(CertsError, match=r"ca\.pem not found.*vfl-certs init"):
            load_ca(tmp_path)

    def test_detects_a_key_from_another_ca(self, tmp_path: Path) -> None:
        """A ca.key that does not match ca.pem is refused."""
        other = tmp_path / "other"
        create_ca(tmp_path)
        create_ca(other)
        (tmp_path / "ca.key").write_bytes((other / "ca.key").read_bytes())
        with pytest.raises(CertsError, match="does not belong"):
            load_ca(tmp_path)


class TestIssueServerCert:
    def test_sans_are_exactly_the_given_names(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """The server certificate lists exactly the DNS names and IPs given, and its CN is the first name."""
        issued = issue_server_cert(tmp_path, ca, dns_names=("vfl.example.org", "vfl"), ips=("10.0.0.5",))
        cert = load_certificate(issued.cert_path)
        assert _sans(cert).get_values_for_type(x509.DNSName) == ["vfl.example.org", "vfl"]
        assert _sans(cert).get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.5")]
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "vfl.example.org"

    def test_defaults_to_localhost(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """Without arguments the server certificate is for localhost and 127.0.0.1."""
        cert = load_certificate(issue_server_cert(tmp_path, ca).cert_path)
        assert _sans(cert).get_values_for_type(x509.DNSName) == ["localhost"]
        assert _sans(cert).get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]

    def test_common_name_is_the_ip_without_dns_names(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """An IP-only server certificate uses the IP as its CN."""
        cert = load_certificate(issue_server_cert(tmp_path, ca, dns_names=(), ips=("::1",)).cert_path)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "::1"

    def test_is_a_server_certificate_from_the_ca(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """The server certificate carries serverAuth, is signed by the CA and is not a party."""
        cert = load_certificate(issue_server_cert(tmp_path, ca).cert_path)
        assert _usages(cert) == [ExtendedKeyUsageOID.SERVER_AUTH]
        assert is_signed_by(cert, ca.cert)
        assert party_from_certificate(cert) is None

    def test_needs_at_least_one_name(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """A server certificate without any name is refused."""
        with pytest.raises(CertsError, match="at least one"):
            issue_server_cert(tmp_path, ca, dns_names=(), ips=())


class TestIssuePartyCert:
    def test_names_the_party_in_cn_and_uri(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """A party certificate carries CN party-N and URI SAN vfl://party/N."""
        issued = issue_party_cert(tmp_path, ca, 2)
        cert = load_certificate(issued.cert_path)
        assert issued.cert_path.name == "party-2.pem"
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "party-2"
        assert _sans(cert).get_values_for_type(x509.UniformResourceIdentifier) == ["vfl://party/2"]
        assert party_from_certificate(cert) == 2

    def test_is_a_client_certificate_from_the_ca(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """A party certificate carries clientAuth and is signed by the CA."""
        cert = load_certificate(issue_party_cert(tmp_path, ca, 3).cert_path)
        assert _usages(cert) == [ExtendedKeyUsageOID.CLIENT_AUTH]
        assert is_signed_by(cert, ca.cert)

    def test_key_is_mode_0600(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """A party key is readable by its owner only."""
        issued = issue_party_cert(tmp_path, ca, 2)
        assert _mode(issued.key_path) == 0o600
        assert _mode(issued.cert_path) == 0o644

    def test_refuses_to_overwrite(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """Issuing the same party twice fails unless force is given."""
        issue_party_cert(tmp_path, ca, 2)
        with pytest.raises(KeyExistsError, match=r"party-2\.key already exists; pass --force"):
            issue_party_cert(tmp_path, ca, 2)
        issue_party_cert(tmp_path, ca, 2, force=True)

    def test_name_overrides_the_file_stem(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """The name argument picks the file names but not the identity."""
        issued = issue_party_cert(tmp_path, ca, 2, name="spare")
        assert issued.key_path.name == "spare.key"
        assert party_from_certificate(load_certificate(issued.cert_path)) == 2

    def test_can_make_an_expired_certificate(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """The validity overrides produce a certificate that has already expired."""
        now = dt.datetime.now(dt.UTC)
        issued = issue_party_cert(
            tmp_path,
            ca,
            2,
            not_valid_before=now - dt.timedelta(days=10),
            not_valid_after=now - dt.timedelta(days=1),
        )
        assert load_certificate(issued.cert_path).not_valid_after_utc < now

    def test_rejects_a_party_below_one(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """Party ids are positive integers."""
        with pytest.raises(CertsError, match="positive integer"):
            issue_party_cert(tmp_path, ca, 0)

    def test_self_signed_certificate_is_not_from_the_ca(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """The test helper makes a party certificate that no project CA signed."""
        cert = load_certificate(issue_self_signed_party_cert(tmp_path, 2, "rogue").cert_path)
        assert party_from_certificate(cert) == 2
        assert not is_signed_by(cert, ca.cert)


class TestTlsFiles:
    def test_reads_all_three_files(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """read() returns the CA, certificate and key bytes, and credentials build from them."""
        issued = issue_party_cert(tmp_path, ca, 2)
        files = TlsFiles(ca=ca.cert_path, cert=issued.cert_path, key=issued.key_path)
        ca_pem, cert_pem, key_pem = files.read()
        assert ca_pem.startswith(b"-----BEGIN CERTIFICATE-----")
        assert cert_pem == issued.cert_path.read_bytes()
        assert b"PRIVATE KEY" in key_pem
        assert channel_credentials(files) is not None
        assert server_credentials(files) is not None

    def test_missing_file_is_named(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """A missing key is reported with its path and `vfl-certs init`."""
        files = TlsFiles(ca=ca.cert_path, cert=ca.cert_path, key=tmp_path / "party-9.key")
        with pytest.raises(TlsConfigError, match=r"party-9\.key not found.*vfl-certs init"):
            files.read()

    def test_non_pem_file_is_refused(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """A DER or garbage file is reported as not PEM."""
        junk = tmp_path / "junk.pem"
        junk.write_bytes(b"\x30\x82garbage")
        with pytest.raises(TlsConfigError, match="is not PEM"):
            TlsFiles(ca=junk, cert=junk, key=junk).read()


class TestCertsCli:
    def test_init_writes_ca_server_and_parties(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """init writes the CA, a localhost server certificate and party 2 and 3, and says so."""
        out = tmp_path / "certs"
        assert main(["init", "--out", str(out)]) == 0
        names = sorted(p.name for p in out.iterdir())
        assert names == [f"{stem}.{ext}" for stem in ("ca", "party-2", "party-3", "server") for ext in ("key", "pem")]
        printed = capsys.readouterr().out
        assert f"wrote {out / 'server.pem'}" in printed
        assert "DNS:localhost, IP:127.0.0.1" in printed
        assert f"Copy to party 2: {out / 'ca.pem'}" in printed

    def test_init_twice_keeps_everything(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A second init without --force keeps every file and says it did."""
        out = tmp_path / "certs"
        main(["init", "--out", str(out)])
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        capsys.readouterr()
        assert main(["init", "--out", str(out)]) == 0
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
        printed = capsys.readouterr().out
        assert "kept the existing CA" in printed
        assert f"kept {out / 'party-3.pem'}" in printed

    def test_init_with_names_and_parties(self, tmp_path: Path) -> None:
        """init honours --dns, --ip and --parties."""
        out = tmp_path / "certs"
        args = ["init", "--out", str(out), "--dns", "vfl.example.org", "--ip", "10.0.0.5", "--parties", "4"]
        assert main(args) == 0
        server = load_certificate(out / "server.pem")
        assert _sans(server).get_values_for_type(x509.DNSName) == ["vfl.example.org"]
        assert (out / "party-4.pem").exists()
        assert not (out / "party-2.pem").exists()

    def test_init_refuses_a_certificate_from_another_ca(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """init stops, naming the file, when an existing server certificate is not from the CA in use."""
        out = tmp_path / "certs"
        main(["init", "--out", str(out)])
        (out / "ca.pem").unlink()
        (out / "ca.key").unlink()
        assert main(["init", "--out", str(out)]) == 2
        assert f"{out / 'server.pem'} was not issued by" in capsys.readouterr().err

    def test_server_needs_force_to_replace(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """server refuses to replace the existing certificate without --force and replaces it with it."""
        out = tmp_path / "certs"
        main(["init", "--out", str(out)])
        args = ["server", "--out", str(out), "--dns", "vfl.example.org", "--ip", "10.0.0.5"]
        assert main(args) == 2
        assert "server.key already exists; pass --force" in capsys.readouterr().err
        assert main([*args, "--force"]) == 0
        server = load_certificate(out / "server.pem")
        assert _sans(server).get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.5")]
        assert "DNS:vfl.example.org, IP:10.0.0.5" in capsys.readouterr().out

    def test_party_issues_one_certificate(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """party N writes party-N.pem and party-N.key from the existing CA."""
        out = tmp_path / "certs"
        main(["init", "--out", str(out), "--parties", "2"])
        assert main(["party", "5", "--out", str(out)]) == 0
        assert party_from_certificate(load_certificate(out / "party-5.pem")) == 5
        assert "Give party 5:" in capsys.readouterr().out

    def test_party_without_ca_says_to_run_init(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """party N in a folder without a CA exits 2 and points at vfl-certs init."""
        assert main(["party", "2", "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert "ca.pem not found" in err
        assert "vfl-certs init" in err

    def test_bad_ip_is_a_usage_error(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """An --ip that is not an address exits 2 with a hint to use --dns."""
        assert main(["server", "--out", str(tmp_path), "--ip", "vfl.example.org"]) == 2
        assert "use --dns for host names" in capsys.readouterr().err

    def test_show_prints_identity_and_validity(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """show prints the subject, issuer, SANs, validity and party id of a certificate."""
        out = tmp_path / "certs"
        main(["init", "--out", str(out)])
        capsys.readouterr()
        assert main(["show", str(out / "party-2.pem")]) == 0
        printed = capsys.readouterr().out
        assert "subject:  CN=party-2" in printed
        assert "issuer:   CN=vfl-ca" in printed
        assert "SANs:     URI:vfl://party/2" in printed
        assert "(valid now)" in printed
        assert _role_lines(printed) == ["party:    2 (joins the jobs that name party 2)"]  # none for roles it lacks

    def test_show_names_a_caller(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """show says `caller: NAME` for an inference caller's certificate, not `party: none` and `operator: none`."""
        out = tmp_path / "certs"
        main(["init", "--out", str(out)])
        assert main(["caller", "scoring-app", "--out", str(out)]) == 0
        capsys.readouterr()
        assert main(["show", str(out / "scoring-app.pem")]) == 0
        assert _role_lines(capsys.readouterr().out) == [
            "caller:   scoring-app (calls the inference endpoint; not a party, not an operator)"
        ]

    @pytest.mark.parametrize(("stem", "role"), [("server", "role:     server"), ("ca", "role:     the CA")])
    def test_show_names_the_server_and_the_ca(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], stem: str, role: str
    ) -> None:
        """show says which certificate is the server's and which is the CA, and neither reads as a caller."""
        out = tmp_path / "certs"
        main(["init", "--out", str(out)])
        capsys.readouterr()
        assert main(["show", str(out / f"{stem}.pem")]) == 0
        printed = capsys.readouterr().out
        assert [line[: len(role)] for line in _role_lines(printed)] == [role]

    def test_show_marks_an_expired_certificate(
        self, tmp_path: Path, ca: CertificateAuthority, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """show says EXPIRED for a certificate past its end date."""
        now = dt.datetime.now(dt.UTC)
        issued = issue_party_cert(
            tmp_path,
            ca,
            2,
            not_valid_before=now - dt.timedelta(days=3),
            not_valid_after=now - dt.timedelta(days=1),
        )
        assert main(["show", str(issued.cert_path)]) == 0
        assert "(EXPIRED)" in capsys.readouterr().out

    def test_show_missing_file_exits_2(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """show on a missing file names it and exits 2."""
        assert main(["show", str(tmp_path / "nope.pem")]) == 2
        assert "nope.pem" in capsys.readouterr().err

    def test_help_returns_zero(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--help prints usage and returns 0 instead of exiting the process."""
        assert main(["--help"]) == 0
        assert "init" in capsys.readouterr().out


class TestIssueCallerCert:
    def test_is_a_client_certificate_with_no_party_identity(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """An inference caller may show this certificate, but it names no party: it cannot join a job."""
        issued = issue_caller_cert(tmp_path, ca, "scoring-app")
        cert = load_certificate(issued.cert_path)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "scoring-app"
        assert _usages(cert) == [ExtendedKeyUsageOID.CLIENT_AUTH]
        assert is_signed_by(cert, ca.cert)
        assert party_from_certificate(cert) is None
        assert _mode(issued.key_path) == 0o600

    @pytest.mark.parametrize("name", ["", "party-2", "a b", "../x"])
    def test_refuses_a_bad_name(self, tmp_path: Path, ca: CertificateAuthority, name: str) -> None:
        with pytest.raises(CertsError, match="caller name"):
            issue_caller_cert(tmp_path, ca, name)

    def test_command_line(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        create_ca(tmp_path)
        assert main(["caller", "scoring-app", "--out", str(tmp_path)]) == 0
        assert (tmp_path / "scoring-app.pem").exists() and "cannot join as a party" in capsys.readouterr().out


class TestIssueOperatorCert:
    def test_names_the_operator_in_cn_and_uri(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """An operator certificate carries CN NAME and URI SAN vfl://operator/NAME, in NAME.pem and NAME.key."""
        issued = issue_operator_cert(tmp_path, ca, "alice")
        cert = load_certificate(issued.cert_path)
        assert (issued.cert_path.name, issued.key_path.name) == ("alice.pem", "alice.key")
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
        assert _sans(cert).get_values_for_type(x509.UniformResourceIdentifier) == ["vfl://operator/alice"]
        assert operator_from_certificate(cert) == "alice"

    def test_is_a_client_certificate_from_the_ca_and_no_party(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """An operator certificate carries clientAuth only, is signed by the CA and names no party."""
        cert = load_certificate(issue_operator_cert(tmp_path, ca, "ops.team_1").cert_path)
        assert _usages(cert) == [ExtendedKeyUsageOID.CLIENT_AUTH]
        assert not is_ca(cert)
        assert is_signed_by(cert, ca.cert)
        assert party_from_certificate(cert) is None

    def test_key_is_mode_0600(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """An operator key is readable by its owner only, and no temporary file is left behind."""
        issued = issue_operator_cert(tmp_path, ca, "alice")
        assert _mode(issued.key_path) == 0o600
        assert _mode(issued.cert_path) == 0o644
        assert sorted(p.name for p in tmp_path.iterdir()) == ["alice.key", "alice.pem", "ca.key", "ca.pem"]

    def test_refuses_to_overwrite(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """Issuing the same operator twice keeps the first key unless force is given."""
        issued = issue_operator_cert(tmp_path, ca, "alice")
        before = issued.key_path.read_bytes()
        with pytest.raises(KeyExistsError, match=r"alice\.key already exists; pass --force"):
            issue_operator_cert(tmp_path, ca, "alice")
        assert issued.key_path.read_bytes() == before
        issue_operator_cert(tmp_path, ca, "alice", force=True)
        assert issued.key_path.read_bytes() != before

    @pytest.mark.parametrize("name", ["", "party-2", "a b", "../x", "a/b", ".hidden", "-x", "é", "a" * 65])
    def test_refuses_a_bad_name(self, tmp_path: Path, ca: CertificateAuthority, name: str) -> None:
        """Empty, non-ASCII, path-like, option-like, party-like and over-long names are refused."""
        with pytest.raises(CertsError, match="operator name"):
            issue_operator_cert(tmp_path, ca, name)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.key", "ca.pem"]

    def test_command_line(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`vfl-certs operator NAME` writes NAME.pem and NAME.key from the existing CA and says what they allow."""
        create_ca(tmp_path)
        assert main(["operator", "alice", "--out", str(tmp_path)]) == 0
        assert operator_from_certificate(load_certificate(tmp_path / "alice.pem")) == "alice"
        assert _mode(tmp_path / "alice.key") == 0o600
        printed = capsys.readouterr().out
        assert "operator certificate 'alice'" in printed
        assert "URI:vfl://operator/alice" in printed
        assert "cannot join as a party" in printed

    def test_command_line_needs_force_to_replace(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A second `vfl-certs operator NAME` exits 2 naming the key, and --force replaces it."""
        create_ca(tmp_path)
        main(["operator", "alice", "--out", str(tmp_path)])
        assert main(["operator", "alice", "--out", str(tmp_path)]) == 2
        assert "alice.key already exists; pass --force" in capsys.readouterr().err
        assert main(["operator", "alice", "--out", str(tmp_path), "--force"]) == 0

    def test_command_line_refuses_a_party_name(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`vfl-certs operator party-2` exits 2 and writes nothing."""
        create_ca(tmp_path)
        assert main(["operator", "party-2", "--out", str(tmp_path)]) == 2
        assert "operator name 'party-2'" in capsys.readouterr().err
        assert not (tmp_path / "party-2.pem").exists()

    def test_command_line_without_ca_says_to_run_init(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`vfl-certs operator NAME` in a folder without a CA exits 2 and points at vfl-certs init."""
        assert main(["operator", "alice", "--out", str(tmp_path)]) == 2
        assert "vfl-certs init" in capsys.readouterr().err

    def test_help_says_what_an_operator_may_do(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`vfl-certs operator --help` names the Control API actions and that it is no party."""
        assert main(["operator", "--help"]) == 0
        printed = " ".join(capsys.readouterr().out.split())
        assert "submit, list, watch and cancel jobs" in printed
        assert "Control API" in printed
        assert "cannot join a job as a party" in printed

    def test_show_names_the_operator(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """show prints the operator of an operator certificate and no party."""
        create_ca(tmp_path)
        main(["operator", "alice", "--out", str(tmp_path)])
        capsys.readouterr()
        assert main(["show", str(tmp_path / "alice.pem")]) == 0
        printed = capsys.readouterr().out
        assert _role_lines(printed) == ["operator: alice (submits, lists, watches and cancels jobs; not a party)"]
