"""A real S3 endpoint on 127.0.0.1 for tests: moto's server mode, read and written with s3fs.

    server = s3_server.start()               # skips the test when moto[server] / s3fs are missing
    monkeypatch.setattr(os, "environ", ...)  # or: for k, v in server.env.items(): monkeypatch.setenv(k, v)
    server.make_bucket("bkt")
    ...
    server.stop()

`env` holds the AWS variables s3fs (and child processes: span workers, tensorboard) use to reach it;
the secret key is `SECRET`, so a test can check it never shows up anywhere.
"""

from __future__ import annotations

from .conftest import require_module

#: the secret access key the tests' server is reached with (must never appear in any output)
SECRET = "gpuscope-test-SECRET-4f9a1c"
ACCESS_KEY = "AKIAGPUSCOPETEST"


class S3Server:
    """A running ThreadedMotoServer and the environment that points s3fs at it."""

    def __init__(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.env = {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def fs(self):
        """A fresh s3fs filesystem on this server (not fsspec's cached instance)."""
        import s3fs

        return s3fs.S3FileSystem(key=ACCESS_KEY, secret=SECRET, endpoint_url=self.endpoint, skip_instance_cache=True)

    def make_bucket(self, name: str) -> None:
        import boto3

        boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET,
            region_name="us-east-1",
        ).create_bucket(Bucket=name)

    def stop(self) -> None:
        self._server.stop()


def start() -> S3Server:
    """Start a moto S3 server (skip the calling test when moto's server mode or s3fs is missing)."""
    require_module("s3fs", "s3fs is not installed (pip install -e '.[test]')")
    require_module("moto.server", "moto[server] is not installed (pip install -e '.[test]')")
    require_module("flask", "moto[server] is not installed (pip install -e '.[test]')")
    return S3Server()


def use(server: S3Server, monkeypatch) -> None:
    """Point this process (and its children) at `server`: its AWS variables, a fresh s3fs."""
    import s3fs

    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "FSSPEC_S3"):
        monkeypatch.delenv(key, raising=False)
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    s3fs.S3FileSystem.clear_instance_cache()  # cached instances keep the endpoint they were made with
