"""What the tests that run the real daemon as a subprocess share."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import IO

from memory_core.entrypoints.daemon.client import DaemonClient


class DaemonProcess:
    """A daemon subprocess, the client on its socket and the file its stderr goes to."""

    proc: subprocess.Popen[bytes]
    client: DaemonClient
    _stderr: IO[bytes]

    def stop(self) -> int:
        """SIGTERM (unless it has exited already); its exit status. Closes the client and the log."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        finally:
            self.client.close()
            self._stderr.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
