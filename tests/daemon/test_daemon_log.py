"""The daemon's stderr is its JSON log, to the last line: a refused start is a record too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .test_server import ROOT, Daemon


def test_a_refused_start_is_a_json_record_naming_its_code(tmp_path: Path) -> None:
    first = Daemon(tmp_path / "home", tmp_path / "first.log", "--no-warm", "--no-ui")
    try:
        second = subprocess.run(
            [sys.executable, "-m", "memory_core.entrypoints.daemon", "--home", str(first.home), "--no-ui"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        assert first.stop() == 0
    assert second.returncode == 1
    records = [json.loads(line) for line in second.stderr.splitlines() if line.strip()]
    refusal = records[-1]
    assert (refusal["level"], refusal["code"]) == ("error", "daemon_already_running")
    assert refusal["message"].startswith("error[daemon_already_running]: ")
    assert f"pid {first.proc.pid}" in refusal["message"]
