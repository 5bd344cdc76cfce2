#!/usr/bin/python3
"""http_faulty_server.py — a tiny HTTP/1.1 server for the faults nginx cannot
produce, used by tests/test_http.c and tests/test_shards.c.

    http_faulty_server.py [--root DIR] [--rate BYTES_PER_S] [--latency-ms MS]
                          [--exit-after N] [--port N] [PORTFILE]

Binds 127.0.0.1 on a free port (or --port), writes the port to PORTFILE (or
stdout) and serves until killed, or until its parent process goes away.
--rate paces every 200 body per connection smoothly (8 KB chunks; suffixes
k/m = 1024/1024^2), --latency-ms delays every response: an emulated remote
store, unlike nginx's limit_rate, which lets the first `rate` bytes of every
response through at once and then paces in whole wall-clock seconds (so it
does not slow down files smaller than the rate at all). --exit-after N: the
server goes away (the process exits: every connection closed, then refused)
right after it has sent the N-th complete 200 response, so a test sees it die
mid-run after a known amount of work, whatever the machine's speed. Paths:

  /flaky/CODE/N/NAME  the first N requests for this path answer CODE (e.g.
                      503 or 429, with a small error body), later ones 200
                      with body(NAME, 10000)
  /flakyfile/CODE/N/S/PATH  the first N requests for this path answer CODE
                      (with "Retry-After: S" when S > 0), later ones the
                      file ROOT/PATH (--root; 404 if missing)
  /cut/SIZE/NAME      Content-Length SIZE, sends SIZE // 2 bytes, closes
  /status/CODE/NAME   always CODE with a small body
  /drop/NAME          closes the connection without any response
  /chunked/SIZE/NAME  200, body(NAME, SIZE) in chunked encoding (no length)
  /empty/NAME         200 with Content-Length 0
  /ok/SIZE/NAME       200 with body(NAME, SIZE)
  /count/PATH         text: how many requests PATH has received so far
  anything else       with --root: the file ROOT/PATH (404 if missing)

body(NAME, n): n bytes, byte i = (i * 7 + len(NAME)) & 255 — tests recompute it.
"""
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COUNTS = {}
LOCK = threading.Lock()
OPTS = {"root": None, "rate": 0, "latency": 0.0, "exit_after": 0}
SENT = [0]  # complete 200 responses so far (under LOCK)


def body(name, n):
    k = len(name)
    return bytes(((i * 7 + k) & 255) for i in range(n))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_body(self, code, data, length=None, headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data) if length is None else length))
        self.end_headers()
        rate = OPTS["rate"]
        if not rate or code != 200:
            self.wfile.write(data)
        else:
            t0 = time.monotonic()
            for i in range(0, len(data), 8192):
                self.wfile.write(data[i:i + 8192])
                ahead = t0 + (i + 8192) / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
        if code == 200 and OPTS["exit_after"]:
            self.wfile.flush()
            with LOCK:
                SENT[0] += 1
                if SENT[0] >= OPTS["exit_after"]:
                    os._exit(0)  # the server goes away, mid-run

    def send_file(self, parts):
        if not OPTS["root"] or ".." in parts or not parts:
            self.send_body(404, b"no such path\n")
            return
        try:
            with open(os.path.join(OPTS["root"], *parts), "rb") as f:
                data = f.read()
        except OSError:
            self.send_body(404, b"no such file\n")
            return
        self.send_body(200, data)

    def do_GET(self):
        path = self.path
        parts = path.strip("/").split("/")
        if parts[0] == "count":
            target = "/" + "/".join(parts[1:])
            with LOCK:
                n = COUNTS.get(target, 0)
            self.send_body(200, str(n).encode())
            return
        with LOCK:
            COUNTS[path] = COUNTS.get(path, 0) + 1
            seen = COUNTS[path]
        if OPTS["latency"]:
            time.sleep(OPTS["latency"])
        try:
            kind = parts[0]
            if kind == "flaky":
                code, n, name = int(parts[1]), int(parts[2]), parts[3]
                if seen <= n:
                    self.send_body(code, b"try again later\n")
                else:
                    self.send_body(200, body(name, 10000))
            elif kind == "flakyfile":
                code, n, wait = int(parts[1]), int(parts[2]), int(parts[3])
                if seen <= n:
                    extra = (("Retry-After", str(wait)),) if wait > 0 else ()
                    self.send_body(code, b"slow down\n", headers=extra)
                else:
                    self.send_file(parts[4:])
            elif kind == "cut":
                size, name = int(parts[1]), parts[2]
                self.send_body(200, body(name, size)[: size // 2], length=size)
                self.wfile.flush()
                self.close_connection = True
            elif kind == "status":
                self.send_body(int(parts[1]), b"error page\n")
            elif kind == "drop":
                self.close_connection = True
            elif kind == "chunked":
                size, name = int(parts[1]), parts[2]
                data = body(name, size)
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, len(data), 4096):
                    c = data[i:i + 4096]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(c), c))
                self.wfile.write(b"0\r\n\r\n")
            elif kind == "empty":
                self.send_body(200, b"")
            elif kind == "ok":
                size, name = int(parts[1]), parts[2]
                self.send_body(200, body(name, size))
            else:
                self.send_file(parts)
        except (ValueError, IndexError):
            self.send_body(400, b"bad path\n")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # listen backlog: many clients connect at once

    def handle_error(self, request, client_address):
        pass  # clients that hang up early (on purpose, in tests) are not news


def watch_parent(ppid, server):
    while os.getppid() == ppid:
        time.sleep(0.2)
    os._exit(0)


def size(text):
    mult = {"k": 1024, "m": 1024 * 1024}.get(text[-1:].lower(), 1)
    return int(float(text[:-1] if mult > 1 else text) * mult)


def main():
    args = sys.argv[1:]
    port = 0
    portfile = None
    while args:
        a = args.pop(0)
        if a == "--root":
            OPTS["root"] = args.pop(0)
        elif a == "--rate":
            OPTS["rate"] = size(args.pop(0))
        elif a == "--latency-ms":
            OPTS["latency"] = float(args.pop(0)) / 1000.0
        elif a == "--exit-after":
            OPTS["exit_after"] = int(args.pop(0))
        elif a == "--port":
            port = int(args.pop(0))
        else:
            portfile = a
    server = Server(("127.0.0.1", port), Handler)
    port = server.server_address[1]
    threading.Thread(target=watch_parent, args=(os.getppid(), server), daemon=True).start()
    if portfile:
        tmp = portfile + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.rename(tmp, portfile)
    else:
        print(port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
