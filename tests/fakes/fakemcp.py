#!/usr/bin/python3
"""fakemcp - a scripted MCP server (Streamable HTTP) for Tern's tests.

    fakemcp.py --token TOKEN --log FILE [--listen 127.0.0.1:0] [--stateless]
               [--json] [--expire-session-after N] [--page-size N]

Once serving it prints one line, `fakemcp listening HOST:PORT`; the endpoint
is http://HOST:PORT/mcp. SIGTERM stops it (exit 0).

- Every request needs `Authorization: Bearer TOKEN` (else 401 with
  WWW-Authenticate).
- Revision 2025-11-25 with sessions (initialize hands out Mcp-Session-Id,
  later requests must carry it and MCP-Protocol-Version; an unknown session
  is 404), or with --stateless the 2026-07-28 revision (initialize is
  "method not found"; every request carries _meta
  io.modelcontextprotocol/protocolVersion and the MCP-Protocol-Version
  header). --expire-session-after N forgets the session after N requests
  (the client must initialize again).
- tools/list pages its tools (--page-size, default 3) with nextCursor.
- tools/call answers as an SSE stream (a progress notification, then the
  response), or a JSON body with --json. Tools:
    echo {text}            the text back
    create_issue {title}   "created issue #N" (a side effect: N counts)
    slow {ms}              sleeps, then "slept N ms"
    fail {}                a tool error (isError: true)
    rpc_error {}           a JSON-RPC error -32000
    headers {}             the request's headers, verbatim (Authorization too)
    secret_tool {}         exists, but a test does not allow it
    bad.name {}            a name a client cannot offer
- Idempotency: a call with the key of an earlier one (Idempotency-Key header
  or params._meta["dev.tern/idempotencyKey"]) is answered from the record,
  not run again; while the first still runs, the repeat waits for it.
- --log: one JSON line per request: {method, tool?, key?, executed?,
  replayed?, auth, session?}. "executed": true is a call that ran.
"""
import argparse
import http.server
import json
import signal
import socketserver
import sys
import threading
import time
import uuid

STATELESS = "2026-07-28"
TOOLS = [
    {"name": "echo", "description": "Echo a text.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                     "required": ["text"]}},
    {"name": "create_issue", "description": "Create an issue in the tracker.",
     "inputSchema": {"type": "object", "properties": {"title": {"type": "string"},
                                                       "project": {"type": "string"}},
                     "required": ["title"], "additionalProperties": False}},
    {"name": "slow", "description": "Sleep, then answer.",
     "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer"}}}},
    {"name": "fail", "description": "Always fails.", "inputSchema": {"type": "object"}},
    {"name": "rpc_error", "description": "Answers with a JSON-RPC error.",
     "inputSchema": {"type": "object"}},
    {"name": "headers", "description": "Shows the request's headers.",
     "inputSchema": {"type": "object"}},
    {"name": "secret_tool", "description": "Not for the agent.",
     "inputSchema": {"type": "object"}},
    {"name": "bad.name", "description": "An unusable name.", "inputSchema": {"type": "object"}},
]


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.sessions = {}  # id -> requests seen
        self.records = {}   # key -> {"done": Event, "result": ...}
        self.issues = 0
        self.log = open(args.log, "a", buffering=1)

    def write(self, entry):
        with self.lock:
            self.log.write(json.dumps(entry) + "\n")


def text_result(text, error=False):
    return {"content": [{"type": "text", "text": text}], "isError": error}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, body=None, headers=(), sse=False):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        if body is None:
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if sse:
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for msg in body:
                self.wfile.write(b": keep-alive\n\n")
                self.wfile.write(("event: message\ndata: %s\n\n" % json.dumps(msg)).encode())
                self.wfile.flush()
            self.close_connection = True
            return
        data = json.dumps(body).encode()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_DELETE(self):
        st = self.server.state
        sid = self.headers.get("Mcp-Session-Id")
        with st.lock:
            st.sessions.pop(sid, None)
        st.write({"method": "DELETE", "session": sid})
        self.reply(204)

    def do_GET(self):
        self.reply(405)

    def do_POST(self):
        st = self.server.state
        a = st.args
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n)
        auth_ok = self.headers.get("Authorization") == "Bearer " + a.token
        try:
            msg = json.loads(raw)
        except ValueError:
            return self.reply(400, {"jsonrpc": "2.0", "id": None,
                                    "error": {"code": -32700, "message": "parse error"}})
        method = msg.get("method")
        params = msg.get("params") or {}
        entry = {"method": method, "auth": auth_ok}
        if not auth_ok:
            st.write(entry)
            return self.reply(401, {"error": "unauthorized"},
                              [("WWW-Authenticate", 'Bearer realm="fakemcp"')])
        rid = msg.get("id")
        sid = self.headers.get("Mcp-Session-Id")
        meta = params.get("_meta") or {}
        if a.stateless:
            if method == "initialize":
                st.write(entry)
                return self.reply(200, {"jsonrpc": "2.0", "id": rid, "error": {
                    "code": -32601, "message": "method not found: this server is stateless"}})
            if (meta.get("io.modelcontextprotocol/protocolVersion") != STATELESS or
                    self.headers.get("MCP-Protocol-Version") != STATELESS):
                entry["error"] = "no stateless _meta"
                st.write(entry)
                return self.reply(400, {"jsonrpc": "2.0", "id": rid, "error": {
                    "code": -32600, "message": "missing protocol version"}})
        else:
            if method == "initialize":
                sid = uuid.uuid4().hex
                with st.lock:
                    st.sessions[sid] = 0
                entry["session"] = sid
                st.write(entry)
                return self.reply(200, {"jsonrpc": "2.0", "id": rid, "result": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {"listChanged": False}},
                    "serverInfo": {"name": "fakemcp", "version": "1"}}},
                    [("Mcp-Session-Id", sid)])
            with st.lock:
                known = sid in st.sessions
                if known:
                    st.sessions[sid] += 1
                    if a.expire_session_after and st.sessions[sid] > a.expire_session_after:
                        del st.sessions[sid]
                        known = False
            entry["session"] = sid
            if not known:
                entry["error"] = "unknown session"
                st.write(entry)
                return self.reply(404, {"jsonrpc": "2.0", "id": rid, "error": {
                    "code": -32001, "message": "session not found"}})
            if self.headers.get("MCP-Protocol-Version") != "2025-11-25":
                entry["error"] = "no MCP-Protocol-Version"
                st.write(entry)
                return self.reply(400, {"error": "MCP-Protocol-Version missing"})
        if method == "notifications/initialized":
            st.write(entry)
            return self.reply(202)
        if method == "tools/list":
            start = int(params.get("cursor") or 0)
            page = TOOLS[start:start + a.page_size]
            result = {"tools": page}
            if start + a.page_size < len(TOOLS):
                result["nextCursor"] = str(start + a.page_size)
            st.write(entry)
            return self.reply(200, {"jsonrpc": "2.0", "id": rid, "result": result})
        if method == "tools/call":
            return self.call(st, rid, params, meta, entry)
        st.write(entry)
        return self.reply(200, {"jsonrpc": "2.0", "id": rid, "error": {
            "code": -32601, "message": "method not found"}})

    def call(self, st, rid, params, meta, entry):
        name = params.get("name")
        args = params.get("arguments") or {}
        key = self.headers.get("Idempotency-Key") or meta.get("dev.tern/idempotencyKey")
        entry.update({"tool": name, "key": key, "arguments": args,
                      "keyHeader": self.headers.get("Idempotency-Key"),
                      "keyMeta": meta.get("dev.tern/idempotencyKey")})
        rec, first = None, True
        if key:
            with st.lock:
                rec = st.records.get(key)
                if rec is None:
                    rec = st.records[key] = {"done": threading.Event(), "result": None}
                else:
                    first = False
        if not first:
            rec["done"].wait(600)
            entry["replayed"] = True
            st.write(entry)
            return self.answer(rid, rec["result"])
        entry["executed"] = True
        st.write(dict(entry, phase="started"))
        if name == "echo":
            result = text_result(str(args.get("text", "")))
        elif name == "create_issue":
            with st.lock:
                st.issues += 1
                n = st.issues
            result = text_result("created issue #%d: %s" % (n, args.get("title", "")))
        elif name == "slow":
            ms = int(args.get("ms", 1000))
            time.sleep(ms / 1000.0)
            result = text_result("slept %d ms" % ms)
        elif name == "fail":
            result = text_result("the tool failed on purpose", error=True)
        elif name == "rpc_error":
            result = {"__error__": {"code": -32000, "message": "the server could not do it"}}
        elif name == "headers":
            result = text_result("\n".join("%s: %s" % (k, v) for k, v in self.headers.items()))
        elif name in ("secret_tool", "bad.name"):
            result = text_result("you should not have called %s" % name)
        else:
            result = {"__error__": {"code": -32602, "message": "unknown tool %s" % name}}
        if rec:
            rec["result"] = result
            rec["done"].set()
        st.write(dict(entry, phase="finished"))
        return self.answer(rid, result)

    def answer(self, rid, result):
        if "__error__" in (result or {}):
            resp = {"jsonrpc": "2.0", "id": rid, "error": result["__error__"]}
        else:
            resp = {"jsonrpc": "2.0", "id": rid, "result": result}
        if self.server.state.args.json:
            return self.reply(200, resp)
        note = {"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": 1, "progress": 1}}
        return self.reply(200, [note, resp], sse=True)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--token", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--stateless", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--expire-session-after", type=int, default=0)
    ap.add_argument("--page-size", type=int, default=3)
    args = ap.parse_args()
    host, port = args.listen.rsplit(":", 1)
    srv = Server((host, int(port)), Handler)
    srv.state = State(args)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown).start())
    print("fakemcp listening %s:%d" % srv.server_address[:2], flush=True)
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
