"""diffproxy - the same requests to tern-dev and to kube-apiserver, compared.

A tee proxy (not a suite; tests/integration/test_differential.py drives it).
Clients (kubectl, the official Python client, tern-operator, tern-node) talk
plain HTTP to the proxy on a loopback port, with no credentials; the proxy
sends each request to the *primary* (whose answer the client gets) and then
to the *secondary*, each with its own credentials (the same identity on both:
tern-dev's admin, and a client certificate with the same user and
system:masters for kube-apiserver), and compares the two answers.

The two servers make their own uids, resourceVersions, continue tokens and
generated names, so requests are translated for the secondary: every pair of
answers teaches a map (primary value -> secondary value) of the objects' uids
and resourceVersions (paired by namespace and name), list resourceVersions
and continue tokens, and names made from generateName; a request's path,
query and body are rewritten with it. A resourceVersion the map does not
know (one seen only in a watch event) is replaced by the secondary object's
current one (read first), so an update means the same on both.

What is compared (compare()), per request:
  - the status code; for a Status: reason, details (kind, group, name) and
    the causes as (reason, field) pairs; not the message text;
  - objects: every field, flattened to paths (list items keyed by name),
    except what each server makes on its own (uid, resourceVersion,
    timestamps, generated name suffixes, managedFields' times); in reads,
    the status of kinds whose status a controller or kubelet writes (the two
    clusters' controllers run at their own pace) is not compared;
  - lists: kind, the list metadata keys, and every item both have; an
    object created through the proxy must be in both lists or in neither;
  - Tables (kubectl get): column names and types, the rows of objects
    created through the proxy, and their cells (not for status-written
    kinds, not dates);
  - watches: the stream's status code, each object's event types in order
    (consecutive MODIFIED as one: their number is the controllers' business),
    ERROR events' code and reason, the event objects' kinds;
  - discovery and OpenAPI documents: the status code only (tern-dev serves a
    subset of the API, docs/tern-dev.md).
Each difference has a key such as
    "create core/v1 pods: field spec.enableServiceLinks only in kube-apiserver"
that docs/tern-dev.md's "Differences from kube-apiserver" lists (with *
wildcards) or does not.
"""
import base64
import copy
import traceback
import http.client
import json
import re
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NONRESOURCE = ("/version", "/healthz", "/livez", "/readyz", "/openapi", "/.well-known")
# kinds whose status a controller or the kubelet writes: not compared in reads
STATUS_BY_CONTROLLERS = {"Pod", "Job", "Deployment", "ReplicaSet", "Node", "Namespace",
                         "PersistentVolumeClaim", "PersistentVolume", "StatefulSet",
                         "Service", "CustomResourceDefinition", "APIService"}
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
GEN_SUFFIX = re.compile(r"^(kube-api-access-)[a-z0-9]{5}$")


# ---- requests -----------------------------------------------------------------
class Req:
    def __init__(self, method, target, headers, body):
        self.method = method
        self.target = target  # path?query
        self.headers = headers  # list of (name, value)
        self.body = body or b""
        u = urllib.parse.urlsplit(target)
        self.path = u.path
        self.query = urllib.parse.parse_qsl(u.query, keep_blank_values=True)
        self.q = dict(self.query)
        self.res = parse_path(self.path)
        # strconv.ParseBool, as kube-apiserver reads it (the Python client sends "True")
        self.watch = self.q.get("watch") in ("1", "t", "T", "true", "TRUE", "True") or \
            (self.res or {}).get("legacy_watch")

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def verb(self):
        r = self.res
        if r is None:
            return self.method.lower()
        if self.watch:
            return "watch"
        m = self.method
        if m == "GET":
            return "get" if r["name"] else "list"
        if m == "POST":
            return "create"
        if m == "PUT":
            return "update"
        if m == "PATCH":
            ct = (self.header("Content-Type") or "").split(";")[0]
            kind = {"application/apply-patch+yaml": "apply",
                    "application/merge-patch+json": "merge",
                    "application/strategic-merge-patch+json": "strategic",
                    "application/json-patch+json": "json"}.get(ct, ct)
            return "patch(%s)" % kind
        if m == "DELETE":
            return "delete" if r["name"] else "deletecollection"
        return m.lower()

    def label(self):
        """'VERB group/version resource[/sub]' or 'VERB PATH' for the rest."""
        r = self.res
        if r is None:
            p = self.path
            for pre in ("/openapi/v3/", "/openapi/v2", "/apis/", "/api/"):
                if p.startswith(pre) and pre.endswith("/"):
                    p = pre + "*"
            return "%s %s" % (self.verb(), p)
        gv = (r["group"] or "core") + "/" + r["version"]
        return "%s %s %s%s" % (self.verb(), gv, r["resource"],
                               "/" + r["sub"] if r["sub"] else "")


def parse_path(path):
    """{'group','version','ns','resource','name','sub'} of a resource path,
    or None (discovery, version, OpenAPI, health)."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        return None
    if parts[0] == "api" and len(parts) >= 3:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis" and len(parts) >= 4:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    legacy = False
    if rest and rest[0] == "watch":
        legacy, rest = True, rest[1:]
    ns = None
    if len(rest) == 3 and rest[0] == "namespaces" and rest[2] in ("status", "finalize"):
        return {"group": group, "version": version, "ns": None, "resource": "namespaces",
                "name": rest[1], "sub": rest[2], "legacy_watch": legacy}
    if len(rest) >= 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    elif len(rest) in (1, 2) and rest[0] == "namespaces":
        return {"group": group, "version": version, "ns": None, "resource": "namespaces",
                "name": rest[1] if len(rest) == 2 else None, "sub": None, "legacy_watch": legacy}
    if not rest:
        return None
    return {"group": group, "version": version, "ns": ns, "resource": rest[0],
            "name": rest[1] if len(rest) > 1 else None,
            "sub": "/".join(rest[2:]) if len(rest) > 2 else None, "legacy_watch": legacy}


class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # dict, lower-case names
        self.body = body
        ct = headers.get("content-type", "")
        self.obj = None
        if "json" in ct or body[:1] in (b"{", b"["):
            try:
                self.obj = json.loads(body)
            except ValueError:
                self.obj = None


# ---- the map of server-made values --------------------------------------------
def key_of(obj):
    md = obj.get("metadata") or {}
    return (obj.get("kind"), md.get("namespace") or "", md.get("name") or "")


class Mapper:
    def __init__(self):
        self.fwd = {}           # primary value -> secondary value (uids, names, tokens)
        self.rv = {}            # primary resourceVersion -> secondary
        self.back = {}          # secondary value -> primary (for comparison)
        self.rv_back = {}
        self.created = set()    # (resource, ns, primary name) created through the proxy
        self.lock = threading.Lock()

    def learn_value(self, a, b, rv=False):
        if not isinstance(a, str) or not isinstance(b, str) or not a or not b:
            return
        with self.lock:
            if rv:
                self.rv[a] = b
                self.rv_back[b] = a
            elif a != b:
                self.fwd[a] = b
                self.back[b] = a

    def learn_objects(self, a, b):
        """Pairs the server-made values of two answers to the same request."""
        if not isinstance(a, dict) or not isinstance(b, dict):
            return
        ma, mb = a.get("metadata") or {}, b.get("metadata") or {}
        if a.get("kind", "").endswith("List") or "items" in a:
            self.learn_value(ma.get("resourceVersion"), mb.get("resourceVersion"), rv=True)
            self.learn_value(ma.get("continue"), mb.get("continue"))
            bi = {key_of(self.to_primary(copy.deepcopy(x)))[1:]: x
                  for x in b.get("items") or []}
            for x in a.get("items") or []:
                y = bi.get(key_of(x)[1:])
                if y is not None:
                    self.learn_objects(x, y)
            return
        if a.get("kind") == "Table":
            for ra, rb in zip(a.get("rows") or [], b.get("rows") or []):
                self.learn_objects(ra.get("object") or {}, rb.get("object") or {})
            return
        self.learn_value(ma.get("uid"), mb.get("uid"))
        self.learn_value(ma.get("resourceVersion"), mb.get("resourceVersion"), rv=True)
        if ma.get("generateName") and ma.get("name") != mb.get("name"):
            self.learn_value(ma.get("name"), mb.get("name"))

    def translate_str(self, s):
        with self.lock:
            for a, b in self.fwd.items():
                if a in s:
                    s = s.replace(a, b)
        return s

    def translate_target(self, req, current_rv):
        parts = req.path.split("/")
        with self.lock:
            parts = [self.fwd.get(p, p) for p in parts]
        q = []
        for k, v in req.query:
            if k == "resourceVersion" and v not in ("", "0"):
                with self.lock:
                    v2 = self.rv.get(v)
                v = v2 if v2 else current_rv(req, None) or v
            elif k == "continue":
                with self.lock:
                    v = self.fwd.get(v, v)
            else:
                v = self.translate_str(v)
            q.append((k, v))
        t = "/".join(parts)
        if q:
            t += "?" + urllib.parse.urlencode(q)
        return t

    def translate_body(self, req, current_rv):
        if not req.body:
            return req.body
        ct = (req.header("Content-Type") or "")
        if "json" not in ct and "yaml" not in ct:
            return req.body  # protobuf: sent as it is
        text = self.translate_str(req.body.decode(errors="replace"))
        try:
            obj = json.loads(text)
        except ValueError:
            return text.encode()
        if isinstance(obj, dict):
            md = obj.get("metadata")
            if isinstance(md, dict) and md.get("resourceVersion"):
                with self.lock:
                    v = self.rv.get(md["resourceVersion"])
                md["resourceVersion"] = v or current_rv(req, obj) or md["resourceVersion"]
            pre = obj.get("preconditions")
            if isinstance(pre, dict) and pre.get("resourceVersion"):
                with self.lock:
                    v = self.rv.get(pre["resourceVersion"])
                pre["resourceVersion"] = v or current_rv(req, obj) or pre["resourceVersion"]
        return json.dumps(obj).encode()

    def to_primary(self, obj):
        """obj (a secondary's answer) with the secondary's values replaced by
        the primary's, so that the two compare."""
        def walk(x):
            if isinstance(x, dict):
                return {k: walk(v) for k, v in x.items()}
            if isinstance(x, list):
                return [walk(v) for v in x]
            if isinstance(x, str):
                with self.lock:
                    if x in self.back:
                        return self.back[x]
                    if len(x) > 36:  # uids inside longer strings (annotations)
                        for b, a in self.back.items():
                            if len(b) >= 20 and b in x:
                                x = x.replace(b, a)
                return x
            return x
        return walk(obj)


# ---- comparison ----------------------------------------------------------------
def item_id(x, i):
    if isinstance(x, dict):
        for k in ("name", "type", "key", "containerPort", "mountPath", "ip", "address"):
            if k in x and isinstance(x[k], (str, int)):
                return "%s=%s" % (k, x[k])
    return str(i)


def flatten(x, prefix="", out=None):
    if out is None:
        out = {}
    if isinstance(x, dict):
        if not x:
            out[prefix or "."] = "{}"
        for k, v in x.items():
            flatten(v, "%s.%s" % (prefix, k) if prefix else k, out)
    elif isinstance(x, list):
        if not x:
            out[prefix] = "[]"
        for i, v in enumerate(x):
            flatten(v, "%s[%s]" % (prefix, item_id(v, i)), out)
    else:
        if isinstance(x, str):
            if TIME_RE.match(x):
                x = "<time>"
            x = GEN_SUFFIX.sub(r"\1<random>", x)
        out[prefix] = x
    return out


def prefixes(path):
    """path and its ancestors, shortest first: a, a.b, a.b[x], a.b[x].c"""
    out = []
    for i, ch in enumerate(path):
        if ch in ".[" and i:
            out.append(path[:i])
    out.append(path)
    return out


def general(path):
    """A field path with list keys made general: spec.containers[*].image."""
    return re.sub(r"\[[^\]]*\]", "[*]", path)


IGNORED = ("metadata.uid", "metadata.resourceVersion", "metadata.selfLink",
           "metadata.managedFields",
           # written by the scheduler (kube-apiserver) or tern-dev's kubelet
           # (its own node's name), and by the Deployment controller
           "spec.nodeName", "metadata.annotations.deployment.kubernetes.io/",
           # the controller-manager's TTL controller annotates nodes
           "metadata.annotations.node.alpha.kubernetes.io/ttl")
# resources whose status (and so their Table cells) controllers write
STATUS_RESOURCES = {"pods", "jobs", "deployments", "replicasets", "nodes", "namespaces",
                    "persistentvolumeclaims", "persistentvolumes", "statefulsets", "services",
                    "customresourcedefinitions", "apiservices"}


def without_server_made(o):
    """o without what each server makes on its own in metadata (uid,
    resourceVersion, selfLink, managedFields), an empty metadata kept."""
    if not isinstance(o, dict) or not isinstance(o.get("metadata"), dict):
        return o
    o = dict(o)
    o["metadata"] = {k: v for k, v in o["metadata"].items()
                     if k not in ("uid", "resourceVersion", "selfLink", "managedFields")}
    return o


def compare_objects(a, b, read, where, kind=None, create=False, only=None):
    """Differences between two objects as (what, detail) pairs. The status
    of a kind whose status controllers write is compared in the answer to
    its create only (what the server defaults), and on status writes."""
    kind = kind or a.get("kind")
    fa = {p: v for p, v in flatten(without_server_made(a)).items() if not p.startswith(IGNORED)}
    fb = {p: v for p, v in flatten(without_server_made(b)).items() if not p.startswith(IGNORED)}
    out = []
    skip_status = kind in STATUS_BY_CONTROLLERS and not create
    if kind in STATUS_BY_CONTROLLERS and only is not None:
        # a client's status write to an object whose status a kubelet or
        # controller writes too: the fields the client wrote
        fa = {p: v for p, v in fa.items() if not p.startswith("status") or
              any(p == o or p.startswith(o + ".") or p.startswith(o + "[") for o in only)}
        fb = {p: v for p, v in fb.items() if not p.startswith("status") or
              any(p == o or p.startswith(o + ".") or p.startswith(o + "[") for o in only)}
    pa = {q for p in fa for q in prefixes(p)}
    pb = {q for p in fb for q in prefixes(p)}
    seen = set()
    for p in sorted(set(fa) | set(fb)):
        if p.startswith(IGNORED) or (skip_status and (p == "status" or p.startswith("status."))):
            continue
        if p not in fb or p not in fa:
            # the whole subtree the other side lacks, once
            other = pb if p not in fb else pa
            top = next((q for q in prefixes(p) if q not in other), None)
            if top is None:  # a value on one side, an object or list on the other
                out.append(("field %s differs in type" % general(p), p))
                continue
            if top in seen:
                continue
            seen.add(top)
            side = "tern-dev" if p not in fb else "kube-apiserver"
            val = fa.get(p) if p not in fb else fb.get(p)
            out.append(("field %s only in %s" % (general(top), side), "%s (%s=%r)" % (
                top, p, val)))
        elif fa[p] != fb[p]:
            out.append(("field %s differs" % general(p),
                        "%s: tern-dev %r, kube-apiserver %r" % (p, fa[p], fb[p])))
    ma = sorted({(m.get("manager"), m.get("operation"), m.get("subresource", ""))
                 for m in (a.get("metadata") or {}).get("managedFields") or []})
    mb = sorted({(m.get("manager"), m.get("operation"), m.get("subresource", ""))
                 for m in (b.get("metadata") or {}).get("managedFields") or []})
    if ma != mb and not read:
        out.append(("managedFields managers differ", "tern-dev %r, kube-apiserver %r" % (ma, mb)))
    return out


def is_status(o):
    return isinstance(o, dict) and o.get("kind") == "Status"


def status_sig(o):
    d = o.get("details") or {}
    return {"code": o.get("code"), "reason": o.get("reason"), "status": o.get("status"),
            "details.kind": d.get("kind"), "details.group": d.get("group"),
            "details.name": d.get("name"),
            "causes": sorted((c.get("reason", ""), c.get("field", ""))
                             for c in d.get("causes") or [])}


def compare(req, a, b, mapper, terndev_primary=True):
    """[(what, detail)] for one request's two answers. a is tern-dev's, b is
    kube-apiserver's (whichever was primary); the secondary's server-made
    values are mapped to the primary's."""
    out = []
    if a.status != b.status:
        ra = a.obj.get("reason") if is_status(a.obj) else None
        rb = b.obj.get("reason") if is_status(b.obj) else None
        name = (req.res or {}).get("name")
        out.append(("code %d vs %d%s" % (a.status, b.status, " (%s)" % name if name else ""),
                    "tern-dev %d %s, kube-apiserver %d %s" % (
                        a.status, ra or (a.body[:200] if a.obj is None else ""), b.status,
                        rb or (b.body[:200] if b.obj is None else ""))))
        return out
    if req.res is None:
        return out  # discovery, OpenAPI, version: the code only
    if a.obj is None or b.obj is None:
        if (a.obj is None) != (b.obj is None):
            out.append(("body json vs not", "tern-dev %s, kube-apiserver %s" % (
                a.headers.get("content-type"), b.headers.get("content-type"))))
        elif a.body != b.body and req.res.get("sub") not in ("log",):
            out.append(("body text differs", "%r vs %r" % (a.body[:120], b.body[:120])))
        return out
    oa, ob = (a.obj, mapper.to_primary(b.obj)) if terndev_primary else \
        (mapper.to_primary(a.obj), b.obj)
    if is_status(oa) or is_status(ob):
        if is_status(oa) != is_status(ob):
            out.append(("body %s vs %s" % (oa.get("kind"), ob.get("kind")), ""))
            return out
        sa, sb = status_sig(oa), status_sig(ob)
        ca, cb = sa["causes"], sb["causes"]
        if ca != cb and sorted(set(ca)) == sorted(set(cb)):
            out.append(("status causes: one repeats a cause", "tern-dev %r, kube-apiserver %r" %
                        (ca, cb)))
            sa["causes"] = sb["causes"]
        elif ca != cb and set(ca) < set(cb) and any(f == "<nil>" for _, f in cb):
            out.append(("status causes: kube-apiserver adds 'some validation rules were not "
                        "checked'", "%r" % (cb,)))
            sa["causes"] = sb["causes"]
        elif ca != cb and set(ca) < set(cb):
            out.append(("status causes: kube-apiserver reports more", "tern-dev %r, "
                        "kube-apiserver %r" % (ca, cb)))
            sa["causes"] = sb["causes"]
        for k in sa:
            if sa[k] != sb[k]:
                out.append(("status %s differs" % k, "tern-dev %r, kube-apiserver %r" %
                            (sa[k], sb[k])))
        return out
    read = req.method == "GET"
    if oa.get("kind") != ob.get("kind"):
        out.append(("body kind %s vs %s" % (oa.get("kind"), ob.get("kind")), ""))
        return out
    if oa.get("kind") == "Table":
        ca = [(c.get("name"), c.get("type"), c.get("format"), c.get("priority")) for c in oa.get("columnDefinitions") or []]
        cb = [(c.get("name"), c.get("type"), c.get("format"), c.get("priority")) for c in ob.get("columnDefinitions") or []]
        if ca != cb:
            out.append(("table columns differ", "tern-dev %r, kube-apiserver %r" % (ca, cb)))
            return out
        rows_b = {}
        for r in ob.get("rows") or []:
            md = (r.get("object") or {}).get("metadata") or {}
            rows_b[(md.get("namespace") or "", md.get("name"))] = r
        rk = req.res["resource"]
        for r in oa.get("rows") or []:
            md = (r.get("object") or {}).get("metadata") or {}
            k = (md.get("namespace") or "", md.get("name"))
            if (rk, k[0], k[1]) not in mapper.created:
                continue
            rb = rows_b.get(k)
            if rb is None:
                out.append(("table row of a created object only in tern-dev", str(k)))
                continue
            if rk in STATUS_RESOURCES:
                continue
            for c, x, y in zip(ca, r.get("cells") or [], rb.get("cells") or []):
                if c[2] == "date" or c[0] == "Age":
                    continue
                if x != y:
                    out.append(("table cell %s differs" % c[0], "%s: %r vs %r" % (k, x, y)))
        return out
    if "items" in oa or "items" in ob:
        ka = set((oa.get("metadata") or {}).keys()) - {"resourceVersion"}
        kb = set((ob.get("metadata") or {}).keys()) - {"resourceVersion"}
        if ka != kb:
            out.append(("list metadata keys differ", "tern-dev %r, kube-apiserver %r" %
                        (sorted(ka), sorted(kb))))
        ia = {key_of(x)[1:]: x for x in oa.get("items") or []}
        ib = {key_of(x)[1:]: x for x in ob.get("items") or []}
        item_kind = (oa.get("kind") or "")[:-4] if (oa.get("kind") or "").endswith("List") else None
        rk = req.res["resource"]
        for k in sorted(set(ia) | set(ib), key=str):
            created = (rk, k[0], k[1]) in mapper.created
            if k in ia and k in ib:
                for what, d in compare_objects(ia[k], ib[k], True, req, item_kind):
                    out.append(("item " + what, "%s %s" % (k[1], d)))
            elif created:
                out.append(("item of a created object only in %s" % (
                    "tern-dev" if k in ia else "kube-apiserver"), k[1]))
        return out
    status_write = req.method in ("PUT", "PATCH") and (req.res or {}).get("sub") == "status"
    only = None
    if status_write and req.method == "PATCH":
        try:
            body = json.loads(req.body)
            only = set(flatten({"status": body.get("status") or {}}))
        except (ValueError, AttributeError):
            only = None
    return compare_objects(oa, ob, read, req, create=req.method == "POST" or status_write,
                           only=only)


# ---- watches ----------------------------------------------------------------------
def watch_events(lines):
    evs = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            e = json.loads(line)
        except ValueError:
            evs.append(("UNPARSED", None, None))
            continue
        o = e.get("object") or {}
        evs.append((e.get("type"), o, key_of(o)))
    return evs


def compare_watch(req, ev_a, ev_b, mapper, code_a, code_b, terndev_primary=True):
    out = []
    if code_a != code_b:
        return [("watch code %d vs %d" % (code_a, code_b), "")]
    rk = (req.res or {}).get("resource")

    def per_object(evs, to_primary):
        seq = {}
        errors = []
        for t, o, k in evs:
            if t == "ERROR":
                errors.append((o.get("code"), o.get("reason")))
                continue
            if t == "BOOKMARK" or t == "UNPARSED" or o is None:
                if t == "UNPARSED":
                    errors.append(("unparsed", None))
                continue
            if to_primary:
                k = key_of(mapper.to_primary(o))
            if (rk, k[1], k[2]) not in mapper.created:
                continue
            if t == "MODIFIED" and o.get("kind") in STATUS_BY_CONTROLLERS:
                continue  # the controllers' and kubelets' status writes
            s = seq.setdefault(k, [])
            if not (s and s[-1] == t == "MODIFIED"):
                s.append(t)
        return seq, errors
    sa, ea = per_object(ev_a, not terndev_primary)
    sb, eb = per_object(ev_b, terndev_primary)
    if ea != eb:
        out.append(("watch ERROR events differ", "tern-dev %r, kube-apiserver %r" % (ea, eb)))
    for k in sorted(set(sa) | set(sb), key=str):
        x, y = sa.get(k) or [], sb.get(k) or []
        if x != y and k[0] in STATUS_BY_CONTROLLERS and (x[:len(y)] == y or y[:len(x)] == x):
            continue  # one is behind: the controllers' and kubelets' pace
        if x != y and (x[:-1] == y and x[-1:] == ["DELETED"] or
                       y[:-1] == x and y[-1:] == ["DELETED"]):
            continue  # a deletion by the garbage collector, at its own pace
        if sa.get(k) != sb.get(k):
            out.append(("watch event types differ", "%s: tern-dev %r, kube-apiserver %r" %
                        (k[2], sa.get(k), sb.get(k))))
    return out


# ---- backends ---------------------------------------------------------------------
class Backend:
    """One server: kubeapi.Api's connection and credentials."""

    def __init__(self, name, api):
        self.name = name
        self.api = api

    def open(self, method, target, headers, body, timeout=60):
        c = self.api.connect(timeout)
        c.putrequest(method, target, skip_accept_encoding=True)
        for k, v in headers:
            c.putheader(k, v)
        if self.api.token:
            c.putheader("Authorization", "Bearer " + self.api.token)
        if body:
            c.putheader("Content-Length", str(len(body)))
        elif method in ("POST", "PUT", "PATCH"):
            c.putheader("Content-Length", "0")
        c.endheaders(body or None)
        return c, c.getresponse()

    def do(self, method, target, headers, body):
        c, r = self.open(method, target, headers, body)
        data = r.read()
        c.close()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data)


FORWARD = ("accept", "content-type", "user-agent", "impersonate-user", "impersonate-group",
           "impersonate-uid")


def json_accept(v):
    """The secondary is asked for JSON where the client asked protobuf (its
    answer is compared, not decoded from protobuf)."""
    if not v:
        return v
    parts = [p.strip() for p in v.split(",")]
    out = []
    for p in parts:
        if p.startswith("application/vnd.kubernetes.protobuf"):
            p = "application/json" + p[len("application/vnd.kubernetes.protobuf"):]
            p = p.replace(";stream=watch", "")
        out.append(p)
    return ",".join(dict.fromkeys(out))


class DiffProxy:
    def __init__(self, primary, secondary, log=None):
        self.primary = primary      # Backend
        self.secondary = secondary  # Backend
        self.mapper = Mapper()
        self.diffs = []             # dicts: key, detail, source, request
        self.compared = 0
        self.source = "?"
        self.lock = threading.Lock()   # one exchange at a time: same order on both
        self.log = log
        self.watches = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def terndev_is_primary(self):
        return self.primary.name == "tern-dev"

    def kubeconfig(self, path):
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "diff",
               "clusters": [{"name": "diff", "cluster": {"server": "http://127.0.0.1:%d" %
                                                         self.port}}],
               "users": [{"name": "diff", "user": {}}],
               "contexts": [{"name": "diff", "context": {"cluster": "diff", "user": "diff"}}]}
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        for w in list(self.watches):
            w.set()

    # ---- recording ----
    def record(self, req, diffs):
        for what, detail in diffs:
            self.diffs.append({"key": "%s: %s" % (req.label(), what), "detail": detail,
                               "source": self.source,
                               "request": "%s %s" % (req.method, req.target[:200])})
            if self.log:
                self.log.write(json.dumps(self.diffs[-1]) + "\n")
                self.log.flush()

    def pair(self, a, b):
        """(tern-dev's, kube-apiserver's) of (primary's, secondary's)."""
        return (a, b) if self.terndev_is_primary else (b, a)

    def current_rv(self, req, obj):
        """The secondary's current resourceVersion of the object the request
        targets (for an update carrying a resourceVersion the map does not
        know), or of the collection for a watch or list."""
        r = req.res
        if not r:
            return None
        base = req.path.rsplit("/" + r["sub"], 1)[0] if r["sub"] else req.path
        base = "/".join(self.mapper.fwd.get(p, p) for p in base.split("/"))
        if not r["name"]:
            base += "?limit=1"
        try:
            resp = self.secondary.do("GET", base, [("Accept", "application/json")], b"")
            if resp.obj:
                return (resp.obj.get("metadata") or {}).get("resourceVersion")
        except OSError:
            return None
        return None

    # ---- one request ----
    def handle(self, h):
        n = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(n) if n else b""
        # both are asked for JSON where the client asked protobuf (the
        # answers are compared; a client that asks protobuf takes JSON too)
        headers = [(k, json_accept(v) if k.lower() == "accept" else v)
                   for k, v in h.headers.items() if k.lower() in FORWARD]
        req = Req(h.command, h.path, headers, body)
        if req.watch:
            return self.handle_watch(h, req)
        with self.lock:
            try:
                pa = self.primary.do(req.method, req.target, headers, body)
            except OSError as e:
                h.send_error(502, "primary: %s" % e)
                return
            sheaders = [(k, json_accept(v) if k.lower() == "accept" else v) for k, v in headers]
            try:
                target = self.mapper.translate_target(req, self.current_rv)
                sbody = self.mapper.translate_body(req, self.current_rv)
                sb = self.secondary.do(req.method, target, sheaders, sbody)
            except OSError as e:
                sb = Resp(599, {}, str(e).encode())
            try:
                self.learn(req, pa, sb)
                a, b = self.pair(pa, sb)
                self.compared += 1
                self.record(req, compare(req, a, b, self.mapper, self.terndev_is_primary))
            except Exception:  # a bug of ours must not cost the client its answer
                self.record(req, [("proxy error", traceback.format_exc()[-1500:])])
        self.reply(h, pa)

    def learn(self, req, pa, sb):
        if pa.obj is not None and sb.obj is not None and not is_status(pa.obj):
            self.mapper.learn_objects(pa.obj, sb.obj)
        if req.method == "POST" and 200 <= pa.status < 300 and req.res and not req.res["sub"] \
                and isinstance(pa.obj, dict):
            md = pa.obj.get("metadata") or {}
            self.mapper.created.add((req.res["resource"], md.get("namespace") or "",
                                     md.get("name")))
        if req.method == "PATCH" and req.verb() == "patch(apply)" and pa.status == 201:
            md = pa.obj.get("metadata") or {}
            self.mapper.created.add((req.res["resource"], md.get("namespace") or "",
                                     md.get("name")))

    def reply(self, h, resp):
        h.send_response(resp.status)
        for k, v in resp.headers.items():
            if k in ("content-type", "warning", "retry-after", "location"):
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(resp.body)))
        h.end_headers()
        h.wfile.write(resp.body)

    # ---- watches ----
    def handle_watch(self, h, req):
        stop = threading.Event()
        self.watches.append(stop)
        with self.lock:
            # both opened in order with the other requests
            try:
                pc, pr = self.primary.open(req.method, req.target, req.headers, req.body,
                                           timeout=None)
            except OSError as e:
                h.send_error(502, "primary: %s" % e)
                return
            sheaders = [(k, json_accept(v) if k.lower() == "accept" else v)
                        for k, v in req.headers]
            try:
                target = self.mapper.translate_target(req, self.current_rv)
                sc, sr = self.secondary.open(req.method, target, sheaders, req.body, timeout=None)
            except OSError:
                sc, sr = None, None
        lines_a, lines_b = [], []

        def read_secondary():
            try:
                while True:  # until the stream ends or its socket is shut
                    line = sr.readline()
                    if not line:
                        break
                    lines_b.append(line)
            except Exception:  # noqa: BLE001 - the stream ends however it ends
                pass

        tb = None
        if sr is not None:
            tb = threading.Thread(target=read_secondary, daemon=True)
            tb.start()

        def client_gone():
            # a client that closes its end ends the watch
            try:
                while not stop.is_set():
                    d = h.connection.recv(1, socket.MSG_PEEK)
                    if not d:
                        break
                    time.sleep(0.05)
            except OSError:
                pass
            stop.set()
            try:  # the primary's read returns; the secondary gets its grace below
                pc.sock.shutdown(socket.SHUT_RDWR)
            except (OSError, AttributeError):
                pass
        threading.Thread(target=client_gone, daemon=True).start()
        ok = True
        try:
            h.send_response(pr.status)
            h.send_header("Content-Type", pr.getheader("Content-Type", "application/json"))
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            while not stop.is_set():
                line = pr.readline()
                if not line:
                    break
                lines_a.append(line)
                h.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                h.wfile.flush()
            if not stop.is_set():
                h.wfile.write(b"0\r\n\r\n")
                h.wfile.flush()
        except (OSError, ValueError, http.client.HTTPException):
            ok = False
        # the secondary may lag: a moment to catch up, then the comparison
        stop.set()
        deadline = time.monotonic() + 2.0
        while tb and tb.is_alive() and time.monotonic() < deadline and \
                len(lines_b) < len(lines_a):
            time.sleep(0.05)
        time.sleep(0.3)
        for c in (pc, sc):
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
                c.close()
            except (OSError, AttributeError):
                pass
        if tb:
            tb.join(2)
        ea, eb = watch_events(lines_a), watch_events(lines_b)
        with self.lock:
            try:
                self.learn_watch(ea, eb)
                sa, sb = pr.status, sr.status if sr else 599
                a, b = self.pair((ea, sa), (eb, sb))
                self.compared += 1
                self.record(req, compare_watch(req, a[0], b[0], self.mapper, a[1], b[1],
                                               self.terndev_is_primary))
            except Exception:
                self.record(req, [("proxy error", traceback.format_exc()[-1500:])])
        self.watches.remove(stop)
        if not ok:
            h.close_connection = True

    def learn_watch(self, ea, eb):
        last_b = {}
        for t, o, k in eb:
            if o is not None:
                last_b[key_of(self.mapper.to_primary(o))] = o
        for t, o, k in ea:
            if o is not None and k in last_b and t == "ADDED":
                self.mapper.learn_value((o.get("metadata") or {}).get("uid"),
                                        (last_b[k].get("metadata") or {}).get("uid"))

    def _handler(self):
        proxy = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                pass

            def do_any(self):
                try:
                    proxy.handle(self)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_any
        return H


def b64(s):
    return base64.b64encode(s.encode()).decode()
