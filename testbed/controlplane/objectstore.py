"""A local S3 server for decision records: versitygw over a folder, as object storage stands in a managed cloud.

The controller keeps its records at an `s3://` URL on a managed cluster (`dl2.sim.record_store`); the tests, the
kill benchmark and `dl2 cluster --object-store` run them against this real S3 implementation (conditional PUTs
included: the journal's create-if-absent is `If-None-Match: *`), built from the Go module proxy
(`make versitygw`). `environment()` is what a client needs: the AWS variables that botocore reads, so s3fs and a
`dl2 serve` subprocess find it the way a pod finds S3 through its own variables.
"""

from __future__ import annotations

import os
import secrets
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testbed.controlplane.assets import VERSITYGW
from testbed.controlplane.processes import Component, free_port, wait_until

REGION = "us-east-1"


@dataclass(frozen=True, slots=True)
class ObjectStore:
    endpoint: str
    access_key: str
    secret_key: str
    folder: Path
    """The folder behind it: one sub-folder per bucket."""

    def environment(self) -> dict[str, str]:
        """The variables botocore (and so s3fs) reads: this store's endpoint and credentials."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": REGION,
        }

    @contextmanager
    def exported(self) -> Iterator[None]:
        """This store's variables in the process environment while the block runs (what this process's s3fs and
        the `dl2 serve` it starts read), then the environment as it was."""
        variables = self.environment()
        saved = {name: os.environ.get(name) for name in variables}
        os.environ.update(variables)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def bucket(self, name: str) -> str:
        """Create the bucket `name` if it is missing (a folder of the posix backend); its `s3://` URL."""
        (self.folder / name).mkdir(parents=True, exist_ok=True)
        return f"s3://{name}"


def _answers(endpoint: str) -> bool:
    """Anything but a refused connection: the gateway answers an unsigned request with 403."""
    try:
        with urllib.request.urlopen(endpoint, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True


@contextmanager
def object_store(folder: Path, logs: Path | None = None, like: ObjectStore | None = None) -> Iterator[ObjectStore]:
    """versitygw serving `folder` on a free loopback port until the block ends; `like`: on that store's endpoint
    with its credentials instead (the same store back after an outage)."""
    folder.mkdir(parents=True, exist_ok=True)
    if like is None:
        store = ObjectStore(f"http://127.0.0.1:{free_port()}", "dl2", secrets.token_hex(16), folder)
    else:
        store = ObjectStore(like.endpoint, like.access_key, like.secret_key, folder)
    command = [VERSITYGW.path(), "--access", store.access_key, "--secret", store.secret_key]
    command += ["--port", store.endpoint.removeprefix("http://"), "posix", str(folder)]
    server = Component("versitygw", command, logs or folder.parent / "logs").start()
    try:
        wait_until(lambda: _answers(store.endpoint), 30.0, "versitygw answering", [server])
        yield store
    finally:
        server.stop()
