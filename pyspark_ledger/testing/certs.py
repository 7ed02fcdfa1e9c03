"""Certificates for development and tests: a CA, bookie (server) and client certificates.

Made with `cryptography` (pyca, the library Python's own TLS tooling and `trustme` build on,
already a dependency here): keys are EC P-256, quick to generate and to handshake with. Server
certificates name 127.0.0.1 and localhost (bookies register host:port, and clients check the
host against the certificate's SAN). Not for production: the CA key sits next to the certs.

    python -m pyspark_ledger.testing.certs DIR    # writes ca.pem, bookie.pem/.key, client.pem/.key
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = dt.timedelta(days=1)


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


class CertificateAuthority:
    """A self-signed CA that issues leaf certificates into `directory`."""

    def __init__(self, directory: Path, name: str = "pyspark-ledger test CA"):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(self._name).issuer_name(self._name)
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY).not_valid_after(now + 3650 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        slug = name.replace(" ", "-")
        self.ca_path = self.directory / f"{slug}.pem"
        self.ca_path.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, server: bool = True, client: bool = True, expired: bool = False,
              hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
              client_names: tuple[str, ...] | None = None) -> CertPair:
        """A leaf certificate with subject CN `name` and SANs `hosts` (plus DNS `name` for a
        client identity); `expired`: valid only in the past (refused at the handshake).
        `client_names`: a client certificate's DNS SANs instead of (`name`,); () for none, so
        that the CN is its identity. Names are written as given (tests use hostile ones: commas,
        newlines, wildcards); the files are named after `name` with such characters replaced."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        start, end = (now - 30 * _DAY, now - _DAY) if expired else (now - _DAY, now + 825 * _DAY)
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        sans: list[x509.GeneralName] = []
        for h in hosts if server else ():
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        if not server:
            sans.extend(x509.DNSName(n) for n in ((name,) if client_names is None else client_names))
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if sans:
            cert = cert.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        signed = cert.sign(self._key, hashes.SHA256())
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:100] or "_"
        pair = CertPair(self.directory / f"{stem}.pem", self.directory / f"{stem}.key")
        pair.cert.write_bytes(signed.public_bytes(serialization.Encoding.PEM))
        pair.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        pair.key.chmod(0o600)
        return pair


@dataclass(frozen=True)
class CertificateSet:
    """Everything the TLS tests need: one CA's bookie and client certificates, an expired client
    certificate of the same CA, and a client certificate of another CA."""

    ca: Path
    bookie: CertPair
    client: CertPair
    expired_client: CertPair
    other_ca: Path
    other_ca_client: CertPair


def make_test_certificates(directory: Path | str) -> CertificateSet:
    directory = Path(directory)
    ca = CertificateAuthority(directory / "ca")
    other = CertificateAuthority(directory / "other-ca", name="another CA")
    return CertificateSet(
        ca=ca.ca_path,
        bookie=ca.issue("bookie", client=True),
        client=ca.issue("ledger-client", server=False),
        expired_client=ca.issue("expired-client", server=False, expired=True),
        other_ca=other.ca_path,
        other_ca_client=other.issue("stranger", server=False),
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pyspark_ledger.testing.certs DIR", file=sys.stderr)
        return 2
    certs = make_test_certificates(args[0])
    print(f"CA: {certs.ca}\nbookie: {certs.bookie.cert} {certs.bookie.key}\nclient: {certs.client.cert} {certs.client.key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
