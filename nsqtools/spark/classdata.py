"""A class-data archive for Spark's JVM, so that it starts in about half the time.

Loading and verifying Spark's ~10,000 classes is most of a local session's start. The
JVM can map them from an archive instead (Java's AppCDS): the first session dumps the
classes it loaded when its JVM exits (-XX:ArchiveClassesAtExit, into a partial file
named by the JVM's pid), a later start adopts that file once the JVM is gone, and every
start after maps it (-XX:SharedArchiveFile). Measured here: 4.0 s → 2.1 s to a session.

The archive lives in the user's cache directory, one per Java and PySpark install (a
key of their paths and times); an archive the JVM cannot use is ignored by it (it
checks), never an error. NSQTOOLS_SPARK_CLASS_CACHE=0 turns all this off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pyspark

_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
_PARTIAL = ".partial-"
_PID_SUFFIX = ".jvm-pid"
# The partial archive this process's JVM was told to dump, if it was.
_dumping: Path | None = None


def java_options() -> str:
    """The JVM options that map the archive, or dump one when there is none yet."""
    global _dumping
    archive = _archive_path()
    if archive is None:
        return ""
    _adopt_finished_dumps(archive)
    if archive.exists():
        return f"-XX:SharedArchiveFile={archive} {_QUIET}"
    _dumping = _partial_path(archive)
    return f"-XX:ArchiveClassesAtExit={_dumping} {_QUIET}"


def record_jvm(jvm_pid: int) -> None:
    """Say which JVM dumps the partial archive this process named, so a later start
    knows when it is complete (when that JVM is gone). Said even when another JVM's
    archive was adopted while this one started: its dump is then removed once complete,
    not left behind (some 200 MiB)."""
    if _dumping is not None:
        Path(str(_dumping) + _PID_SUFFIX).write_text(str(jvm_pid))


def _archive_path() -> Path | None:
    if os.environ.get("NSQTOOLS_SPARK_CLASS_CACHE") == "0":
        return None
    java = _java()
    if java is None:
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "nsqtools")
    try:
        cache.mkdir(parents=True, exist_ok=True)
        return cache / f"spark-classes-{_install_key(java)}.jsa"
    except OSError:
        return None  # no cache directory to write: start as the JVM does by itself


def _java() -> Path | None:
    java_home = os.environ.get("JAVA_HOME")
    found = Path(java_home, "bin", "java") if java_home else shutil.which("java")
    return Path(found).resolve() if found else None


def _install_key(java: Path) -> str:
    """Java's and Spark's jars: another install is another archive."""
    jars = Path(pyspark.__file__).parent / "jars"
    parts = [str(java), str(java.stat().st_mtime_ns), str(jars), str(jars.stat().st_mtime_ns)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _partial_path(archive: Path) -> Path:
    return archive.with_name(f"{archive.name}{_PARTIAL}{os.getpid()}")


def _adopt_finished_dumps(archive: Path) -> None:
    """Partial archives whose JVM has exited are complete (or absent, when it died
    before dumping): the first becomes the archive, the others go. So does a partial
    archive with no JVM named whose process is gone (its JVM never started, or it was
    left by a version that did not name it)."""
    for marker in archive.parent.glob(f"{archive.name}{_PARTIAL}*{_PID_SUFFIX}"):
        partial = Path(str(marker)[: -len(_PID_SUFFIX)])
        if _alive(int(marker.read_text() or 0)):
            continue
        if partial.exists() and partial.stat().st_size and not archive.exists():
            partial.rename(archive)
        partial.unlink(missing_ok=True)
        marker.unlink(missing_ok=True)
    for partial in archive.parent.glob(f"{archive.name}{_PARTIAL}*"):
        named_by = partial.name[len(archive.name) + len(_PARTIAL) :]
        unnamed = not Path(str(partial) + _PID_SUFFIX).exists()
        if named_by.isdigit() and unnamed and not _alive(int(named_by)):
            partial.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
