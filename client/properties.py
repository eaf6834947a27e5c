"""Java's properties format, as Kafka's tools read ``--command-config`` files and
brokers ``server.properties``: ``key=value``, ``key: value``, ``key value``,
``#``/``!`` comments, escapes and continuation lines, read by ``jproperties``."""

from __future__ import annotations

from pathlib import Path

from jproperties import ParseError, Properties


class PropertiesError(ValueError):
    """A properties file that cannot be read or parsed; the message names it."""


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """The settings of ``text``; PropertiesError naming ``source`` when malformed."""
    props = Properties()
    try:
        props.load(text, "utf-8")
    except (ValueError, ParseError) as exc:
        raise PropertiesError(f"{source}: not a properties file: {exc}") from None
    return {str(key): str(value) for key, value in props.properties.items()}


def read_properties(path: Path, what: str) -> dict[str, str]:
    """The settings of the file at ``path`` (``what`` names it in errors, e.g.
    ``--command-config``); PropertiesError when it cannot be read or parsed."""
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise PropertiesError(f"cannot read {what} {path}: {exc.strerror}") from None
    return parse_properties(text, str(path))
