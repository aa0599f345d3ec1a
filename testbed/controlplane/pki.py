"""The control plane's certificates: one CA, the API server's serving certificate, a client certificate per
component identity, and the ServiceAccount token signing key.

ECDSA P-256 throughout (Kubernetes accepts it for serving, client and token-signing keys, and it is generated in
milliseconds, where RSA takes a good part of a second per key). Identities follow Kubernetes' conventions: the
certificate's CN is the user name and its O fields the groups (`system:masters` is the group RBAC never denies).
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

VALID_DAYS = 30
SERVING_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
SERVING_ADDRESSES = ("127.0.0.1",)
"""Loopback; the API server's certificate also names the `kubernetes` Service's ClusterIP, as kubeadm's does
(`issue(addresses=...)`: each control plane draws its own service range)."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    cert: Path
    key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _name(common_name: str, groups: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class CertificateAuthority:
    """A self-signed CA in `folder` (`ca.crt`, `ca.key`) that issues the rest: a new one, or with `load` the one a
    running control plane made (for identities that join after it started, such as a real node's kubelet)."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.key = _key()
        now = datetime.datetime.now(datetime.UTC)
        name = _name("dl2-local-ca")
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )  # key_cert_sign, crl_sign
            .sign(self.key, hashes.SHA256())
        )
        self.pair = KeyPair(folder / "ca.crt", folder / "ca.key")
        self.pair.cert.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))
        _write_key(self.key, self.pair.key)

    @classmethod
    def load(cls, folder: Path) -> CertificateAuthority:
        """The CA already in `folder` (its key is kept only there). FileNotFoundError if there is none (the control
        plane is not started), ValueError if its key is not the ECDSA key this module makes."""
        pair = KeyPair(folder / "ca.crt", folder / "ca.key")
        for path in (pair.cert, pair.key):
            if not path.is_file():
                raise FileNotFoundError(f"no {path.name} in {folder}: is the control plane started?")
        key = serialization.load_pem_private_key(pair.key.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{pair.key} is not the ECDSA key the control plane's CA uses")
        authority = cls.__new__(cls)
        authority.folder, authority.key, authority.pair = folder, key, pair
        authority.certificate = x509.load_pem_x509_certificate(pair.cert.read_bytes())
        return authority

    def issue(
        self,
        name: str,
        common_name: str,
        groups: tuple[str, ...] = (),
        server: bool = False,
        folder: Path | None = None,
        addresses: tuple[str, ...] = (),
    ) -> KeyPair:
        """`<name>.crt` and `<name>.key` in `folder` (None: the CA's): a client certificate (CN user, O groups), or
        with `server` the API server's serving certificate (loopback names and addresses, and `addresses`)."""
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        usage = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, groups))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        )
        if server:
            alternative: list[x509.GeneralName] = [x509.DNSName(dns) for dns in SERVING_NAMES]
            alternative += [x509.IPAddress(ipaddress.ip_address(a)) for a in (*SERVING_ADDRESSES, *addresses)]
            builder = builder.add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        folder = folder or self.folder
        folder.mkdir(parents=True, exist_ok=True)
        pair = KeyPair(folder / f"{name}.crt", folder / f"{name}.key")
        pair.cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair

    def signing_key(self, name: str = "service-account") -> KeyPair:
        """The key pair that signs ServiceAccount tokens (`<name>.key`, public half in `<name>.pub`)."""
        key = _key()
        pair = KeyPair(self.folder / f"{name}.pub", self.folder / f"{name}.key")
        _write_key(key, pair.key)
        pair.cert.write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        return pair
