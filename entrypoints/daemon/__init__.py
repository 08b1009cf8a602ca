"""The daemon: memory-core's HTTP/JSON API on a Unix socket (brief §8).

Modules stay import-light (uvicorn, starlette and httpx load where they are used):
``api`` (wire types, codes, converter), ``dispatch`` (the one method table), ``app`` (ASGI),
``openapi`` (the contract), ``server`` (``serve``), ``client`` (typed client), ``cli``.
"""
