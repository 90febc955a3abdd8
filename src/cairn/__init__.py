"""Cairn: memory for AI agents."""

#: The release, as in pyproject.toml.
__version__ = "0.1.0"
