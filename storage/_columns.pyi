from collections.abc import Sequence

Binary = tuple[bytes | None, int, bytes, bytes]
Headers = tuple[bytes, bytes, bytes, bytes | None, int, bytes, bytes, int]
Section = tuple[bytes | bytearray | memoryview, int, int, int, int, int]

def decode(
    sections: Sequence[Section], start: int, end: int, with_headers: bool
) -> tuple[int, bytes, bytes, bytes, Binary, Binary, Headers | None]: ...
