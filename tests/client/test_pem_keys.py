"""Keys and certificates read with ``cryptography``: encrypted keys with Kafka's
``ssl.key.password``, and a clear error, before any connection, for what cannot be
read (an encrypted key without its password was a traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest
from annal.client.security import (
    Security,
    SecurityConfigError,
    pem_certificates,
    pem_private_key,
)
from cryptography.hazmat.primitives import serialization
from runcli import annal
from tls_certs import issue, make_ca


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    ca = make_ca("annal test CA")
    client = issue(ca, "client")
    encrypted = serialization.BestAvailableEncryption(b"s3cret")
    out = {
        "ca": tmp_path / "ca.pem",
        "cert": tmp_path / "cert.pem",
        "pkcs8": tmp_path / "pkcs8.pem",
        "legacy": tmp_path / "legacy.pem",
        "plain": tmp_path / "plain.pem",
    }
    out["ca"].write_bytes(ca.cert_pem())
    out["cert"].write_bytes(client.cert_pem())
    out["plain"].write_bytes(client.key_pem() + client.cert_pem())
    pem, formats = serialization.Encoding.PEM, serialization.PrivateFormat
    out["pkcs8"].write_bytes(client.key.private_bytes(pem, formats.PKCS8, encrypted))
    out["legacy"].write_bytes(client.key.private_bytes(pem, formats.TraditionalOpenSSL, encrypted))
    return out


def test_encrypted_keys_are_read_with_their_password(files: dict[str, Path]) -> None:
    for kind in ("pkcs8", "legacy"):
        data = files[kind].read_bytes()
        assert b"BEGIN PRIVATE KEY" in pem_private_key(data, str(files[kind]), "s3cret")
        with pytest.raises(SecurityConfigError, match="encrypted: give its password as ssl"):
            pem_private_key(data, str(files[kind]))
        with pytest.raises(SecurityConfigError, match="or ssl.key.password is wrong"):
            pem_private_key(data, str(files[kind]), "guess")
    plain = files["plain"].read_bytes()
    with pytest.raises(SecurityConfigError, match="is not encrypted, but ssl.key.password is set"):
        pem_private_key(plain, "plain.pem", "s3cret")
    # a keystore holds both; certificates come back without the key
    assert pem_certificates(plain, "plain.pem") == files["cert"].read_bytes()
    with pytest.raises(SecurityConfigError, match="holds no certificate"):
        pem_certificates(files["pkcs8"].read_bytes(), "key.pem")
    with pytest.raises(SecurityConfigError, match="holds no private key"):
        pem_private_key(files["cert"].read_bytes(), "cert.pem")

    works = Security("SSL", str(files["ca"]), str(files["cert"]), str(files["pkcs8"]),
                     key_password="s3cret")  # fmt: skip
    assert "s3cret" not in repr(works)
    with pytest.raises(SecurityConfigError, match="encrypted"):
        Security("SSL", str(files["ca"]), str(files["cert"]), str(files["pkcs8"]))


def test_the_command_line_names_the_key_problem_before_connecting(
    files: dict[str, Path], tmp_path: Path
) -> None:
    config = tmp_path / "client.properties"
    base = (
        f"security.protocol=SSL\nssl.truststore.location={files['ca']}\n"
        f"ssl.certificate.location={files['cert']}\n"
    )
    for kind in ("pkcs8", "legacy"):
        config.write_text(base + f"ssl.key.location={files[kind]}\n")
        run = annal("topics", "--list", "--bootstrap-server", "127.0.0.1:1",
                    "--command-config", str(config))  # fmt: skip
        assert run.returncode == 2, run.stderr
        assert "is encrypted: give its password as ssl.key.password" in run.stderr
        assert "Traceback" not in run.stderr
    config.write_text(base + f"ssl.key.location={files['pkcs8']}\nssl.key.password=guess\n")
    run = annal("topics", "--list", "--bootstrap-server", "127.0.0.1:1",
                "--command-config", str(config))  # fmt: skip
    assert run.returncode == 2 and "ssl.key.password is wrong" in run.stderr
    assert "guess" not in run.stderr
