"""The installed package's version, one lookup for the library, the CLI, the daemon and MCP."""

from __future__ import annotations

from importlib import metadata


def package_version() -> str:
    try:
        return metadata.version("memory-core")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"
