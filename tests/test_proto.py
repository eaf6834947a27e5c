"""The committed generated modules match annal.proto."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ["annal_pb2.py", "annal_pb2.pyi", "annal_pb2_grpc.py", "annal_pb2_grpc.pyi"]


def test_generated_modules_are_fresh(tmp_path: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)
    subprocess.run(
        [sys.executable, str(ROOT / "proto" / "generate.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
    )
    stale = [
        name
        for name in GENERATED
        if (tmp_path / "annal" / "v1" / name).read_bytes()
        != (ROOT / "proto" / "annal" / "v1" / name).read_bytes()
    ]
    assert not stale, f"regenerate with: .venv/bin/python proto/generate.py (stale: {stale})"


def test_wire_contract_imports_as_annal_v1() -> None:
    from annal.v1 import annal_pb2, annal_pb2_grpc

    request = annal_pb2.ProduceRequest(acks=-1, timeout_ms=30_000)
    assert annal_pb2.ProduceRequest.FromString(request.SerializeToString()).acks == -1
    assert annal_pb2.ErrorCode.Name(6) == "NOT_LEADER_OR_FOLLOWER"
    assert hasattr(annal_pb2_grpc, "AnnalStub") and hasattr(annal_pb2_grpc, "BrokerControlStub")


def test_every_rpc_field_and_error_code_is_commented() -> None:
    lines = (ROOT / "proto" / "annal" / "v1" / "annal.proto").read_text("utf-8").splitlines()
    declaration = re.compile(
        r"(rpc \w+|(repeated |map<[^>]+> )?[\w.]+ \w+ = \d+;|[A-Z_]+ = -?\d+;)"
    )
    bare = [
        f"line {n + 1}: {line.strip()}"
        for n, line in enumerate(lines)
        if declaration.match(line.strip()) and not lines[n - 1].strip().startswith("//")
    ]
    assert bare == [], "uncommented declarations in annal.proto:\n" + "\n".join(bare)
