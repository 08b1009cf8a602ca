from memory_core.entrypoints.cli import main

raise SystemExit(main())
