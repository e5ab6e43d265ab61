"""A throwaway local S3-compatible server for the tests and benchmarks: moto in server mode on
loopback (a real HTTP S3 API), with IAM authentication on, so wrong keys are refused. Needs
moto (the `test` extra).

The server serves a few requests unauthenticated, which make a user with an access key
allowed everything and a bucket; every later request needs that user's key. Spark's S3A file
system reaches it with path-style requests over plain HTTP (`spark_conf`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgcdc.errors import SetupError
from pgcdc.localpg import free_port

BUCKET = "pgcdc-test"
_SETUP_REQUESTS = 3  # create the user, its policy, its access key


@dataclass
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str
    bucket: str = BUCKET

    def spark_conf(self) -> dict[str, str]:
        """Hadoop's standard S3A settings for this server ([spark] conf)."""
        return {"spark.hadoop.fs.s3a.endpoint": self.endpoint, "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.access.key": self.access_key, "spark.hadoop.fs.s3a.secret.key": self.secret_key,
                "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
                "spark.hadoop.fs.s3a.connection.ssl.enabled": "false"}

    def client(self, **overrides: str) -> Any:
        import boto3

        keys = {"aws_access_key_id": self.access_key, "aws_secret_access_key": self.secret_key} | overrides
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1", **keys)

    def root(self, prefix: str) -> str:
        return f"s3a://{self.bucket}/{prefix}"


@contextmanager
def running(log_dir: Path) -> Iterator[S3Server]:
    """Start the server (its log in `log_dir`), make its user and bucket; stop it after."""
    import boto3

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = log_dir / "moto.log"
    server = Path(sys.executable).parent / "moto_server"
    if not server.exists():
        raise SetupError(f"{server} not found: install the test extra (pip install -e '.[test]')")
    env = os.environ | {"INITIAL_NO_AUTH_ACTION_COUNT": str(_SETUP_REQUESTS), "AWS_DEFAULT_REGION": "us-east-1"}
    with open(log, "w") as out:
        proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SetupError(f"moto_server did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                           aws_secret_access_key="testing")
        iam.create_user(UserName="pgcdc")
        iam.put_user_policy(UserName="pgcdc", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="pgcdc")["AccessKey"]
        s3 = S3Server(endpoint, key["AccessKeyId"], key["SecretAccessKey"])
        s3.client().create_bucket(Bucket=BUCKET)
        yield s3
    finally:
        proc.terminate()
        proc.wait(timeout=10)
