"""The Diagnostics web UI: Runtime, Retrieval and Evaluation pages on a loopback port.

The daemon serves it next to its Unix socket (``serve(..., ui_port=...)``); the pages call the
same dispatch app (``POST /v1/<method>``) behind :mod:`.security`'s checks. ``memcore ui``
(:mod:`.launch`) prints the address with this start's token and opens it.
"""
