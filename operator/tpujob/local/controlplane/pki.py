"""The certificates and keys of a local control plane: one CA, the API server's serving
certificate, client certificates for each component, the service-account signing key and the
serving certificates of the webhooks and the kubelet endpoint. All for 127.0.0.1 only.

    pki = build_pki(folder)        # writes PEM files under folder, returns their paths
    pki.client("admin")            # (cert, key) of a system:masters client
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

# Who each client is: (common name = user, organization = group). The components' names are
# the ones their built-in RBAC roles are bound to (system:kube-controller-manager,
# system:kube-scheduler); the local kubelets, the JobSet controller and Kueue act as admins
# here (on a cluster they have their own service accounts and roles).
CLIENTS = {
    "admin": ("tpujob-local-admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", None),
    "scheduler": ("system:kube-scheduler", None),
    "kubelet": ("tpujob-local-kubelet", "system:masters"),
    "jobset": ("jobset-controller", "system:masters"),
    "kueue": ("kueue-controller", "system:masters"),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", "system:masters"),
}
SERVING = {  # name -> DNS names (127.0.0.1 and localhost always)
    "apiserver": ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                  "kubernetes.default.svc.cluster.local"),
    "webhooks": (),
    "kubelet": (),
}
SERVICE_IP = "10.96.0.1"   # the `kubernetes` Service's cluster IP: a name in the certificate only
_VALID = datetime.timedelta(days=365)


@dataclass(frozen=True)
class Pki:
    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def sa_key(self) -> Path:
        return self.folder / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.folder / "sa.pub"

    def client(self, name: str) -> tuple[Path, Path]:
        return self.folder / f"{name}.crt", self.folder / f"{name}.key"

    def serving(self, name: str) -> tuple[Path, Path]:
        return self.folder / f"{name}-serving.crt", self.folder / f"{name}-serving.key"


def build_pki(folder: Path) -> Pki:
    """Write a fresh CA and every certificate and key under `folder` (kept private: 0600)."""
    folder.mkdir(parents=True, exist_ok=True)
    pki = Pki(folder)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tpujob-local-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(now + _VALID)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
          .add_extension(_key_usage(signs_certificates=True), critical=True)
          .sign(ca_key, hashes.SHA256()))
    _write(pki.ca, ca.public_bytes(serialization.Encoding.PEM))
    # The CA's key stays in memory: nothing here signs after this function.

    def issue(path_pair: tuple[Path, Path], subject: x509.Name, usage, names=()) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now).not_valid_after(now + _VALID)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), False)
                   # Python 3.13 checks certificates strictly (VERIFY_X509_STRICT): a leaf
                   # must name its issuer's key.
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                       ca_key.public_key()), False)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                                  False)
                   .add_extension(_key_usage(signs_certificates=False), True))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(names)), False)
        cert = builder.sign(ca_key, hashes.SHA256())
        _write(path_pair[0], cert.public_bytes(serialization.Encoding.PEM))
        _write(path_pair[1], _key_pem(key))

    for name, (user, group) in CLIENTS.items():
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        if group:
            attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, group))
        issue(pki.client(name), x509.Name(attrs), ExtendedKeyUsageOID.CLIENT_AUTH)
    for name, dns in SERVING.items():
        names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        names += [x509.DNSName(d) for d in dns]
        if name == "apiserver":
            names.append(x509.IPAddress(ipaddress.ip_address(SERVICE_IP)))
        issue(pki.serving(name), x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]),
              ExtendedKeyUsageOID.SERVER_AUTH, names)
    sa_key = ec.generate_private_key(ec.SECP256R1())
    _write(pki.sa_key, _key_pem(sa_key))
    _write(pki.sa_pub, sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return pki


def _key_usage(signs_certificates: bool) -> x509.KeyUsage:
    """Digital signatures (ECDSA keys sign TLS handshakes), and certificates for the CA."""
    return x509.KeyUsage(digital_signature=True, key_cert_sign=signs_certificates,
                         crl_sign=signs_certificates, content_commitment=False,
                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                         encipher_only=False, decipher_only=False)


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.write_bytes(data)
