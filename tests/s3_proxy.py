#!/usr/bin/python3
"""s3_proxy.py — an HTTP proxy in front of a test S3 server (moto's,
tests/s3_server.py, which checks the signatures too) that checks every
request's AWS Signature V4 and adds the faults a real store has: slow
responses, 503 SlowDown, connection resets.

    s3_proxy.py --upstream PORT [--access-key ID --secret KEY [--token T]
                [--region R]] [--delay-ms MS] [--slowdown N] [--reset N]
                [--stats FILE] [--port N] [--owner PID] PORTFILE

Binds 127.0.0.1 (a free port, or --port), writes the port to PORTFILE and
serves until killed or until its parent process (or --owner PID) exits.

Signature check (with --secret): the signature is recomputed here, written
from the AWS documentation (not from nostall's code), the way S3 does it:
the path is percent-decoded and encoded again (so a client that signs a
raw '+' fails), the query parameters are decoded, encoded, sorted; the
signed headers are the ones the Authorization header lists (a repeated
header's values joined by ','); host, x-amz-date and x-amz-content-sha256
must be signed, x-amz-security-token too when --token is given (and equal
to it). A mismatch answers 403 SignatureDoesNotMatch, like S3 (its Message
never echoes the secret).

Faults: --delay-ms holds every request that long before forwarding it;
--slowdown N answers the first N GETs of each path 503 SlowDown (S3's XML);
--reset N closes the connection of the first N GETs of each path without an
answer (a TCP reset). When the upstream refuses the connection (the server
killed), the client's connection is reset too.

--stats FILE is rewritten after every request: a JSON object with the
counts requests, verified, rejected, slowdowns, resets, upstream_errors,
token_seen, and the last rejection's reason.
"""
import hashlib
import hmac
import http.client
import json
import os
import socket
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OPTS = {}
LOCK = threading.Lock()
STATS = {"requests": 0, "verified": 0, "rejected": 0, "slowdowns": 0, "resets": 0,
         "upstream_errors": 0, "token_seen": 0, "last_rejection": ""}
COUNTS = {}


def save_stats():
    path = OPTS.get("stats")
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(STATS, f)
    os.replace(tmp, path)


def bump(name, reason=None):
    with LOCK:
        STATS[name] += 1
        if reason is not None:
            STATS["last_rejection"] = reason
        save_stats()


def enc(s, keep_slash):
    """SigV4's URI encoding: every byte but A-Z a-z 0-9 - _ . ~ as %XX."""
    safe = "-_.~" + ("/" if keep_slash else "")
    return urllib.parse.quote(s, safe=safe)


def hmac256(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def check_signature(handler):
    """None if the request's signature is right, else the reason."""
    h = handler.headers
    auth = h.get("Authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "no AWS4-HMAC-SHA256 Authorization header"
    parts = {}
    for p in auth[len("AWS4-HMAC-SHA256 "):].split(","):
        k, _, v = p.strip().partition("=")
        parts[k] = v
    try:
        cred, signed, given = parts["Credential"], parts["SignedHeaders"], parts["Signature"]
    except KeyError:
        return "malformed Authorization"
    ak, date, region, service, term = cred.split("/")
    if ak != OPTS["access_key"]:
        return "unknown access key"
    if region != OPTS["region"] or service != "s3" or term != "aws4_request":
        return "wrong credential scope %s/%s/%s" % (region, service, term)
    names = signed.split(";")
    for must in ("host", "x-amz-date", "x-amz-content-sha256"):
        if must not in names:
            return "%s is not signed" % must
    token = OPTS.get("token")
    if token:
        if "x-amz-security-token" not in names:
            return "x-amz-security-token is not signed"
        if h.get("x-amz-security-token") != token:
            return "wrong session token"
    if names != sorted(names):
        return "SignedHeaders not sorted"
    canon_headers = ""
    for n in names:
        vals = h.get_all(n)
        if vals is None:
            return "signed header %s not sent" % n
        vals = [" ".join(v.strip().split()) for v in vals]
        canon_headers += "%s:%s\n" % (n, ",".join(vals))
    amz_date = ",".join(h.get_all("x-amz-date"))
    if amz_date[:8] != date:
        return "x-amz-date %s does not match the scope's date %s" % (amz_date, date)
    raw_path, _, raw_query = handler.path.partition("?")
    uri = enc(urllib.parse.unquote(raw_path), True)
    pairs = []
    if raw_query:
        for item in raw_query.split("&"):
            k, _, v = item.partition("=")
            pairs.append((enc(urllib.parse.unquote(k), False), enc(urllib.parse.unquote(v), False)))
    pairs.sort()
    query = "&".join("%s=%s" % kv for kv in pairs)
    creq = "\n".join([handler.command, uri, query, canon_headers, signed,
                      h.get("x-amz-content-sha256", "")])
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, "%s/%s/s3/aws4_request" % (date, region),
                     hashlib.sha256(creq.encode()).hexdigest()])
    k = hmac256(("AWS4" + OPTS["secret"]).encode(), date)
    k = hmac256(k, region)
    k = hmac256(k, "s3")
    k = hmac256(k, "aws4_request")
    want = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, given):
        return "signature mismatch; canonical request as the server sees it:\n" + creq
    return None


def reset_connection(handler):
    """Close the client's connection with a TCP reset, no answer."""
    try:
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                      struct.pack("ii", 1, 0))
    except OSError:
        pass
    handler.close_connection = True
    try:
        handler.connection.close()
    except OSError:
        pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def error_xml(self, code, s3code, message, extra=""):
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code>"
                "<Message>%s</Message>%s</Error>" % (s3code, message, extra)).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        bump("requests")
        length = int(self.headers.get("Content-Length", "0") or 0)
        body = self.rfile.read(length) if length else b""
        if OPTS.get("secret"):
            why = check_signature(self)
            if why:
                bump("rejected", why)
                # as S3 does, the server's canonical request goes back in the
                # error (it holds the session token: clients must not show it)
                creq = why.partition("\n")[2]
                esc = creq.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                self.error_xml(403, "SignatureDoesNotMatch", "The request signature we "
                               "calculated does not match the signature you provided.",
                               "<AWSAccessKeyId>%s</AWSAccessKeyId><CanonicalRequest>%s"
                               "</CanonicalRequest>" % (OPTS["access_key"], esc))
                return
            bump("verified")
            if self.headers.get("x-amz-security-token"):
                bump("token_seen")
        if OPTS["delay"]:
            time.sleep(OPTS["delay"])
        if self.command == "GET":
            with LOCK:
                n = COUNTS.get(self.path, 0)
                COUNTS[self.path] = n + 1
            if n < OPTS["reset"]:
                bump("resets")
                reset_connection(self)
                return
            if n < OPTS["reset"] + OPTS["slowdown"]:
                bump("slowdowns")
                self.error_xml(503, "SlowDown", "Please reduce your request rate.")
                return
        try:
            conn = http.client.HTTPConnection("127.0.0.1", OPTS["upstream"], timeout=60)
            headers = {k: v for k, v in self.headers.items()}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
        except OSError:
            bump("upstream_errors")
            reset_connection(self)
            return
        try:
            self.send_response_only(resp.status, resp.reason)
            te = None
            for k, v in resp.getheaders():
                if k.lower() in ("connection", "keep-alive", "transfer-encoding"):
                    te = v if k.lower() == "transfer-encoding" else te
                    continue
                self.send_header(k, v)
            data = resp.read() if self.command != "HEAD" else b""
            if te is not None and self.command != "HEAD":
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if data:
                self.wfile.write(data)
        except OSError:
            bump("upstream_errors")
            reset_connection(self)
        finally:
            conn.close()

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = handle_any


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    args = sys.argv[1:]
    OPTS.update({"delay": 0.0, "slowdown": 0, "reset": 0, "region": "us-east-1", "port": 0})
    portfile = None
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--upstream", "--port", "--slowdown", "--reset", "--owner"):
            OPTS[a[2:]] = int(args[i + 1])
            i += 2
        elif a == "--delay-ms":
            OPTS["delay"] = float(args[i + 1]) / 1000.0
            i += 2
        elif a in ("--access-key", "--secret", "--token", "--region", "--stats"):
            OPTS[a[2:].replace("-", "_")] = args[i + 1]
            i += 2
        else:
            portfile = a
            i += 1
    if "upstream" not in OPTS:
        sys.exit("usage: s3_proxy.py --upstream PORT [options] PORTFILE")
    srv = Server(("127.0.0.1", OPTS["port"]), Handler)
    save_stats()
    port = srv.server_address[1]
    if portfile:
        tmp = portfile + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, portfile)
    else:
        print(port, flush=True)
    parent = os.getppid()
    owner = OPTS.get("owner")

    def watchdog():
        while True:
            time.sleep(0.5)
            if owner:
                try:
                    os.kill(owner, 0)
                except OSError:
                    os._exit(0)
            elif os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watchdog, daemon=True).start()
    srv.serve_forever()


if __name__ == "__main__":
    main()
