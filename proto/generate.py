"""Regenerate the Python modules of the wire contract.

    .venv/bin/python proto/generate.py            # write proto/annal/v1/*_pb2*.py[i]
    .venv/bin/python proto/generate.py --out DIR  # write them elsewhere (the staleness test)

The generated files are committed; tests/test_proto.py fails when they no
longer match annal.proto.  They are installed as the package ``annal.v1``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
SOURCES = ["annal/v1/annal.proto"]


def generate(out: Path) -> None:
    import grpc_tools
    from grpc_tools import protoc

    includes = Path(grpc_tools.__file__).parent / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{includes}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_out={out}",
        f"--mypy_grpc_out={out}",
        *SOURCES,
    ]
    # the mypy plugins are scripts next to this interpreter, in the virtualenv
    bin_dir = str(Path(sys.executable).parent)
    os.environ["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
    code = protoc.main(args)
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=PROTO_ROOT, help="output root (default: proto/)"
    )
    args = parser.parse_args()
    generate(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
