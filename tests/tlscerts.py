"""Throwaway X.509 material for TLS tests: a CA, a server certificate for 127.0.0.1 and a client
certificate, all signed by that CA and written as PEM files (``cryptography``, a dev dependency);
for clusters, a CA and node certificates good for both ends of a link (:func:`make_node_certs`).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


@dataclass(frozen=True)
class NodeCerts:
    ca: Path
    cert: Path  # one certificate for every node of the cluster
    key: Path

    def flags(self, client_auth: bool = True) -> tuple[str, ...]:
        """nsqd's TLS flags for a node holding these (mutual TLS with ``client_auth``)."""
        flags = (
            f"--tls-cert={self.cert}",
            f"--tls-key={self.key}",
            f"--tls-root-ca-file={self.ca}",
        )
        return (*flags, "--tls-client-auth-policy=require-verify") if client_auth else flags


def make_node_certs(directory: Path, ca_name: str = "pnsq-test-cluster-ca") -> NodeCerts:
    """Write ca.pem and node.pem/node.key into ``directory``: a certificate for 127.0.0.1 and
    localhost (IP and DNS subject alternative names) usable as server and as client, as a pnsq
    node is both on its links."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    validity = (now - datetime.timedelta(days=1), now + datetime.timedelta(days=30))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _ca_cert(ca_key, ca_name, validity)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(validity[0])
        .not_valid_after(validity[1])
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = NodeCerts(directory / "ca.pem", directory / "node.pem", directory / "node.key")
    paths.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, paths.key)
    return paths


def _ca_cert(
    ca_key: ec.EllipticCurvePrivateKey,
    name: str,
    validity: tuple[datetime.datetime, datetime.datetime],
) -> x509.Certificate:
    return (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(validity[0])
        .not_valid_after(validity[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )


def make_certs(directory: Path) -> Certs:
    """Write ca.pem, server.pem/server.key (CN and SAN 127.0.0.1) and client.pem/client.key
    (CN "pnsq-test-client") into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    validity = (now - datetime.timedelta(days=1), now + datetime.timedelta(days=30))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _ca_cert(ca_key, "pnsq-test-ca", validity)
    paths = {}
    for role, common_name, usage in (
        ("server", "127.0.0.1", ExtendedKeyUsageOID.SERVER_AUTH),
        ("client", "pnsq-test-client", ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(validity[0])
            .not_valid_after(validity[1])
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if role == "server":
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
        cert = builder.sign(ca_key, hashes.SHA256())
        cert_path, key_path = directory / f"{role}.pem", directory / f"{role}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
        paths[role] = (cert_path, key_path)
    ca_path = directory / "ca.pem"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return Certs(ca_path, *paths["server"], *paths["client"])
