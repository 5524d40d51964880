"""kubeapi - raw Kubernetes API requests from a kubeconfig (not a suite).

For tests that look at what a server answers exactly (status code, Status
reason, causes and their fields, headers), which kubectl and the official
client hide. Standard library only. Supports the kubeconfigs of both
clusters: client certificates (inline data, the real control plane) and
bearer tokens (tern-dev), https with the cluster CA or plain http.

    api = Api(kubeconfig)
    code, body, headers = api.request("POST", "/api/v1/namespaces", {...},
                                      impersonate=("bob", ["devs"]))
"""
import base64
import http.client
import json
import os
import ssl
import tempfile
import urllib.parse

import yaml


class Api:
    def __init__(self, kubeconfig):
        with open(kubeconfig) as f:
            kc = yaml.safe_load(f)
        ctx_name = kc.get("current-context")
        ctx = next(c["context"] for c in kc["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in kc["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in kc["users"] if u["name"] == ctx["user"])
        u = urllib.parse.urlsplit(cluster["server"])
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port or (443 if self.https else 80)
        self.token = user.get("token")
        self.tmp = tempfile.mkdtemp(prefix="kubeapi-")
        self.ssl = None
        if self.https:
            self.ssl = ssl.create_default_context()
            ca = cluster.get("certificate-authority-data")
            if ca:
                self.ssl.load_verify_locations(cadata=base64.b64decode(ca).decode())
            elif cluster.get("certificate-authority"):
                self.ssl.load_verify_locations(cluster["certificate-authority"])
            elif cluster.get("insecure-skip-tls-verify"):
                self.ssl.check_hostname = False
                self.ssl.verify_mode = ssl.CERT_NONE
            cert, key = self._file(user, "client-certificate"), self._file(user, "client-key")
            if cert and key:
                self.ssl.load_cert_chain(cert, key)

    def _file(self, user, what):
        if user.get(what + "-data"):
            path = os.path.join(self.tmp, what)
            with open(path, "wb") as f:
                f.write(base64.b64decode(user[what + "-data"]))
            os.chmod(path, 0o600)
            return path
        return user.get(what)

    def connect(self, timeout=60):
        if self.https:
            return http.client.HTTPSConnection(self.host, self.port, context=self.ssl,
                                               timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def headers(self, impersonate=None, content_type=None, accept="application/json"):
        h = {"Accept": accept}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if content_type:
            h["Content-Type"] = content_type
        if impersonate:
            h["Impersonate-User"] = impersonate[0]
            # http.client sends one header per key; kube-apiserver reads
            # repeated Impersonate-Group headers, so groups go one by one
            # through putheader in request()
        return h

    def request(self, method, path, body=None, impersonate=None,
                content_type="application/json", accept="application/json", timeout=60):
        """Returns (status code, parsed JSON body or raw text, headers dict)."""
        c = self.connect(timeout)
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            if isinstance(data, str):
                data = data.encode()
        c.putrequest(method, path)
        for k, v in self.headers(impersonate, content_type if data is not None else None,
                                 accept).items():
            c.putheader(k, v)
        if impersonate:
            for g in impersonate[1]:
                c.putheader("Impersonate-Group", g)
        if data is not None:
            c.putheader("Content-Length", str(len(data)))
        c.endheaders(data)
        r = c.getresponse()
        raw = r.read()
        c.close()
        try:
            out = json.loads(raw)
        except ValueError:
            out = raw.decode(errors="replace")
        return r.status, out, {k.lower(): v for k, v in r.getheaders()}


def causes(status):
    """[(reason, field)] of a Status body, sorted."""
    if not isinstance(status, dict):
        return []
    return sorted((c.get("reason", ""), c.get("field", ""))
                  for c in (status.get("details") or {}).get("causes") or [])
