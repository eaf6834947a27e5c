"""``python -m annal.deploy.secure`` (docker-compose.secure.yml's security-init): the
files of a secured cluster made once and kept on every later run, unless one is
missing, wrong or about to expire."""

from __future__ import annotations

from pathlib import Path

import pytest
from annal.deploy.certs import Identity, issue
from annal.deploy.secure import (
    ADMIN,
    RENEW_DAYS,
    SecureFiles,
    ensure_secure_files,
    main,
    make_secure_files,
)
from annal.security.scram import SCRAM_SHA_512, verify_password
from annal.zk.client import ZkClient
from cryptography import x509


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def identity(path: Path) -> Identity:
    return Identity.from_pem(path.read_bytes())


def test_certificates_name_the_brokers_and_the_admin(tmp_path: Path) -> None:
    files, password, done = ensure_secure_files(tmp_path / "s", 2, "broker-{id}")
    assert [line.rsplit(": ", 1)[0] for line in done] == [
        str(files.ca), *(str(files.keystore(w)) for w in ("broker-1", "broker-2", ADMIN)),
        str(files.kafka_admin_config),
    ]  # fmt: skip
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    for who, hosts in (("broker-1", {"broker-1"}), ("broker-2", {"broker-2"}), (ADMIN, set())):
        found = identity(files.keystore(who))
        assert found.common_name() == who
        assert found.host_names() == {"localhost", "127.0.0.1", *hosts}
        assert found.issued_by(ca)
    admin = files.admin_config.read_text()
    assert f"ssl.keystore.location={files.keystore(ADMIN)}" in admin
    kafka = files.kafka_admin_config.read_text()
    for line in ("security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512",
                 f"sasl.username={ADMIN}", f"sasl.password={password}",
                 f"ssl.ca.location={files.ca}"):  # fmt: skip
        assert line in kafka.splitlines()
    assert all(p.stat().st_mode & 0o077 == 0 for p in files.directory.iterdir())
    assert files.directory.stat().st_mode & 0o077 == 0


def test_a_second_run_keeps_everything(tmp_path: Path) -> None:
    key = tmp_path / "ca" / "ca-key.pem"
    _, password, _ = ensure_secure_files(tmp_path / "s", 3, "broker-{id}", key)
    before = snapshot(tmp_path / "s")
    _, again, done = ensure_secure_files(tmp_path / "s", 3, "broker-{id}", key)
    assert again == password
    assert snapshot(tmp_path / "s") == before
    assert all(line.endswith((": kept", ": kept the password")) for line in done), done


def test_with_the_ca_key_a_missing_certificate_is_issued_under_the_same_ca(
    tmp_path: Path,
) -> None:
    key = tmp_path / "ca" / "ca-key.pem"
    files, password, _ = ensure_secure_files(tmp_path / "s", 3, "broker-{id}", key)
    before = snapshot(files.directory)
    files.keystore("broker-2").unlink()
    _, again, _ = ensure_secure_files(tmp_path / "s", 4, "broker-{id}", key)  # one more too
    after = snapshot(files.directory)
    assert again == password
    changed = {name for name in after if before.get(name) != after[name]}
    assert changed == {"broker-2.pem", "broker-4.pem"}
    trusted = Identity.from_pem(key.read_bytes() + files.ca.read_bytes())
    assert identity(files.keystore("broker-4")).issued_by(trusted.cert)


def test_without_the_ca_key_a_missing_certificate_means_a_new_ca(tmp_path: Path) -> None:
    files, password, _ = ensure_secure_files(tmp_path / "s", 2, "broker-{id}")
    before = snapshot(files.directory)
    files.keystore("broker-1").unlink()
    _, again, done = ensure_secure_files(tmp_path / "s", 2, "broker-{id}")
    after = snapshot(files.directory)
    assert again == password  # the password is kept all the same
    assert {n for n in after if before.get(n) != after[n]} == {
        "ca.pem", "broker-1.pem", "broker-2.pem", "admin.pem"
    }  # fmt: skip
    assert "a new CA" in done[0]


def test_certificates_about_to_expire_or_for_other_names_are_issued_anew(
    tmp_path: Path,
) -> None:
    key = tmp_path / "ca-key.pem"
    files, _, _ = ensure_secure_files(tmp_path / "s", 2, "broker-{id}", key)
    ca = Identity.from_pem(key.read_bytes() + files.ca.read_bytes())
    issue(ca, "broker-1", ["broker-1"], valid_days=RENEW_DAYS - 1).write_keystore(
        files.keystore("broker-1")
    )
    issue(ca, "broker-2", ["somewhere-else"]).write_keystore(files.keystore("broker-2"))
    _, _, done = ensure_secure_files(tmp_path / "s", 2, "broker-{id}", key)
    assert [line.endswith(": kept") for line in done[:4]] == [True, False, False, True]
    assert Identity.valid_cert(identity(files.keystore("broker-1")).cert, RENEW_DAYS)
    assert "broker-2" in identity(files.keystore("broker-2")).host_names()


def test_the_local_cluster_files_are_the_same_kind(tmp_path: Path) -> None:
    """``annal cluster up --security sasl_ssl`` makes the same files, fresh each time."""
    files, password = make_secure_files(tmp_path, 2)
    assert files == SecureFiles(tmp_path / "security")
    kept = ensure_secure_files(files.directory, 2)
    assert kept[1] == password and all("kept" in line for line in kept[2])


def test_main_stores_the_admins_credential(
    zk_connect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--dir", str(tmp_path / "s"), "--brokers", "1", "--zookeeper-connect", zk_connect]
    assert main(args) == 0
    password = _password(tmp_path / "s")
    assert password not in capsys.readouterr().out
    assert main(args) == 0  # again: the same password, stored again
    assert _password(tmp_path / "s") == password
    with ZkClient(zk_connect) as zk:
        credential = zk.get_user_scram_credentials(ADMIN)[SCRAM_SHA_512]
    assert verify_password(SCRAM_SHA_512, credential, password)


def test_main_says_what_is_wrong(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0 and "security-init" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--dir", str(tmp_path), "--brokers", "0"])
    assert "--brokers" in capsys.readouterr().err


def _password(directory: Path) -> str:
    lines = SecureFiles(directory).kafka_admin_config.read_text().splitlines()
    return next(line.split("=", 1)[1] for line in lines if line.startswith("sasl.password="))
