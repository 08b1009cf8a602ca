"""Everything the JVM prints reaches the daemon's JSON log as records (issue 14 item 7).

A child process sets up the daemon's logging, starts the JVM through ``adapters.jvm`` and makes
Java print the ways it does: System.out and System.err, a log4j2 error (how Anserini logs),
a java.util.logging message (how Lucene logs) and a stack trace with a cause, printed the way
Java code and the JVM's uncaught-exception handler print one. Stdout must stay empty (the CLI
prints JSON there, MCP speaks over it) and every stderr line must be one JSON record.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_NATIVE_JVM_NOTICE = "Picked up "  # HotSpot's own line when JAVA_TOOL_OPTIONS is set

CHILD = """
import time
from memory_core.entrypoints.daemon.server import configure_logging
configure_logging("info")
from memory_core.adapters.search import jvm
j = jvm.ensure_jvm()
system = j.autoclass("java.lang.System")
system.out.println("printed on System.out")
system.err.println("printed on System.err: é")
j.autoclass("org.apache.logging.log4j.LogManager").getLogger("io.anserini.probe").error("log4j \\"error\\"\\nline two")
j.autoclass("org.apache.logging.log4j.LogManager").getLogger("io.anserini.probe").info("log4j info is below WARN")
j.autoclass("java.util.logging.Logger").getLogger("org.apache.lucene.probe").warning("jul warning")
frame = j.autoclass("java.lang.StackTraceElement")("io.anserini.Probe", "run", "Probe.java", 7)
inner = j.autoclass("java.io.IOException")("No space left on device")
inner.setStackTrace([frame])
outer = j.autoclass("java.lang.RuntimeException")("probe failed", inner)
outer.setStackTrace([frame, frame])
outer.printStackTrace()
time.sleep(1.0)  # the relay logs a record once its continuation lines have stopped
"""


@pytest.mark.slow
def test_every_line_the_jvm_prints_is_a_json_record_on_stderr(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert done.stdout == b""
    lines = [line for line in done.stderr.decode("utf-8").splitlines() if line.strip()]
    records = [json.loads(line) for line in lines if not line.startswith(_NATIVE_JVM_NOTICE)]
    jvm = [r for r in records if r["logger"] == "memory_core.jvm"]
    by_message = {r["message"]: r for r in jvm}

    assert by_message["printed on System.out"]["level"] == "warning"
    assert "printed on System.err: é" in by_message
    log4j = by_message['log4j "error"\nline two']
    assert (log4j["level"], log4j["source"], log4j["java_logger"]) == ("error", "log4j", "io.anserini.probe")
    assert not any("below WARN" in r["message"] for r in jvm)
    jul = [r for r in jvm if r["message"].endswith("org.apache.lucene.probe: jul warning")]
    assert [r["level"] for r in jul] == ["warning"]
    # A stack trace is one record: its frames and its cause are continuation lines.
    trace = [r for r in jvm if r["message"].startswith("java.lang.RuntimeException: probe failed")]
    assert len(trace) == 1, jvm
    assert "\n\tat io.anserini.Probe.run(Probe.java:7)" in trace[0]["message"]
    assert "\nCaused by: java.io.IOException: No space left on device" in trace[0]["message"]
    assert not any(r["message"].startswith(("\tat ", "Caused by")) for r in jvm)


OPTIONS_CHILD = """
from memory_core.adapters.search import jvm
j = jvm.ensure_jvm()
factory = j.autoclass("java.lang.management.ManagementFactory")
bean = j.cast("com.sun.management.HotSpotDiagnosticMXBean",
              factory.getPlatformMXBean(j.autoclass("com.sun.management.HotSpotDiagnosticMXBean")))
for name in ("TieredStopAtLevel", "UseSerialGC"):
    print(name, bean.getVMOption(name).getValue())
"""


@pytest.mark.slow
def test_the_jvm_compiles_with_c1_only_and_collects_serially() -> None:
    # C2 compiled Lucene's search path for thousands of searches, taking the query embedding's core
    # (docs/performance.md, "The JVM's second compiler"); a parallel collector would do the same.
    done = subprocess.run([sys.executable, "-c", OPTIONS_CHILD], cwd=ROOT, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    values = dict(line.split(" ", 1) for line in done.stdout.decode().splitlines() if line.strip())
    assert values == {"TieredStopAtLevel": "1", "UseSerialGC": "true"}
