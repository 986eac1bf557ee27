"""The twin cluster's certificates: one throwaway CA, the serving certificates of
kube-apiserver and of the webhooks it calls (Kueue's, the EKS token authenticator's), a
client certificate per component that authenticates to kube-apiserver with one, and the
service-account signing key. What kubeadm makes for a cluster, made small.

Certificates carry the extensions Python's strict X.509 verification (the default since
3.13) requires: key identifiers, critical BasicConstraints and KeyUsage.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = timedelta(days=7)
SERVICE_IP = "10.96.0.1"
"""The `kubernetes` Service's address: the first of the service range kube-apiserver gets."""
APISERVER_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _name(common_name: str, organisations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organisations]
    return x509.Name(attributes)


def _usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.touch(mode=0o600)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


class ClusterPki:
    """A CA in `directory` and the certificates it signs, written there as PEM files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        now = datetime.now(UTC)
        # A little slack backwards, so that a client whose clock lags is not refused.
        self._not_before, self._not_after = now - timedelta(minutes=5), now + VALID_FOR
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        self._ca_id = x509.SubjectKeyIdentifier.from_public_key(self._ca_key.public_key())
        self._ca = (
            self._builder(_name("hyperguard-twin-ca"), _name("hyperguard-twin-ca"), self._ca_key)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage(ca=True), critical=True)
            .add_extension(self._ca_id, critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(self._ca_id),
                critical=False,
            )
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca_pem = self._ca.public_bytes(serialization.Encoding.PEM)
        self.ca = directory / "ca.crt"
        self.ca.write_bytes(self.ca_pem)

    def _builder(
        self,
        subject: x509.Name,
        issuer: x509.Name,
        key: ec.EllipticCurvePrivateKey,
    ) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
        )

    def _leaf(
        self,
        name: str,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        hosts: tuple[str, ...] = (),
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            self._builder(subject, self._ca.subject, key)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(ca=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(self._ca_id),
                critical=False,
            )
        )
        if hosts:
            alternatives: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    alternatives.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    alternatives.append(x509.DNSName(host))
            builder = builder.add_extension(
                x509.SubjectAlternativeName(alternatives), critical=False
            )
        cert = builder.sign(self._ca_key, hashes.SHA256())
        pair = KeyPair(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(pair.key, key)
        return pair

    def serving(self, name: str, host: str, *names: str) -> KeyPair:
        """A server certificate for `host` (and `names`), signed by the CA."""
        return self._leaf(name, _name(name), ExtendedKeyUsageOID.SERVER_AUTH, (host, *names))

    def client(self, name: str, user: str, *groups: str) -> KeyPair:
        """A client certificate: kube-apiserver takes its CN as the user, its O as groups."""
        return self._leaf(name, _name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH)

    def service_account_keys(self) -> KeyPair:
        """The RSA pair kube-apiserver signs service-account tokens with (`cert` is the
        public key, as --service-account-key-file takes it)."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pair = KeyPair(self.directory / "sa.pub", self.directory / "sa.key")
        pair.cert.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        _write_key(pair.key, key)
        return pair
