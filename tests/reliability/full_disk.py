"""A disk that fills up under real Lucene (issue 14 item 7).

``FullDisk(directory)`` mounts a small tmpfs on ``directory`` (the test runs as root in CI); where
mounting is not allowed it falls back to an injected ENOSPC: while the marker file exists,
the Lucene adapter's commit is a Java write to ``/dev/full``, so the JVM still raises a real
``java.io.IOException: No space left on device`` through the adapter's one JVM boundary. ``mode``
says which ran (``tmpfs`` or ``injected``); the tests record it.

``python -m tests.reliability.full_disk MARKER PYTHON -m MODULE ARGS...`` runs ``MODULE`` (the
daemon) in this process with that injection installed: a command prefix, the fallback for the
daemon test; with a tmpfs the daemon runs unpatched.
"""

from __future__ import annotations

import contextlib
import errno
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

TMPFS = "tmpfs"
INJECTED = "injected"
FILLER = ".filler"  # a plain file: never listed, pruned or published as a generation


def _mount(directory: Path, size: str) -> bool:
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(directory)],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


class FullDisk:
    def __init__(self, directory: Path, size: str = "1m") -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory = directory
        self.marker = directory.parent / ".disk-full"
        self.mode = TMPFS if _mount(directory, size) else INJECTED

    def fill(self) -> None:
        """Take every free byte (tmpfs), or arm the injection."""
        if self.mode == INJECTED:
            self.marker.touch()
            return
        with open(self.directory / FILLER, "ab", buffering=0) as filler:
            for chunk in (1 << 16, 4096, 1):
                while True:
                    try:
                        filler.write(b"\0" * chunk)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break

    def free(self) -> None:
        (self.directory / FILLER).unlink(missing_ok=True)
        self.marker.unlink(missing_ok=True)

    def close(self) -> None:
        """Unmount (after every process that maps index files on it has exited)."""
        self.free()
        if self.mode == TMPFS:
            done = subprocess.run(["umount", str(self.directory)], capture_output=True, timeout=30)
            if done.returncode != 0:  # still busy: detach it now, the kernel frees it when idle
                subprocess.run(["umount", "-l", str(self.directory)], capture_output=True, timeout=30)


def inject_enospc(marker: Path) -> Any:
    """A replacement for ``lucene_index._index_writer`` whose writer's commit, while ``marker``
    exists, raises Java's real ENOSPC (the caller installs it: monkeypatch, or the main below)."""
    from memory_core.adapters.search import jvm, lucene_index

    real = lucene_index._index_writer

    class _Writer:
        def __init__(self, writer: Any) -> None:
            self._writer = writer

        def commit(self) -> None:
            if not marker.exists():
                self._writer.commit()
                return
            out = jvm.ensure_jvm().autoclass("java.io.FileOutputStream")("/dev/full")
            try:
                out.write(b"\0" * 4096)  # java.io.IOException: No space left on device
            finally:
                with contextlib.suppress(Exception):
                    out.close()

        def __getattr__(self, name: str) -> Any:
            return getattr(self._writer, name)

    return lambda jnius, indexer: _Writer(real(jnius, indexer))


if __name__ == "__main__":
    from memory_core.adapters.search import lucene_index

    marker, _python, flag, module, *args = sys.argv[1:]
    assert flag == "-m", sys.argv
    lucene_index._index_writer = inject_enospc(Path(marker))
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
