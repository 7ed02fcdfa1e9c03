"""A secured local cluster for the security tests: mutual TLS, an operator secret file, an operator
certificate identity and --require-read-auth on real bookie processes, plus the certificates a
refused client uses (none, another CA's, an expired one)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark_ledger.testing.certs import CertificateAuthority, CertPair
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.transport.tls import TlsSettings

OPERATOR_SECRET = "op-secret-6f1d2a9c4b7e8d0f"  # looked for in ps, logs and messages by the tests
OPERATOR_NAME = "ledger-operator"


@dataclass(frozen=True)
class SecuredCerts:
    ca: Path
    bookie: CertPair
    client: CertPair
    operator: CertPair
    expired: CertPair
    stranger: CertPair  # signed by another CA
    authority: CertificateAuthority  # issues more certificates of the cluster's CA (hostile names)

    def tls(self, kind: str) -> TlsSettings | None:
        """The client TLS settings of a kind of caller."""
        pair = {"client": self.client, "operator": self.operator, "expired": self.expired,
                "another CA": self.stranger}.get(kind)
        if kind == "no certificate":
            return TlsSettings.from_values(str(self.ca))
        assert pair is not None, kind
        return TlsSettings.from_values(str(self.ca), str(pair.cert), str(pair.key))


def make_certs(directory: Path) -> SecuredCerts:
    ca = CertificateAuthority(directory / "ca")
    other = CertificateAuthority(directory / "other-ca", name="another CA")
    return SecuredCerts(ca.ca_path, ca.issue("bookie"), ca.issue("ledger-client", server=False),
                        ca.issue(OPERATOR_NAME, server=False), ca.issue("expired-client", server=False, expired=True),
                        other.issue("stranger", server=False), ca)


def secured_cluster(work_dir: Path, num_bookies: int, *, metadata_uri: str | None = None,
                    require_read_auth: bool = True) -> tuple[LocalCluster, SecuredCerts, Path]:
    """The cluster (not started), its certificates and the operator secret file (mode 0600)."""
    certs = make_certs(work_dir / "tls")
    secret_file = work_dir / "operator.secret"
    secret_file.write_text(OPERATOR_SECRET + "\n")
    secret_file.chmod(0o600)
    args = ["--tls-cert", str(certs.bookie.cert), "--tls-key", str(certs.bookie.key), "--tls-ca", str(certs.ca),
            "--tls-client-auth", "--operator-secret-file", str(secret_file), "--operator-identities", OPERATOR_NAME]
    if require_read_auth:
        args.append("--require-read-auth")
    cluster = LocalCluster(num_bookies, work_dir=work_dir / "cluster", metadata_uri=metadata_uri, bookie_args=args)
    cluster.client_tls = {"tls_ca": str(certs.ca), "tls_cert": str(certs.client.cert), "tls_key": str(certs.client.key)}
    return cluster, certs, secret_file
