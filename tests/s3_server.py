"""s3_server.py — the S3 server of the s3:// tests: moto's server (moto
5, in memory) on a local address, with its IAM authentication on, so that
moto itself checks every request's AWS Signature V4; and the client that
puts objects into it. Runs under the Python of the venv tests/lib_s3.sh
makes (it imports moto and boto3); lib_s3.sh is its usual caller.

    s3_server.py serve DIR PORT BUCKET... [--host ADDR]
    s3_server.py put DIR BUCKET KEY FILE
    s3_server.py put-tree DIR BUCKET PREFIX SRC

The key pair is read from the environment: S3_TEST_ACCESS_KEY and
S3_TEST_SECRET (lib_s3.sh sets defaults), never from the command line.

serve: creates an IAM user whose inline policy allows s3:*, gives it an
access key (moto's IAM backend makes one; its id and secret are then set to
the pair above, so a test chooses its secret), creates the BUCKETs, loads
the store DIR/data (see put) into them, turns IAM authentication on
(moto's INITIAL_NO_AUTH_ACTION_COUNT set to 0: from then on a request
signed with another key or a wrong signature is a 403
SignatureDoesNotMatch / InvalidAccessKeyId, as S3 answers), and only then
listens: PORT 0 picks a free port, a number is retried for up to 10 s (a
port a killed server just released). The port goes to DIR/server.port once
listening; every request is logged to stderr as "METHOD PATH?QUERY STATUS"
(the raw path, as sent). Serves until SIGTERM or SIGKILL.

put, put-tree: each object is copied into the store DIR/data/BUCKET/KEY.s3obj
(what a restarted server loads, so a server killed and started again keeps
its objects) and, when the server of DIR is listening, PUT to it signed
with the key pair (boto3, path-style, in this one process: thousands of
objects in one run). put-tree puts every file under SRC as PREFIX/REL.
"""
import os
import sys
import time

SUFFIX = ".s3obj"
USER = "nostall-test"
POLICY = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}'


def keys():
    ak, sk = os.environ.get("S3_TEST_ACCESS_KEY"), os.environ.get("S3_TEST_SECRET")
    if not ak or not sk:
        sys.exit("s3_server.py: S3_TEST_ACCESS_KEY and S3_TEST_SECRET must be set")
    return ak, sk


def store_path(d, bucket, key):
    return os.path.join(d, "data", bucket, key + SUFFIX)


def serve(d, port, buckets, host):
    from moto import settings
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.iam.models import iam_backends
    from moto.moto_server.werkzeug_app import (DomainDispatcherApplication,
                                               MotoRequestHandler, create_backend_app)
    from moto.s3.models import s3_backends
    from werkzeug.serving import make_server

    ak, sk = keys()
    iam = iam_backends[DEFAULT_ACCOUNT_ID]["aws"]
    iam.create_user("us-east-1", USER)
    iam.put_user_policy(USER, "s3-all", POLICY)
    key = iam.create_access_key(USER)
    iam.access_keys.pop(key.physical_resource_id, None)
    key.access_key_id, key.secret_access_key = ak, sk
    iam.access_keys[key.physical_resource_id] = key

    s3 = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    data = os.path.join(d, "data")
    names = set(buckets)
    if os.path.isdir(data):
        names.update(os.listdir(data))
    n = 0
    for b in sorted(names):
        s3.create_bucket(b, "us-east-1")
        root = os.path.join(data, b)
        for top, _, files in os.walk(root):
            for f in files:
                if not f.endswith(SUFFIX):
                    continue
                path = os.path.join(top, f)
                k = os.path.relpath(path, root)[:-len(SUFFIX)]
                with open(path, "rb") as fh:
                    s3.put_object(b, k, fh.read())
                n += 1

    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    ActionAuthenticatorMixin.request_count = 0

    class Handler(MotoRequestHandler):
        def log_request(self, code="-", size="-"):
            sys.stderr.write("%s %s %s\n" % (self.command, self.path, getattr(code, "value", code)))
            sys.stderr.flush()

    app = DomainDispatcherApplication(create_backend_app)
    deadline = time.time() + 10
    while True:
        try:
            srv = make_server(host, port, app, threaded=True, request_handler=Handler)
            break
        except (OSError, SystemExit) as e:
            if port == 0 or time.time() > deadline:
                sys.exit("s3_server.py: cannot listen on %s:%d: %s" % (host, port, e))
            time.sleep(0.2)
    got = srv.server_address[1]
    sys.stderr.write("listening on %s:%d (%d objects loaded, IAM auth on)\n" % (host, got, n))
    sys.stderr.flush()
    tmp = os.path.join(d, "server.port.tmp")
    with open(tmp, "w") as f:
        f.write("%d\n" % got)
    os.replace(tmp, os.path.join(d, "server.port"))
    srv.serve_forever()


def client(d):
    """boto3's S3 client for the server of DIR, or None when it is not up."""
    try:
        with open(os.path.join(d, "server.port")) as f:
            port = int(f.read())
        with open(os.path.join(d, "server.pid")) as f:
            os.kill(int(f.read()), 0)
    except (OSError, ValueError):
        return None
    import boto3
    from botocore.config import Config
    ak, sk = keys()
    return boto3.client("s3", endpoint_url="http://127.0.0.1:%d" % port, region_name="us-east-1",
                        aws_access_key_id=ak, aws_secret_access_key=sk,
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5},
                                      request_checksum_calculation="when_required",
                                      response_checksum_validation="when_required"))


def put(d, c, bucket, key, src):
    with open(src, "rb") as f:
        body = f.read()
    dst = store_path(d, bucket, key)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(body)
    os.replace(tmp, dst)
    if c is not None:
        c.put_object(Bucket=bucket, Key=key, Body=body)


def main():
    a = sys.argv[1:]
    if len(a) >= 3 and a[0] == "serve":
        host = "127.0.0.1"
        if "--host" in a:
            i = a.index("--host")
            host = a[i + 1]
            del a[i:i + 2]
        serve(os.path.abspath(a[1]), int(a[2]), a[3:], host)
    elif len(a) == 5 and a[0] == "put":
        put(a[1], client(a[1]), a[2], a[3], a[4])
    elif len(a) == 5 and a[0] == "put-tree":
        d, bucket, prefix, src = a[1:]
        c = client(d)
        for top, dirs, files in os.walk(src):
            dirs.sort()
            for f in sorted(files):
                rel = os.path.relpath(os.path.join(top, f), src)
                put(d, c, bucket, (prefix + "/" if prefix else "") + rel, os.path.join(top, f))
    else:
        sys.exit("usage: s3_server.py serve DIR PORT BUCKET... [--host ADDR] | put DIR BUCKET KEY FILE"
                 " | put-tree DIR BUCKET PREFIX SRC")


if __name__ == "__main__":
    main()
