"""Certificates and keys of the test control plane (hack/cluster), with `cryptography`.

One CA signs the API server's serving certificate and every client certificate (admin in
system:masters, the controller manager, the scheduler, users); a second CA signs the
front-proxy client certificate the aggregator presents to extension API servers. The
service-account key pair signs and verifies ServiceAccount tokens.
"""
from __future__ import annotations

import datetime
import ipaddress
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=30)


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name(attrs + [x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class CA:
    """A certificate authority kept as ca.crt/ca.key under a directory."""

    def __init__(self, directory: pathlib.Path, name: str = "ca"):
        self.crt_path = directory / f"{name}.crt"
        self.key_path = directory / f"{name}.key"
        if self.crt_path.exists() and self.key_path.exists():
            self.cert = x509.load_pem_x509_certificate(self.crt_path.read_bytes())
            self.key = serialization.load_pem_private_key(self.key_path.read_bytes(), None)
            return
        directory.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        subject = _name(f"torchdev-test-{name}")
        self.cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256()))
        self.crt_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.key_path.write_bytes(_key_pem(self.key))
        self.key_path.chmod(0o600)

    def issue(self, directory: pathlib.Path, name: str, cn: str, orgs: tuple[str, ...] = (),
              server_names: tuple[str, ...] = (), ips: tuple[str, ...] = ()) -> tuple[pathlib.Path, pathlib.Path]:
        """A leaf certificate <name>.crt/<name>.key: a client one, or a serving one when
        server_names/ips are given. Returns the two paths."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        server = bool(server_names or ips)
        usage = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder().subject_name(_name(cn, orgs)).issuer_name(self.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usage), critical=False))
        if server:
            sans = [x509.DNSName(n) for n in server_names]
            sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        crt, keyfile = directory / f"{name}.crt", directory / f"{name}.key"
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        keyfile.write_bytes(_key_pem(key))
        keyfile.chmod(0o600)
        return crt, keyfile


def service_account_keys(directory: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """sa.key (private, RSA 2048: signs tokens) and sa.pub (verifies them)."""
    key_path, pub_path = directory / "sa.key", directory / "sa.pub"
    if not key_path.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.TraditionalOpenSSL,
                                               serialization.NoEncryption()))
        key_path.chmod(0o600)
        pub_path.write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return key_path, pub_path
