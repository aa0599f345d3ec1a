"""The control plane's CA: one loaded from its folder (as real nodes do once the control plane runs) issues
certificates the original verifies, with the identity asked for; a folder without a CA is named."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from testbed.controlplane.pki import CertificateAuthority


def test_a_loaded_ca_issues_what_the_original_verifies(tmp_path: Path) -> None:
    original = CertificateAuthority(tmp_path / "pki")
    pair = CertificateAuthority.load(tmp_path / "pki").issue(
        "client", "system:node:dl2-real-0", ("system:nodes",), folder=tmp_path / "node"
    )
    assert pair.cert == tmp_path / "node" / "client.crt" and pair.key.stat().st_mode & 0o777 == 0o600
    issued = x509.load_pem_x509_certificate(pair.cert.read_bytes())
    issued.verify_directly_issued_by(original.certificate)
    subject = issued.subject
    assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:dl2-real-0"
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:nodes"]
    assert isinstance(issued.public_key(), ec.EllipticCurvePublicKey)
    assert not (tmp_path / "pki" / "client.crt").exists(), "issued where asked, not beside the CA"


def test_loading_where_no_ca_is_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no ca\.crt in .*: is the control plane started"):
        CertificateAuthority.load(tmp_path)


def test_a_service_range_is_drawn_clear_of_this_machines_addresses_and_kwoks() -> None:
    import ipaddress
    import socket

    from testbed.controlplane.cluster import KWOK_NODE_IP, SERVICE_NETWORKS, service_range

    for _ in range(20):
        drawn = service_range()
        assert drawn.prefixlen == 24 and drawn.subnet_of(SERVICE_NETWORKS)
        assert ipaddress.ip_address(KWOK_NODE_IP) not in drawn
        with socket.socket() as probe, pytest.raises(OSError):
            probe.bind((str(next(drawn.hosts())), 0))  # not an address of this machine


def test_the_api_servers_certificate_names_its_service_address(tmp_path) -> None:

    pair = CertificateAuthority(tmp_path).issue("apiserver", "kube-apiserver", server=True, addresses=("10.0.7.1",))
    names = x509.load_pem_x509_certificate(pair.cert.read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert {str(a) for a in names.value.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "10.0.7.1"}
