"""``python -m memory_core``: runs the CLI entrypoint as ``__main__``.

A shim, not part of the pure core: it names the entrypoint module instead of importing it, so
the core's import graph never reaches entrypoints.
"""

import runpy

runpy.run_module("memory_core.entrypoints.cli.main", run_name="__main__", alter_sys=True)
