"""An S3-compatible server on loopback, and the Spark confs that point S3A at it.

The server is moto's server mode (moto[server], in the test extra), a process of its
own on a free port, logging to a file. It checks AWS's request signatures as S3 does: at
start it makes an IAM user allowed everything, takes that user's access key and secret,
and then turns authentication on, so a wrong secret fails with a 403.

    with S3Server(tmp_path / "s3") as s3:
        s3.create_bucket("archive")
        s3.put("archive", "in/orders.log.gz", data)
        s3.spark_conf          # for SparkSettings.conf, or:
        s3.conf_arguments      # ["--conf=spark.jars=...", ...] for `nsq archive`

Spark reads s3a:// paths through hadoop-aws and the AWS SDK modules that
scripts/fetch-spark-jars caches in the checkout's .spark-jars/ (scripts/setup --spark
runs it): s3a_jars() names them, and spark_conf carries them as spark.jars.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

import boto3
import httpx

from nsqtools.checkout import source_checkout
from nsqtools.testing.cluster import die_with_parent, wait_until
from nsqtools.testing.lifetime import StartsAndStops

START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
REGION = "us-east-1"
_RUNNING_ON = re.compile(r"Running on (http://\S+)")
_ALLOW_EVERYTHING = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
}


class S3JarsMissing(RuntimeError):
    """The jars S3A needs are not in the checkout's cache."""


def s3a_jars() -> list[Path]:
    """hadoop-aws and the AWS SDK modules S3A loads, as scripts/fetch-spark-jars cached
    them; an error saying how to fetch them when they are not there."""
    checkout = source_checkout()
    classpath = checkout / ".spark-jars" / "classpath" if checkout else None
    jars = _listed_jars(classpath) if classpath else []
    if not jars or not all(jar.is_file() for jar in jars):
        raise S3JarsMissing(
            "the S3A jars are not in .spark-jars/ of a checkout of nsqtools: "
            "run scripts/fetch-spark-jars (scripts/setup --spark runs it)"
        )
    return jars


def _listed_jars(classpath: Path) -> list[Path]:
    try:
        text = classpath.read_text().strip()
    except FileNotFoundError:
        return []
    return [Path(jar) for jar in text.split(":") if jar]


class S3Server(StartsAndStops):
    """moto's server: start() returns once it answers with signatures checked."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.endpoint = ""  # http://127.0.0.1:PORT
        self.access_key = ""
        self.secret_key = ""
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        log = self.folder / "moto.log"
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"]
        with log.open("ab") as output:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),
            )
        try:
            wait_until(lambda: self._listening(log), START_TIMEOUT, "moto's server")
            self._make_user_then_check_signatures()
        except BaseException:
            self.stop()
            raise

    def _listening(self, log: Path) -> bool:
        """Whether the server's log names its address (port 0: the system chose it)."""
        assert self._process is not None
        if self._process.poll() is not None:
            raise RuntimeError(f"moto's server exited ({self._process.returncode}): see {log}")
        running_on = _RUNNING_ON.search(log.read_text(errors="replace"))
        if running_on is not None:
            self.endpoint = running_on[1]
        return running_on is not None

    def _make_user_then_check_signatures(self) -> None:
        """One IAM user allowed everything, whose key signs every request from now on."""
        iam = boto3.client("iam", **self._client_settings("unchecked", "unchecked"))
        iam.create_user(UserName="tests")
        policy = json.dumps(_ALLOW_EVERYTHING)
        iam.put_user_policy(UserName="tests", PolicyName="everything", PolicyDocument=policy)
        key = iam.create_access_key(UserName="tests")["AccessKey"]
        self.access_key, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]
        # moto checks signatures once it has served this many requests: from now on.
        httpx.post(f"{self.endpoint}/moto-api/reset-auth", content=b"0").raise_for_status()

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    # -- objects ---------------------------------------------------------------------

    def client(self, secret_key: str | None = None) -> Any:
        """A boto3 S3 client signing with the server's key (or another secret)."""
        secret = self.secret_key if secret_key is None else secret_key
        return boto3.client("s3", **self._client_settings(self.access_key, secret))

    def _client_settings(self, access_key: str, secret_key: str) -> dict[str, str]:
        return {
            "endpoint_url": self.endpoint,
            "region_name": REGION,
            "aws_access_key_id": access_key,
            "aws_secret_access_key": secret_key,
        }

    @cached_property
    def _objects(self) -> Any:
        return self.client()

    def create_bucket(self, bucket: str) -> None:
        self._objects.create_bucket(Bucket=bucket)

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self._objects.put_object(Bucket=bucket, Key=key, Body=data)

    def get(self, bucket: str, key: str) -> bytes:
        body: bytes = self._objects.get_object(Bucket=bucket, Key=key)["Body"].read()
        return body

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object's key under prefix, sorted."""
        listing = self._objects.get_paginator("list_objects_v2")
        pages = listing.paginate(Bucket=bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    # -- Spark -----------------------------------------------------------------------

    @property
    def spark_conf(self) -> MappingProxyType[str, str]:
        """Confs that give Spark the S3A jars and point every s3a:// bucket at this
        server, with its key (Hadoop's own settings: the way a user gives credentials)."""
        return MappingProxyType(
            {
                "spark.jars": ",".join(str(jar) for jar in s3a_jars()),
                "spark.hadoop.fs.s3a.endpoint": self.endpoint,
                "spark.hadoop.fs.s3a.endpoint.region": REGION,
                "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
                "spark.hadoop.fs.s3a.access.key": self.access_key,
                "spark.hadoop.fs.s3a.secret.key": self.secret_key,
                # These keys only: never the SDK's other sources (environment, profile
                # files, and the instance metadata service, an address off loopback).
                "spark.hadoop.fs.s3a.aws.credentials.provider": (
                    "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
                ),
            }
        )

    @property
    def conf_arguments(self) -> list[str]:
        """spark_conf as `nsq archive` (or spark-submit) takes it: --conf=key=value."""
        return [f"--conf={key}={value}" for key, value in self.spark_conf.items()]
