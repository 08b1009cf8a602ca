"""The daemon: memory-core's HTTP/JSON API on a Unix socket (brief §8).

Modules stay import-light (uvicorn, starlette and httpx load where they are used):
``api`` (wire types, codes, converter), ``dispatch`` (the one method table), ``app`` (ASGI),
``openapi`` (the contract), ``server`` (``serve``) with ``sockets``, ``background`` and ``idle``,
``client`` (typed client), ``launcher`` (start the daemon on demand), ``cli``. The MCP tool
(``memory_core.entrypoints.mcp``) and the CLI's daemon mode
(``memory_core.entrypoints.cli.executor``) are clients of this package.
"""
