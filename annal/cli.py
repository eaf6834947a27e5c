"""The ``annal`` command line.

Every command is a subcommand with its own ``--help``; bad arguments are a
usage error with exit code 2 (argparse's convention, as Kafka's tools).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from annal import __version__
from annal.clierrors import fail
from annal.errors import AnnalError


class CommandParser(argparse.ArgumentParser):
    """A command's parser (and its subcommands', which inherit the class): an
    argument it does not know is a usage error with its own usage, as Kafka's
    tools print theirs, not only the top-level one."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="annal",
        description="annal: a replicated, partitioned commit log in the style of Kafka.",
    )
    parser.add_argument("--version", action="version", version=f"annal {__version__}")
    commands: Any = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=CommandParser
    )
    commands.required = True

    from annal import (
        aclscmd,
        brokercmd,
        clustercmd,
        configscmd,
        consolecmd,
        deleterecordscmd,
        dumplog,
        electioncmd,
        getoffsetscmd,
        groupscmd,
        logdirscmd,
        perfcmd,
        reassigncmd,
        topicscmd,
        transactionscmd,
        verifiablecmd,
        webconsolecmd,
    )

    brokercmd.add_parser(commands)
    clustercmd.add_parser(commands)
    topicscmd.add_parser(commands)
    electioncmd.add_parser(commands)
    reassigncmd.add_parser(commands)
    deleterecordscmd.add_parser(commands)
    getoffsetscmd.add_parser(commands)
    logdirscmd.add_parser(commands)
    configscmd.add_parser(commands)
    aclscmd.add_parser(commands)
    groupscmd.add_parser(commands)
    transactionscmd.add_parser(commands)
    consolecmd.add_parsers(commands)
    verifiablecmd.add_parsers(commands)
    perfcmd.add_parser(commands)
    dumplog.add_parser(commands)
    webconsolecmd.add_parser(commands)
    _add_command_config(commands)
    return parser


def _add_command_config(commands: Any) -> None:
    """``--command-config FILE`` on every command that talks to brokers (those
    with ``--bootstrap-server``), as Kafka's tools take it."""
    pending = list(commands.choices.values())
    while pending:
        parser = pending.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(action.choices.values())
        if "--bootstrap-server" in parser._option_string_actions:
            parser.add_argument(
                "--command-config", type=Path, metavar="FILE",
                help="client settings (a properties file): security.protocol=SSL with "
                "ssl.truststore.location (the CA's PEM) and, for brokers that require "
                "client certificates, ssl.keystore.location (PEM key and certificate)",
            )  # fmt: skip
            _add_zookeeper(parser)


def _add_zookeeper(parser: argparse.ArgumentParser) -> None:
    """``--zookeeper`` as the other way to name the cluster, where a command does
    not take it already (the ZooKeeper-era spelling of Kafka's tools: the brokers
    registered there are the bootstrap servers)."""
    bootstrap = parser._option_string_actions["--bootstrap-server"]
    if "--zookeeper" in parser._option_string_actions or not bootstrap.required:
        return
    bootstrap.required = False
    bootstrap.help = (bootstrap.help or "brokers to bootstrap from") + (
        "; a Kafka listener works too (its broker's gRPC listener is found)"
    )
    parser.add_argument(
        "--zookeeper", metavar="HOST:PORT[/CHROOT]",
        help="find the brokers registered in ZooKeeper instead of --bootstrap-server",
    )  # fmt: skip
    parser.set_defaults(cluster_parser=parser)


def _resolve_cluster(args: argparse.Namespace) -> str | None:
    """Turn ``--zookeeper`` or Kafka listener addresses into the gRPC bootstrap
    servers the command takes; what went wrong, if anything."""
    parser = getattr(args, "cluster_parser", None)
    if parser is not None:
        if (args.bootstrap_server is None) == (args.zookeeper is None):
            parser.error("give exactly one of --bootstrap-server and --zookeeper")
        if args.zookeeper is not None:
            from annal.client.bootstrap import servers_from_zookeeper

            logging.getLogger("kazoo").setLevel(logging.ERROR)  # the failure is one line
            try:
                args.bootstrap_server = servers_from_zookeeper(args.zookeeper)
            except ValueError as exc:
                parser.error(f"--zookeeper: {exc}")
            return None
    if getattr(args, "bootstrap_server", None):
        from annal.kafka_bootstrap import KafkaBootstrapError, grpc_bootstrap

        try:
            args.bootstrap_server = grpc_bootstrap(args.bootstrap_server)
        except KafkaBootstrapError as exc:
            return str(exc)
    return None


def _apply_command_config(args: argparse.Namespace) -> str | None:
    """Make the ``--command-config`` file's security settings every client's
    default; what is wrong with the file, if anything."""
    path = getattr(args, "command_config", None)
    if path is None:
        return None
    from annal.client.security import (
        SecurityConfigError,
        command_config_security,
        set_default_security,
    )

    try:
        set_default_security(command_config_security(path))
    except SecurityConfigError as exc:
        return str(exc)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    from annal import topicscmd, transactionscmd

    # gRPC's own log lines (a failed TLS handshake, ...) would repeat what the
    # command reports in one line of its own
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")

    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(transactionscmd.kafka_spelling(topicscmd.kafka_spelling(words)))
    if (problem := _apply_command_config(args)) is not None:
        print(f"annal {args.command}: {problem}", file=sys.stderr)
        return 2
    try:
        if (problem := _resolve_cluster(args)) is not None:
            print(f"annal {args.command}: {problem}", file=sys.stderr)
            return 1
        code: int = args.run(args)
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return 130
    except AnnalError as exc:  # a failed request no command caught itself
        return fail(f"annal {args.command}", exc)
    return code


if __name__ == "__main__":
    sys.exit(main())
