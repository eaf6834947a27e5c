"""``annal acls`` and ``annal configs --entity-type users`` on a real broker (gRPC):
kafka-acls.sh's options and output, kafka-configs.sh's SCRAM spelling, what lands in
ZooKeeper, usage errors that name the problem, and no secret in any output or log."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from annal.deploy.runner import BrokerProcess
from annal.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, verify_password
from annal.zk.client import ZkClient

from annal.cli import main

pytestmark = pytest.mark.timeout(120)

ORDERS = "`ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`"


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    """A broker with the ACL authorizer (the ACL APIs need one); the anonymous test
    client is a super user."""
    return broker_factory(
        1,
        {
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS",
        },
    )


def entry(principal: str, operation: str, permission: str = "ALLOW", host: str = "*") -> str:
    return (
        f" \t(principal={principal}, host={host}, operation={operation}, "
        f"permissionType={permission})"
    )


def test_acls_add_list_and_remove(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    acls = ["acls", "--bootstrap-server", broker.endpoint]
    add = [*acls, "--add"]
    assert main([*add, "--allow-principal", "User:alice", "--operation", "Read",
                 "--operation", "describe", "--topic", "orders"]) == 0  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == [
        f"Adding ACLs for resource {ORDERS}:",
        entry("User:alice", "READ"),
        entry("User:alice", "DESCRIBE"),
        "",
    ]
    assert out[4:] == [f"Current ACLs for resource {ORDERS}:", *out[1:3], ""]

    assert main([*add, "--allow-principal", "User:app", "--producer", "--topic", "orders",
                 "--idempotent"]) == 0  # fmt: skip
    assert main([*add, "--allow-principal", "User:reader", "--allow-host", "10.0.0.7",
                 "--consumer", "--topic", "orders", "--group", "billing"]) == 0  # fmt: skip
    assert main([*add, "--deny-principal", "User:eve", "--topic", "ord",
                 "--resource-pattern-type", "prefixed"]) == 0  # fmt: skip
    capsys.readouterr()

    assert main([*acls, "--list", "--topic", "orders"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"Current ACLs for resource {ORDERS}:",
        entry("User:alice", "READ"),
        entry("User:alice", "DESCRIBE"),
        entry("User:app", "WRITE"),
        entry("User:app", "CREATE"),
        entry("User:app", "DESCRIBE"),
        entry("User:reader", "READ", host="10.0.0.7"),
        entry("User:reader", "DESCRIBE", host="10.0.0.7"),
        "",
    ]
    assert main([*acls, "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {(a["resource_type"], a["name"], a["pattern_type"]) for a in listed} == {
        ("Topic", "orders", "LITERAL"),
        ("Topic", "ord", "PREFIXED"),
        ("Group", "billing", "LITERAL"),
        ("Cluster", "kafka-cluster", "LITERAL"),
    }
    assert {"resource_type": "Cluster", "name": "kafka-cluster", "pattern_type": "LITERAL",
            "principal": "User:app", "host": "*", "operation": "IdempotentWrite",
            "permission_type": "Allow"} in listed  # fmt: skip
    assert {"resource_type": "Topic", "name": "ord", "pattern_type": "PREFIXED",
            "principal": "User:eve", "host": "*", "operation": "All",
            "permission_type": "Deny"} in listed  # fmt: skip
    # match: the ACLs that apply to a topic of that name (literal and prefixes)
    assert main([*acls, "--list", "--topic", "ordinary", "--resource-pattern-type", "match"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Current ACLs for resource "
        "`ResourcePattern(resourceType=TOPIC, name=ord, patternType=PREFIXED)`:",
        entry("User:eve", "ALL", "DENY"),
        "",
    ]
    with ZkClient(broker.zookeeper_connect) as zk:
        assert set(zk.children("/kafka-acl/Topic")) == {"orders"}
        assert zk.children("/kafka-acl-extended/prefixed/Topic") == ["ord"]
        assert zk.children("/kafka-acl/Group") == ["billing"]

    # --remove: the entries named; with no principal, everything of the resource.
    assert main([*acls, "--remove", "--allow-principal", "User:alice", "--operation", "Read",
                 "--topic", "orders", "--force"]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines() == [
        f"Removed ACLs from resource {ORDERS}:",
        entry("User:alice", "READ"),
        "",
    ]
    assert main([*acls, "--remove", "--allow-principal", "User:alice", "--topic", "orders"]) == 0
    assert "No ACL matched: nothing removed." in capsys.readouterr().out  # only All ones go
    properties = tmp_path / "client.properties"
    properties.write_text("security.protocol=PLAINTEXT\n")
    assert main([*acls, "--remove", "--topic", "orders", "--command-config", str(properties)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2 + 6  # heading, 6 entries, blank
    assert main([*acls, "--list", "--topic", "orders"]) == 0
    assert capsys.readouterr().out == ""
    with ZkClient(broker.zookeeper_connect) as zk:
        assert zk.children("/kafka-acl/Topic") == []


BAD = [
    (["--add", "--topic", "t"], "--add needs --allow-principal or --deny-principal"),
    (["--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"],
     "--consumer needs --topic and --group"),
    (["--add", "--allow-principal", "User:a", "--producer"], "--producer needs --topic"),
    (["--add", "--allow-principal", "alice", "--topic", "t"],
     "--allow-principal 'alice': principal 'alice' is not of the form <type>:<name>"),
    (["--add", "--allow-principal", "User:a", "--operation", "Reed", "--topic", "t"],
     "--operation: unknown AclOperation 'Reed'"),
    (["--add", "--allow-principal", "User:a", "--operation", "any", "--topic", "t"],
     "--operation Any only selects"),
    (["--add", "--allow-principal", "User:a", "--operation", "ClusterAction", "--topic", "t"],
     "a Topic has no operation ClusterAction"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"],
     "--add stores literal or prefixed ones"),
    (["--remove", "--allow-principal", "User:a"], "give a resource: --topic"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--json"],
     "--json goes with --list"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--idempotent"],
     "--idempotent goes with --producer"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--producer", "--operation", "Read"],
     "no --operation, --deny-principal or --deny-host"),
    (["--list", "--allow-principal", "User:a"], "--list takes resources only"),
    (["--add", "--deny-principal", "User:a", "--allow-host", "10.0.0.1", "--topic", "t"],
     "--allow-host goes with --allow-principal"),
    (["--add", "--allow-principal", "User:a", "--consumer", "--topic", "t", "--group", "g",
      "--cluster"], "--consumer takes no --cluster or --transactional-id"),
    (["--add", "--allow-principal", "User:a", "--group", ""], "an empty Group name"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "message"), BAD)
def test_acls_usage_errors_say_what_is_wrong(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["acls", "--bootstrap-server", "127.0.0.1:1", *args]) == 2
    assert message in capsys.readouterr().err


def test_acls_help_and_a_missing_action(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["acls", "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert "kafka-acls.sh" in shown and "--producer" in shown and "examples:" in shown
    with pytest.raises(SystemExit) as exited:
        main(["acls", "--bootstrap-server", "127.0.0.1:1", "--topic", "t"])
    assert exited.value.code == 2
    assert "one of the arguments --add --remove --list is required" in capsys.readouterr().err


def test_configs_users_scram_credentials(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    configs = ["configs", "--bootstrap-server", broker.endpoint, "--entity-type", "users"]
    alice = [*configs, "--entity-name", "alice"]
    secret = "alice-secret,=with-commas"
    assert main([*alice, "--alter", "--add-config", f"SCRAM-SHA-512=[password={secret}]"]) == 0
    assert main([*alice, "--alter", "--add-config",
                 "SCRAM-SHA-256=[iterations=8192,password=other-secret]"]) == 0  # fmt: skip
    assert main([*alice, "--describe"]) == 0
    printed = capsys.readouterr()
    assert printed.out.splitlines() == [
        "Completed updating config for user alice.",
        "Completed updating config for user alice.",
        "SCRAM credential configs for user-principal 'alice' are "
        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096",
    ]
    assert main([*alice, "--describe", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "user": "alice",
        "credentials": [
            {"mechanism": "SCRAM-SHA-256", "iterations": 8192},
            {"mechanism": "SCRAM-SHA-512", "iterations": 4096},
        ],
    }
    with ZkClient(broker.zookeeper_connect) as zk:
        stored = zk.get_user_scram_credentials("alice")
        assert verify_password(SCRAM_SHA_512, stored[SCRAM_SHA_512], secret)
        assert verify_password(SCRAM_SHA_256, stored[SCRAM_SHA_256], "other-secret")

    assert main([*alice, "--alter", "--delete-config", "SCRAM-SHA-256"]) == 0
    capsys.readouterr()
    assert main([*alice, "--alter", "--delete-config", "SCRAM-SHA-256"]) == 1
    err = capsys.readouterr().err
    assert "RESOURCE_NOT_FOUND" in err and "has no SCRAM-SHA-256 credential" in err
    assert main([*alice, "--alter", "--add-config", "SCRAM-SHA-512=[password=x]",
                 "--delete-config", "SCRAM-SHA-512"]) == 1  # fmt: skip
    assert "DUPLICATE_RESOURCE" in capsys.readouterr().err
    assert main([*configs, "--entity-name", "bob", "--describe"]) == 0
    assert capsys.readouterr().out == "User-principal 'bob' has no SCRAM credential.\n"

    # refused before any request, naming the problem and never the password
    for add, message in (
        ("SCRAM-SHA-1=[password=hush-hush]", "unknown SCRAM mechanism 'SCRAM-SHA-1'"),
        ("SCRAM-SHA-512=[iterations=100,password=hush-hush]", "iterations 100 is outside"),
        ("SCRAM-SHA-512=[password=hush]hush]", "a password cannot hold ']'"),
    ):
        assert main([*alice, "--alter", "--add-config", add]) == 2
        printed = capsys.readouterr()
        assert message in printed.err and "hush" not in printed.err + printed.out
    assert main([*alice, "--describe", "--all"]) == 2
    assert "--all goes with --entity-type topics" in capsys.readouterr().err

    log = broker.log_path.read_text()
    assert "SCRAM credential set: user 'alice', SCRAM-SHA-512, 4096 iterations" in log
    assert "SCRAM credential deleted: user 'alice', SCRAM-SHA-256" in log
    for secret_text in (secret, "other-secret", "salt=", "stored_key", "server_key"):
        assert secret_text not in log
