"""Where archives and compacted output live, named as Hadoop names them: a local path or
any Hadoop URI (file:, hdfs://, s3a://, gs://...), listed, moved and removed through
Hadoop's FileSystem API with the session's settings (credentials included), never
through Python's os module: what the driver's JVM sees is what Spark's tasks read.

A classic session lends its own JVM. A Spark Connect session has none on this side, so
a JVM of this process's own is started for it (pyspark's gateway, a few seconds) with
the --conf settings given: this machine then reaches the store itself, as a driver does.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the location helpers serve the command line, before PySpark loads
    from pyspark.sql import SparkSession

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:/")
_GLOB_CHARACTERS = re.compile(r"([\\{}\[\]*?])")
LOCAL_SCHEME = "file:"


def location_uri(location: str) -> str:
    """A SRC or --out as Hadoop takes it: a URI as given (without a trailing slash), a
    local path made absolute, as file:/path (the form Hadoop prints)."""
    if location.startswith(LOCAL_SCHEME + "///"):  # file:///x is file:/x
        location = location[len(LOCAL_SCHEME) + 2 :]
    elif _SCHEME.match(location):
        return location.rstrip("/") if location.rstrip("/")[-1:] != ":" else location
    return LOCAL_SCHEME + os.path.abspath(location)


def shown(uri: str) -> str:
    """A location as the user wrote it: local files by their path, others by URI."""
    if uri.startswith(LOCAL_SCHEME) and not uri.startswith(LOCAL_SCHEME + "//"):
        return uri[len(LOCAL_SCHEME) :]
    return uri


def is_local(uri: str) -> bool:
    return uri.startswith(LOCAL_SCHEME)


def joined(uri: str, relative: str) -> str:
    return f"{uri.rstrip('/')}/{relative}"


def to_read(uri: str) -> str:
    """A file or directory URI as Spark's readers take it exactly: they glob, so the
    glob characters in its name are escaped."""
    return _GLOB_CHARACTERS.sub(r"\\\1", uri)


def is_hidden(name: str) -> bool:
    """Names Spark's readers skip (staging, markers): so does every listing here."""
    return name.startswith((".", "_"))


@dataclass(frozen=True)
class Entry:
    name: str
    is_directory: bool


class Storage:
    """Hadoop's FileSystem for any URI, through a JVM."""

    def __init__(self, jvm: Any, hadoop_conf: Any, owned: object = None) -> None:
        self._jvm = jvm
        self._conf = hadoop_conf
        self._owned = owned  # a JVM of our own lives as long as its storage

    @classmethod
    def of(cls, spark: SparkSession, conf: Mapping[str, str]) -> Storage:
        """The storage a session's jobs see; `conf`: the --conf settings it was given
        (a Connect session's own JVM needs them: its hadoop settings and jars)."""
        from nsqtools.spark.session import is_connect

        if is_connect(spark):
            return cls.with_own_jvm(conf)
        hadoop_conf = spark._jsparkSession.sessionState().newHadoopConf()
        return cls(spark._jvm, hadoop_conf)

    @classmethod
    def with_own_jvm(cls, conf: Mapping[str, str]) -> Storage:
        """Storage through a JVM of this process's own (pyspark's gateway, no Spark
        context), with the spark.jars and spark.hadoop.* settings of `conf`."""
        from nsqtools.spark.session import default_log_file, own_jvm

        jvm = own_jvm(conf, default_log_file())  # its output, as a session's JVM's
        hadoop_conf = jvm.view.org.apache.hadoop.conf.Configuration()
        prefix = "spark.hadoop."
        for key, value in conf.items():
            if key.startswith(prefix):
                hadoop_conf.set(key[len(prefix) :], value)
        return cls(jvm.view, hadoop_conf, owned=jvm)

    def exists(self, uri: str) -> bool:
        path = self._path(uri)
        return bool(self._fs(path).exists(path))

    def is_directory(self, uri: str) -> bool:
        path = self._path(uri)
        return bool(self._fs(path).isDirectory(path))

    def children(self, uri: str, hidden: bool = False) -> list[Entry]:
        """What a directory holds, by name (hidden names only if asked); none when it
        is not there."""
        path = self._path(uri)
        fs = self._fs(path)
        if not fs.isDirectory(path):
            return []
        entries = [
            Entry(status.getPath().getName(), status.isDirectory())
            for status in fs.listStatus(path)
        ]
        return sorted(
            (entry for entry in entries if hidden or not is_hidden(entry.name)),
            key=lambda entry: entry.name,
        )

    def files_under(self, uri: str) -> list[str]:
        """Every file under a directory, by its name relative to it, hidden names (and
        whatever hidden directories hold) aside."""
        path = self._path(uri)
        fs = self._fs(path)
        if not fs.isDirectory(path):
            return []
        root = fs.makeQualified(path).toUri().getPath().rstrip("/") + "/"
        found = []
        files = fs.listFiles(path, True)
        while files.hasNext():
            relative = files.next().getPath().toUri().getPath()[len(root) :]
            if not any(is_hidden(part) for part in relative.split("/")):
                found.append(relative)
        return sorted(found)

    def make_directories(self, uri: str) -> None:
        path = self._path(uri)
        self._fs(path).mkdirs(path)

    def rename(self, source: str, target: str) -> bool:
        """Move source to target (which must not exist): whether it moved."""
        source_path, target_path = self._path(source), self._path(target)
        return bool(self._fs(source_path).rename(source_path, target_path))

    def delete(self, uri: str) -> None:
        """Remove a file, or a directory and all it holds; nothing if it is not there."""
        path = self._path(uri)
        self._fs(path).delete(path, True)

    def write_json(self, uri: str, value: Any) -> None:
        path = self._path(uri)
        stream = self._fs(path).create(path, True)
        try:
            stream.write(bytearray(json.dumps(value).encode()))
        finally:
            stream.close()

    def read_json(self, uri: str) -> Any:
        path = self._path(uri)
        stream = self._fs(path).open(path)
        try:
            return json.loads(bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)))
        finally:
            stream.close()

    def parquet_rows(self, uri: str) -> int:
        """The rows a Parquet file holds, from its footer."""
        parquet = self._jvm.org.apache.parquet.hadoop
        reader = parquet.ParquetFileReader.open(
            parquet.util.HadoopInputFile.fromPath(self._path(uri), self._conf)
        )
        try:
            return int(reader.getRecordCount())
        finally:
            reader.close()

    def _path(self, uri: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(uri)

    def _fs(self, path: Any) -> Any:
        return path.getFileSystem(self._conf)
