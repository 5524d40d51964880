#!/usr/bin/python3
"""tern-dev judged by the official Python client (Debian python3-kubernetes).

CustomObjectsApi: create/get/list/watch/patch/patch_namespaced_custom_object_status
and replace with a stale resourceVersion; CoreV1Api: configmaps and pods
(create, list with selectors and pagination, watch, strategic patch as the
client sends it for dicts); ApiException codes and reasons; a watch from a
resourceVersion older than the server's window that gets 410 and recovers
by relisting (the informer pattern), across a tern-dev restart that keeps
all objects.
"""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from terndev import ROOT, Suite, TernDev, contains, eq, wait_for  # noqa: E402

from kubernetes import client, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

CRD = os.path.join(ROOT, "crds", "agentsessions.tern.dev.yaml")
G, V, P = "tern.dev", "v1alpha1", "agentsessions"


def session(name, objective="x", labels=None):
    md = {"name": name}
    if labels:
        md["labels"] = labels
    return {"apiVersion": "tern.dev/v1alpha1", "kind": "AgentSession", "metadata": md,
            "spec": {"objective": objective}}


def main():
    s = Suite()
    td = TernDev()
    try:
        td.start()
        td.kubectl("apply", "-f", CRD)
        td.kubectl("wait", "--for", "condition=established", "--timeout=20s",
                   "crd/agentsessions.tern.dev")
    except Exception as e:
        print("FAIL start: %s" % e)
        print("0 passed, 1 failed")
        td.cleanup()
        sys.exit(1)
    state = {}

    def apis():
        api = td.api_client()
        return client.CustomObjectsApi(api), client.CoreV1Api(api)

    def t_custom_objects():
        co, _ = apis()
        o = co.create_namespaced_custom_object(G, V, "default", P, session("py1", labels={"a": "b"}))
        eq(o["metadata"]["generation"], 1, "generation")
        eq(o["spec"]["limits"]["maxModelTurns"], 50, "defaults")
        co.create_namespaced_custom_object(G, V, "default", P, session("py2"))
        got = co.get_namespaced_custom_object(G, V, "default", P, "py1")
        eq(got["metadata"]["uid"], o["metadata"]["uid"], "uid")
        lst = co.list_namespaced_custom_object(G, V, "default", P, label_selector="a=b")
        eq([i["metadata"]["name"] for i in lst["items"]], ["py1"], "label selector")
        eq(lst["kind"], "AgentSessionList", "list kind")
        lst = co.list_cluster_custom_object(G, V, P)
        eq(sorted(i["metadata"]["name"] for i in lst["items"]), ["py1", "py2"], "cluster list")
        p = co.patch_namespaced_custom_object(G, V, "default", P, "py1",
                                              {"spec": {"objective": "patched"}})
        eq(p["spec"]["objective"], "patched", "merge patch")
        eq(p["metadata"]["generation"], 2, "generation bump")
        st = co.patch_namespaced_custom_object_status(
            G, V, "default", P, "py1",
            {"status": {"phase": "Running", "observedGeneration": 2,
                        "turn": {"number": 1, "job": "py1-t1", "attempt": 1}}})
        eq(st["status"]["phase"], "Running", "status patch")
        eq(st["metadata"]["generation"], 2, "status patch keeps generation")
        # replace with a stale resourceVersion: 409 Conflict
        stale = dict(got)
        stale["spec"] = {"objective": "stale"}
        try:
            co.replace_namespaced_custom_object(G, V, "default", P, "py1", stale)
            raise AssertionError("stale replace accepted")
        except ApiException as e:
            eq(e.status, 409, "stale replace")
            eq(json.loads(e.body)["reason"], "Conflict", "reason")
        # replace without resourceVersion: 422 on custom resources
        norv = session("py1", "norv")
        try:
            co.replace_namespaced_custom_object(G, V, "default", P, "py1", norv)
            raise AssertionError("replace without resourceVersion accepted")
        except ApiException as e:
            eq(e.status, 422, "replace without RV")
            contains(json.loads(e.body)["message"], "must be specified for an update")
        try:
            co.create_namespaced_custom_object(G, V, "default", P, session("py1"))
            raise AssertionError("duplicate create accepted")
        except ApiException as e:
            eq(e.status, 409, "AlreadyExists")
            eq(json.loads(e.body)["reason"], "AlreadyExists", "reason")
        try:
            co.get_namespaced_custom_object(G, V, "default", P, "nope")
            raise AssertionError("missing object found")
        except ApiException as e:
            eq(e.status, 404, "NotFound")
            b = json.loads(e.body)
            eq(b["details"], {"name": "nope", "group": "tern.dev", "kind": "agentsessions"},
               "details")
        try:
            co.create_namespaced_custom_object(G, V, "default", P,
                                               {**session("py3"), "spec": {"objective": 5}})
            raise AssertionError("invalid object accepted")
        except ApiException as e:
            eq(e.status, 422, "Invalid")
            b = json.loads(e.body)
            eq(b["details"]["causes"][0]["field"], "spec.objective", "cause field")
            eq(b["details"]["causes"][0]["reason"], "FieldValueTypeInvalid", "cause reason")
        d = co.delete_namespaced_custom_object(G, V, "default", P, "py2")
        eq(d["status"], "Success", "delete status")
        eq(d["details"]["kind"], "agentsessions", "delete details")

    def t_custom_watch():
        co, _ = apis()
        lst = co.list_namespaced_custom_object(G, V, "default", P)
        rv = lst["metadata"]["resourceVersion"]
        seen = []

        def run():
            w = watch.Watch()
            for ev in w.stream(co.list_namespaced_custom_object, G, V, "default", P,
                               resource_version=rv, timeout_seconds=10):
                seen.append((ev["type"], ev["object"]["metadata"]["name"]))
                if ev["type"] == "DELETED":
                    w.stop()
        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.5)
        co.create_namespaced_custom_object(G, V, "default", P, session("pw1"))
        co.patch_namespaced_custom_object(G, V, "default", P, "pw1", {"metadata": {"labels": {"x": "y"}}})
        co.delete_namespaced_custom_object(G, V, "default", P, "pw1")
        t.join(15)
        eq(seen, [("ADDED", "pw1"), ("MODIFIED", "pw1"), ("DELETED", "pw1")], "watch events")
        # a selector watch: objects entering and leaving the selection
        seen2 = []
        rv = co.list_namespaced_custom_object(G, V, "default", P)["metadata"]["resourceVersion"]

        def run2():
            w = watch.Watch()
            for ev in w.stream(co.list_namespaced_custom_object, G, V, "default", P,
                               resource_version=rv, label_selector="sel=yes", timeout_seconds=10):
                seen2.append(ev["type"])
                if len(seen2) == 2:
                    w.stop()
        t = threading.Thread(target=run2)
        t.start()
        time.sleep(0.5)
        co.patch_namespaced_custom_object(G, V, "default", P, "py1", {"metadata": {"labels": {"sel": "yes"}}})
        co.patch_namespaced_custom_object(G, V, "default", P, "py1", {"metadata": {"labels": {"sel": "no"}}})
        t.join(15)
        eq(seen2, ["ADDED", "DELETED"], "enter/leave selection")

    def t_core():
        _, core = apis()
        cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="pc1", labels={"app": "py"}),
                                data={"k": "v"})
        core.create_namespaced_config_map("default", cm)
        for i in range(5):
            core.create_namespaced_config_map("default", client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="page-%d" % i, labels={"page": "yes"})))
        lst = core.list_namespaced_config_map("default", label_selector="app=py")
        eq([c.metadata.name for c in lst.items], ["pc1"], "list configmaps")
        names, cont, rvs = [], None, set()
        while True:
            page = core.list_namespaced_config_map("default", label_selector="page=yes", limit=2,
                                                   _continue=cont)
            names += [c.metadata.name for c in page.items]
            rvs.add(page.metadata.resource_version)
            cont = page.metadata._continue
            if not cont:
                break
        eq(names, ["page-%d" % i for i in range(5)], "pagination")
        eq(len(rvs), 1, "constant list resourceVersion across pages")
        p = core.patch_namespaced_config_map("pc1", "default", {"data": {"k2": "v2"}})
        eq(p.data, {"k": "v", "k2": "v2"}, "strategic patch from a dict")
        pod = client.V1Pod(metadata=client.V1ObjectMeta(name="pp1"),
                           spec=client.V1PodSpec(containers=[client.V1Container(
                               name="c", image="busybox:1.36", command=["sleep", "1"])]))
        created = core.create_namespaced_pod("default", pod)
        eq(created.status.phase, "Pending", "pod phase")
        eq(created.spec.restart_policy, "Always", "pod defaults")
        rv = core.list_namespaced_pod("default").metadata.resource_version
        seen = []

        def run():
            w = watch.Watch()
            for ev in w.stream(core.list_namespaced_pod, "default", resource_version=rv,
                               field_selector="metadata.name=pp1", timeout_seconds=10):
                seen.append((ev["type"], ev["object"].metadata.name))
                if ev["type"] == "DELETED":
                    w.stop()
        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.5)
        core.patch_namespaced_pod_status("pp1", "default", {"status": {"message": "patched"}})
        core.delete_namespaced_pod("pp1", "default", grace_period_seconds=0)
        t.join(15)
        # (a kubelet, when one runs, adds MODIFIED events of its own)
        eq(seen[0], ("MODIFIED", "pp1"), "pod watch: status patch")
        eq(seen[-1], ("DELETED", "pp1"), "pod watch: delete")
        eq(set(seen[1:-1]) <= {("MODIFIED", "pp1")}, True, "pod watch: %r" % seen)
        # initial state: a watch without resourceVersion starts with ADDED events
        w = watch.Watch()
        first = []
        for ev in w.stream(core.list_namespaced_config_map, "default", label_selector="page=yes",
                           timeout_seconds=2):
            first.append(ev["type"])
            if len(first) == 5:
                w.stop()
        eq(first, ["ADDED"] * 5, "synthetic ADDED")
        state["old_rv"] = core.list_namespaced_config_map("default").metadata.resource_version

    def t_restart_and_410():
        _, core = apis()
        # a watch open while tern-dev stops must end, not hang
        ended = threading.Event()

        def run():
            try:
                w = watch.Watch()
                for _ in w.stream(core.list_namespaced_config_map, "default",
                                  resource_version=state["old_rv"], timeout_seconds=60):
                    pass
            except Exception:
                pass
            ended.set()
        t = threading.Thread(target=run, daemon=True)
        t.start()
        time.sleep(0.5)
        td.stop()
        eq(ended.wait(10), True, "watch ended when the server stopped")
        server = open(td.kubeconfig).read().split("server: ")[1].split()[0]
        td.start()
        # with --port 0 a restart keeps the previous port when it is free, so
        # clients holding the old configuration carry on
        eq(open(td.kubeconfig).read().split("server: ")[1].split()[0], server, "same address")
        got = core.read_namespaced_config_map("pc1", "default")
        eq(got.data, {"k": "v", "k2": "v2"}, "objects survive a restart")
        # the old resourceVersion is outside the new server's window: 410
        try:
            w = watch.Watch()
            for _ in w.stream(core.list_namespaced_config_map, "default",
                              resource_version=str(int(state["old_rv"]) - 3), timeout_seconds=3):
                pass
            raise AssertionError("no 410 for an expired resourceVersion")
        except ApiException as e:
            eq(e.status, 410, "expired watch")
        # relist, then watch from the list's resourceVersion
        lst = core.list_namespaced_config_map("default")
        seen = []

        def run2():
            w = watch.Watch()
            for ev in w.stream(core.list_namespaced_config_map, "default",
                               resource_version=lst.metadata.resource_version, timeout_seconds=10):
                seen.append((ev["type"], ev["object"].metadata.name))
                w.stop()
        t = threading.Thread(target=run2)
        t.start()
        time.sleep(0.5)
        core.create_namespaced_config_map("default", client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="after-410")))
        t.join(15)
        eq(seen, [("ADDED", "after-410")], "watch after relist")

    s.run("CustomObjectsApi create/get/list/patch/status/errors", t_custom_objects)
    s.run("CustomObjectsApi watch (events, selector enter/leave)", t_custom_watch)
    s.run("CoreV1Api configmaps and pods (list, paginate, patch, watch)", t_core)
    s.run("restart under a watch; 410 and relist", t_restart_and_410)
    s.run("clean SIGTERM stop", td.check_clean_stop)
    td.cleanup()
    s.finish()


if __name__ == "__main__":
    main()
