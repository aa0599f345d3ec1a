"""Client certificates from a running control plane's CA, for identities that join after it started (a real
node's kubelet: CN `system:node:<name>`, O `system:nodes`).

`pki.CertificateAuthority` makes a new CA when the control plane starts and keeps its key only on disk
(`<pki>/ca.key`); this loads that key and issues from it, with the same algorithm, validity and extensions.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dl2.controlplane.pki import VALID_DAYS, KeyPair


def issue_client_certificate(pki: Path, folder: Path, common_name: str, groups: tuple[str, ...] = ()) -> KeyPair:
    """`<folder>/client.crt` and `client.key`: a client certificate for user `common_name` in `groups`, signed by
    the CA in `pki` (`ca.crt`, `ca.key`). FileNotFoundError if the control plane has no CA there."""
    for name in ("ca.crt", "ca.key"):
        if not (pki / name).is_file():
            raise FileNotFoundError(f"no {name} in {pki}: is the control plane started?")
    authority = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    signer = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    if not isinstance(signer, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{pki / 'ca.key'} is not the ECDSA key the control plane's CA uses")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(authority.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(signer, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    pair = KeyPair(folder / "client.crt", folder / "client.key")
    pair.cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    pair.key.chmod(0o600)
    return pair
