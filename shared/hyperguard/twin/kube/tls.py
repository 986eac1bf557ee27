"""TLS for the twin's Kubernetes API server: a throwaway CA and the server certificate it
signs, so that clients verify the server against the CA data, as they do against EKS's
`certificateAuthority.data`, instead of turning verification off.

Both certificates carry the extensions Python's strict X.509 verification (the default
since 3.13) requires: key identifiers, critical BasicConstraints and KeyUsage.
Not emulated: client certificates, certificate rotation.
"""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = timedelta(days=7)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _usage(*, digital_signature: bool, key_cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=key_cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def generate_certificates(directory: str | Path) -> tuple[bytes, Path, Path]:
    """Write ca.pem, server.pem and server-key.pem (EC P-256) into `directory`. Returns the
    CA's PEM, the server certificate's path and its key's path. The server certificate
    names localhost and 127.0.0.1."""
    directory = Path(directory)
    now = datetime.now(UTC)
    # A little slack backwards, so that a client whose clock lags is not refused.
    not_before, not_after = now - timedelta(minutes=5), now + VALID_FOR

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_id = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("hyperguard-twin-ca"))
        .issuer_name(_name("hyperguard-twin-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(digital_signature=True, key_cert_sign=True), critical=True)
        .add_extension(ca_id, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_id), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kubernetes"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(digital_signature=True, key_cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_id), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    cert_path, key_path = directory / "server.pem", directory / "server-key.pem"
    (directory / "ca.pem").write_bytes(ca_pem)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.touch(mode=0o600)
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_pem, cert_path, key_path
