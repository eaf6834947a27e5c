"""What the commands print under a failed request: the hint follows what the
message says happened, not only its code (a TLS client on a plaintext listener
is not 'is the cluster up?'), and gRPC's own log lines stay out."""

from __future__ import annotations

from pathlib import Path

import pytest
from annal.client.cluster import ClientError
from annal.deploy.runner import BrokerProcess
from runcli import annal
from tls_certs import make_ca

from annal import errors
from annal.clierrors import fail


@pytest.mark.parametrize(
    ("message", "hint"),
    [
        ("no broker answered at h:1 (... Tls handshake failed ... WRONG_VERSION_NUMBER ...)",
         "a GRPC:// listener takes no security.protocol=SSL"),
        ("no broker answered at h:1 (... CERTIFICATE_VERIFY_FAILED ...)",
         "not signed by the CA in ssl.truststore.location"),
        ("no live broker with id 9 (live: [1])", "shows the brokers' ids"),
        ("no broker answered at h:1 (connection refused)", "is the cluster up"),
    ],
)  # fmt: skip
def test_the_hint_follows_the_message(
    message: str, hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert fail("annal x", ClientError(errors.BROKER_NOT_AVAILABLE, message)) == 1
    printed = capsys.readouterr().err.splitlines()
    assert printed[1].startswith("annal x: hint: ") and hint in printed[1]


@pytest.mark.timeout(120)
def test_a_tls_client_on_a_plaintext_listener_is_told_so(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(make_ca("annal test CA").cert_pem())
    config = tmp_path / "tls.properties"
    config.write_text(f"security.protocol=SSL\nssl.truststore.location={ca}\n")
    run = annal("topics", "--list", "--bootstrap-server", broker.endpoint,
                "--command-config", str(config))  # fmt: skip
    assert run.returncode == 1
    assert "a GRPC:// listener takes no security.protocol=SSL" in run.stderr
    assert "is the cluster up" not in run.stderr
    assert "ssl_transport_security" not in run.stderr  # gRPC's own log line
