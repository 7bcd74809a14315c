"""Spark on s3a:// paths served by a real S3 server on loopback (moto, the `s3_server` fixture):
Parquet written, listed and read back; text and whole files read, gzip included; a
directory renamed through Hadoop's FileSystem API, past the size where S3A copies an
object through its asynchronous client; and a wrong secret refused in an error that
does not repeat it. What the archive jobs need of an object store, with the jars that
scripts/fetch-spark-jars caches and the confs nsqtools.testing.s3 gives.
"""

from __future__ import annotations

import gzip
import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

from nsqtools.testing.s3 import S3Server

# Spark jobs: the test run's Spark session, seconds each (scripts/test --all runs them).
pytestmark = pytest.mark.slow

_buckets = itertools.count()


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    """A bucket of this test's own on the test run's S3 server."""
    name = f"store-{os.getpid()}-{next(_buckets)}"
    s3_server.create_bucket(name)
    return name


def hadoop_path(spark: Any, uri: str) -> Any:
    return spark._jvm.org.apache.hadoop.fs.Path(uri)


def hadoop_filesystem(spark: Any, uri: str, **settings: str) -> Any:
    """A FileSystem of its own (not Hadoop's cached one) for uri, with these settings
    over the session's."""
    jvm = spark._jvm
    conf = jvm.org.apache.hadoop.conf.Configuration(spark.sparkContext._jsc.hadoopConfiguration())
    for key, value in settings.items():
        conf.set(key, value)
    return jvm.org.apache.hadoop.fs.FileSystem.newInstance(jvm.java.net.URI(uri), conf)


@pytest.fixture
def filesystem(spark: Any, bucket: str) -> Iterator[Any]:
    fs = hadoop_filesystem(spark, f"s3a://{bucket}/")
    yield fs
    fs.close()


def test_parquet_written_to_s3a_is_listed_and_read_back(
    spark: Any, s3_server: S3Server, bucket: str, filesystem: Any
) -> None:
    rows = spark.range(1000).selectExpr("id", "concat('row ', id) AS text").repartition(2)
    rows.write.parquet(f"s3a://{bucket}/table")

    keys = s3_server.keys(bucket, "table/")
    parts = [key for key in keys if key.endswith(".parquet")]
    assert len(parts) == 2
    assert keys == sorted(["table/_SUCCESS", *parts])
    listed = filesystem.listStatus(hadoop_path(spark, f"s3a://{bucket}/table"))
    assert sorted(status.getPath().getName() for status in listed) == [
        key.removeprefix("table/") for key in keys
    ]
    back = spark.read.parquet(f"s3a://{bucket}/table")
    assert sorted(tuple(row) for row in back.collect()) == [(i, f"row {i}") for i in range(1000)]


def test_text_and_whole_files_are_read_from_s3a_gzip_included(
    spark: Any, s3_server: S3Server, bucket: str
) -> None:
    plain = b"one\ntwo\n"
    packed = gzip.compress(b"three\nfour\n")
    s3_server.put(bucket, "in/a.log", plain)
    s3_server.put(bucket, "in/b.log.gz", packed)

    lines = spark.read.text(f"s3a://{bucket}/in/").collect()
    assert sorted(row.value for row in lines) == ["four", "one", "three", "two"]
    files = spark.read.format("binaryFile").load(f"s3a://{bucket}/in/").collect()
    contents = {row.path: (bytes(row.content), row.length) for row in files}
    assert contents == {
        f"s3a://{bucket}/in/a.log": (plain, len(plain)),
        f"s3a://{bucket}/in/b.log.gz": (packed, len(packed)),
    }


def test_a_directory_is_renamed_on_s3a_large_objects_too(
    spark: Any, s3_server: S3Server, bucket: str
) -> None:
    # Objects of 5 MiB and more are copied through S3A's transfer manager (its
    # asynchronous, Netty client) once past fs.s3a.multipart.threshold; 128 MiB by
    # default, 5 MiB (S3's least part size) here.
    large = os.urandom(6 * 1024 * 1024)
    s3_server.put(bucket, "staging/large.bin", large)
    s3_server.put(bucket, "staging/sub/small.txt", b"small")
    fs = hadoop_filesystem(
        spark,
        f"s3a://{bucket}/",
        **{"fs.s3a.multipart.threshold": "5M", "fs.s3a.multipart.size": "5M"},
    )
    try:
        renamed = fs.rename(
            hadoop_path(spark, f"s3a://{bucket}/staging"),
            hadoop_path(spark, f"s3a://{bucket}/published"),
        )
    finally:
        fs.close()

    assert renamed
    assert s3_server.keys(bucket) == ["published/large.bin", "published/sub/small.txt"]
    assert s3_server.get(bucket, "published/large.bin") == large


def test_a_wrong_secret_is_refused_without_being_repeated(
    spark: Any, s3_server: S3Server, bucket: str
) -> None:
    s3_server.put(bucket, "in/a.log", b"one\n")
    wrong = "wrong-secret-8c0ffee1"
    # Hadoop's per-bucket setting, for this bucket only; a session SQL conf reaches the
    # Hadoop configuration each read is given.
    setting = f"fs.s3a.bucket.{bucket}.secret.key"
    spark.conf.set(setting, wrong)
    try:
        with pytest.raises(Py4JJavaError) as refused:
            spark.read.text(f"s3a://{bucket}/in/").collect()
    finally:
        spark.conf.unset(setting)

    text = str(refused.value)
    assert "AccessDeniedException" in text
    assert "403" in text
    assert wrong not in text
    assert s3_server.secret_key not in text
