def walk_records(
    section: bytes | bytearray | memoryview,
    count: int,
    first_timestamp: int,
    timestamp_low: int,
    timestamp_high: int,
    require_keys: bool,
) -> tuple[int, int, int, int, int]: ...
