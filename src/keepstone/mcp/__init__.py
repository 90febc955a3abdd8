"""``keepstone mcp``: the agent tools over the Model Context Protocol (SPEC §9.2)."""

from keepstone.mcp.server import build_server, serve_http, serve_stdio

__all__ = ["build_server", "serve_http", "serve_stdio"]
