"""The ``annal`` command line.

Every command is a subcommand with its own ``--help``; bad arguments are a
usage error with exit code 2 (argparse's convention, as Kafka's tools).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from annal import __version__
from annal.clierrors import fail
from annal.errors import AnnalError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="annal",
        description="annal: a replicated, partitioned commit log in the style of Kafka.",
    )
    parser.add_argument("--version", action="version", version=f"annal {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    from annal import (
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
        verifiablecmd,
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
    groupscmd.add_parser(commands)
    consolecmd.add_parsers(commands)
    verifiablecmd.add_parsers(commands)
    perfcmd.add_parser(commands)
    dumplog.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from annal import topicscmd

    parser = build_parser()
    args = parser.parse_args(topicscmd.kafka_spelling(list(sys.argv[1:] if argv is None else argv)))
    try:
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
