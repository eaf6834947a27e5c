from collections.abc import Sequence
from types import NotImplementedType

def encode_section(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    timestamp_deltas: Sequence[int] | None,
) -> bytes | NotImplementedType: ...
