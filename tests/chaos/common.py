"""common - what both tiers of the chaos campaign share: reading a
session's journal from etcd (chunked events and snapshots included), asking
tern-sandboxd what it ran and what is in the workspace, the script's
expected writes, and the trial record. Standard library only."""
import base64
import json
import os
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
NOTES = "".join("line %04d of the notes the agent keeps\n" % i for i in range(1300))


def script_path(workdir):
    """The chaos model script with its placeholders filled in."""
    with open(os.path.join(HERE, "script.json")) as f:
        text = f.read()
    text = text.replace("@NOTES@", json.dumps(NOTES)[1:-1])
    out = os.path.join(workdir, "chaos-script.json")
    with open(out, "w") as f:
        f.write(text)
    return out


EXPECT_FILES = {"working/notes.txt": NOTES, "output/result.md": "# Result\n\nAll steps ran.\n"}


def _b64(s):
    return base64.b64encode(s.encode()).decode()


def _range(etcd_url, start, end, limit=0):
    body = {"key": _b64(start), "range_end": _b64(end)}
    if limit:
        body["limit"] = limit
    req = urllib.request.Request(etcd_url + "/v3/kv/range", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=20).read())


def _range_all(etcd_url, start, end):
    """Every kv in [start, end), a few at a time (values may be large)."""
    out = []
    key = start
    while True:
        r = _range(etcd_url, key, end, limit=16)
        kvs = r.get("kvs", [])
        out += kvs
        if not r.get("more") or not kvs:
            return out
        key = base64.b64decode(kvs[-1]["key"]).decode() + "\x01"


def journal_events(etcd_url, uid):
    """The session's stored events in seq order, chunked ones reassembled."""
    prefix = "/tern/v1/s/%s/" % uid
    events = []
    for kv in _range_all(etcd_url, prefix + "ev/", prefix + "ev0"):
        ev = json.loads(base64.b64decode(kv.get("value", "")).decode())
        ch = ev.get("chunks")
        if ch:
            pfx = "%sch/%016x/%s/" % (prefix, ev["seq"], ch["id"])
            parts = _range_all(etcd_url, pfx, pfx[:-1] + "0")
            text = b"".join(base64.b64decode(p.get("value", "")) for p in parts)
            ev["data"] = json.loads(text.decode())
        events.append(ev)
    events.sort(key=lambda e: e["seq"])
    return events


def sandbox_get(addr, token, path, timeout=10):
    req = urllib.request.Request("http://%s%s" % (addr, path),
                                 headers={"Authorization": "Bearer " + token})
    return urllib.request.urlopen(req, timeout=timeout).read()


def executions(addr, token, uid):
    out = json.loads(sandbox_get(addr, token, "/v1/executions")).get("executions", [])
    return [e for e in out if e.get("key", "").startswith(uid + "/")]


def workspace_file(addr, token, path):
    """A file's text, or None when it does not exist."""
    try:
        return sandbox_get(addr, token, "/v1/files/" + path).decode()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


def sandbox_view(addr, token, uid):
    """(executions, effect lines, {path: content}) from a live sandboxd."""
    ex = executions(addr, token, uid)
    eff = workspace_file(addr, token, "working/effects.log") or ""
    files = {p: workspace_file(addr, token, p) for p in EXPECT_FILES}
    return ex, eff.splitlines(), files


class Trial:
    """One trial's record: its seed, what was killed, the verdicts."""

    def __init__(self, tier, seed):
        self.tier = tier
        self.seed = seed
        self.kills = []        # (seconds since start, target, detail)
        self.verdicts = []
        self.error = None      # the trial could not be run to the end
        self.seconds = 0.0

    @property
    def clean(self):
        return self.error is None and all(v.clean for v in self.verdicts)

    def kill_counts(self):
        out = {}
        for _, target, _ in self.kills:
            out[target] = out.get(target, 0) + 1
        return out
