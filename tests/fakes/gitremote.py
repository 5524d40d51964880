#!/usr/bin/python3
"""gitremote - a git HTTP remote that requires a token, for Tern's tests
and `make demo`: Debian's git-http-backend (package git) behind a small
server.

    gitremote.py --root DIR --repo NAME.git --token TOKEN --log FILE
                 [--listen 127.0.0.1:0]

Creates the bare repository DIR/NAME.git (receive-pack enabled) if it is not
there, prints `gitremote listening HOST:PORT` (the remote's URL is
http://HOST:PORT/NAME.git) and serves until SIGTERM (exit 0).

- Every request needs the token: `Authorization: Basic` with it as the
  password (any user name) or `Authorization: Bearer TOKEN`; anything else
  is 401 with `WWW-Authenticate: Basic realm="git"`.
- --log: one JSON line per request ({method, path, service, auth, status})
  and, from the repository's post-receive hook, one per ref a push updated:
  {"update": ref, "old": sha, "new": sha}. A test counts pushes by those.
- Request bodies in chunked transfer encoding (git sends large packs so)
  are decoded; Content-Encoding gzip is passed on to git-http-backend.
"""
import argparse
import base64
import http.server
import json
import os
import signal
import socketserver
import subprocess
import sys
import threading
import urllib.parse

BACKEND = "/usr/lib/git-core/git-http-backend"
HOOK = """#!/bin/sh
while read old new ref; do
  printf '{"update": "%%s", "old": "%%s", "new": "%%s"}\\n' "$ref" "$old" "$new" >> %s
done
"""


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def authorized(self):
        tok = self.server.token
        h = self.headers.get("Authorization", "")
        if h == "Bearer " + tok:
            return True
        if h.startswith("Basic "):
            try:
                user, _, pw = base64.b64decode(h[6:]).decode().partition(":")
            except Exception:
                return False
            return pw == tok
        return False

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length", "0"))
        return self.rfile.read(n) if n else b""

    def handle_any(self, method):
        u = urllib.parse.urlsplit(self.path)
        entry = {"method": method, "path": u.path,
                 "service": urllib.parse.parse_qs(u.query).get("service", [""])[0]}
        data = self.body() if method == "POST" else b""
        if not self.authorized():
            entry.update(auth=False, status=401)
            self.server.write(entry)
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        env = {
            "PATH": "/usr/bin:/bin",
            "GIT_PROJECT_ROOT": self.server.root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": method,
            "PATH_INFO": u.path,
            "QUERY_STRING": u.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(data)),
            "REMOTE_USER": "tern",
            "REMOTE_ADDR": self.client_address[0],
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": self.server.root,
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        p = subprocess.run([BACKEND], input=data, capture_output=True, env=env)
        head, _, out = p.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, out = p.stdout.partition(b"\n\n")
        status = 200
        headers = []
        for line in head.decode(errors="replace").splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.strip().split()[0])
            elif k:
                headers.append((k, v.strip()))
        entry.update(auth=True, status=status)
        if p.returncode:
            entry["stderr"] = p.stderr.decode(errors="replace")[-500:]
        self.server.write(entry)
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def write(self, entry):
        with self.lock:
            with open(self.log, "a") as f:
                f.write(json.dumps(entry) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--root", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--log", required=True)
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    repo = os.path.join(root, args.repo)
    log = os.path.abspath(args.log)
    if not os.path.isdir(repo):
        os.makedirs(root, exist_ok=True)
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", repo], check=True)
        subprocess.run(["git", "-C", repo, "config", "http.receivepack", "true"], check=True)
        hook = os.path.join(repo, "hooks", "post-receive")
        with open(hook, "w") as f:
            f.write(HOOK % ("'" + log.replace("'", "'\\''") + "'"))
        os.chmod(hook, 0o755)
    host, port = args.listen.rsplit(":", 1)
    srv = Server((host, int(port)), Handler)
    srv.root, srv.token, srv.log, srv.lock = root, args.token, log, threading.Lock()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown).start())
    print("gitremote listening %s:%d" % srv.server_address[:2], flush=True)
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
