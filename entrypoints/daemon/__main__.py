"""``python -m memory_core.entrypoints.daemon --home H [--socket S]``: run the daemon."""

from memory_core.entrypoints.daemon.server import main

raise SystemExit(main())
