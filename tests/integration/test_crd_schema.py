#!/usr/bin/python3
"""Checks crds/agentsessions.tern.dev.yaml the way kube-apiserver would.

1. CRD shape: names, scope, one storage version, status subresource, printer
   columns (types, and that each jsonPath names a schema field of that type).
2. apiextensions v1 structural-schema rules: root type object; every property
   and array item typed unless x-kubernetes-int-or-string /
   x-kubernetes-preserve-unknown-fields; no $ref, definitions, dependencies,
   patternProperties, additionalItems, id, uniqueItems: true, type: null;
   metadata constrained only in name/generateName; list-type rules; CEL rules
   with a `rule` and a single-line message, transition rules only where the
   old value can be correlated; defaults valid against their schema.
3. Our own rules: every field described and bounded (strings maxLength,
   arrays maxItems, integers minimum), so CEL cost estimates stay small.
4. Every AgentSession in examples/ validates against the schema (converted to
   JSON Schema: x-kubernetes-* removed, int-or-string as integer|string,
   unknown fields rejected as kubectl's strict field validation does, list-type
   set/map uniqueness emulated), and every manifest in
   tests/data/invalid-sessions/ fails exactly at the field its header names
   (`# path:`); cases only CEL can catch (`# schema: cel:<location>`) must pass
   the OpenAPI part and have a CEL rule at that location.

Prints one line per check and "N passed, N failed".
"""
import copy
import glob
import os
import sys
import traceback

import jsonschema
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CRD_PATH = os.path.join(ROOT, "crds", "agentsessions.tern.dev.yaml")

ALLOWED_KEYS = {
    "type", "format", "title", "description", "default", "maximum", "exclusiveMaximum",
    "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems",
    "minItems", "uniqueItems", "multipleOf", "enum", "maxProperties", "minProperties",
    "required", "items", "allOf", "oneOf", "anyOf", "not", "properties",
    "additionalProperties", "nullable", "example", "externalDocs",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string", "x-kubernetes-list-map-keys", "x-kubernetes-list-type",
    "x-kubernetes-map-type", "x-kubernetes-validations",
}
FORBIDDEN_KEYS = {"$ref", "definitions", "dependencies", "patternProperties", "additionalItems",
                  "id", "$schema"}
TYPES = {"object", "array", "string", "integer", "number", "boolean"}

passed = 0
failed = 0


def check(name):
    def deco(fn):
        global passed, failed
        try:
            fn()
            print(f"ok   {name}")
            passed += 1
        except Exception as e:  # noqa: BLE001 - report any failure
            print(f"FAIL {name}: {e}")
            if not isinstance(e, AssertionError):
                traceback.print_exc()
            failed += 1
        return fn
    return deco


def load_yaml_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


CRD = load_yaml_docs(CRD_PATH)[0]
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]


def fmt_path(parts):
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out


def walk(node, path, fn, in_items=False, correlatable=True):
    """Calls fn(node, path, correlatable) on every schema node."""
    fn(node, path, correlatable)
    for k, sub in (node.get("properties") or {}).items():
        walk(sub, path + [k], fn, in_items, correlatable)
    if isinstance(node.get("items"), dict):
        items_correlatable = correlatable and node.get("x-kubernetes-list-type") == "map"
        walk(node["items"], path + ["[]"], fn, True, items_correlatable)
    if isinstance(node.get("additionalProperties"), dict):
        walk(node["additionalProperties"], path + ["*"], fn, in_items, correlatable)
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(key) or []:
            walk(sub, path, fn, in_items, correlatable)


def schema_at(loc):
    """The schema node at a dotted location; "x[]" is x's items."""
    node = SCHEMA
    for part in loc.split("."):
        items = part.endswith("[]")
        name = part[:-2] if items else part
        node = node["properties"][name]
        if items:
            node = node["items"]
    return node


def strip_enum(node):
    n = dict(node)
    n.pop("enum", None)
    n.pop("default", None)
    return n


def to_jsonschema(node, top=True, path=()):
    """OpenAPI v3 (Kubernetes subset) -> JSON Schema draft 7."""
    out = {}
    for k, v in node.items():
        if k.startswith("x-kubernetes-") or k in ("default", "nullable", "example", "format"):
            continue
        if k == "properties":
            out[k] = {pk: to_jsonschema(pv, False, path + (pk,)) for pk, pv in v.items()}
        elif k == "items":
            out[k] = to_jsonschema(v, False, path + ("[]",))
        elif k in ("allOf", "anyOf", "oneOf"):
            out[k] = [to_jsonschema(s, False, path) for s in v]
        elif k == "additionalProperties" and isinstance(v, dict):
            out[k] = to_jsonschema(v, False, path + ("*",))
        else:
            out[k] = copy.deepcopy(v)
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    # strict field validation (kubectl's default): unknown fields are errors,
    # except inside metadata, which is ObjectMeta
    if "properties" in node and path != ("metadata",) and \
            not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out



# ---- 1. CRD shape ----

@check("crd names, scope, versions, subresources")
def _():
    assert CRD["apiVersion"] == "apiextensions.k8s.io/v1", CRD["apiVersion"]
    assert CRD["kind"] == "CustomResourceDefinition"
    spec = CRD["spec"]
    names = spec["names"]
    assert CRD["metadata"]["name"] == f"{names['plural']}.{spec['group']}", CRD["metadata"]["name"]
    assert spec["group"] == "tern.dev" and "." in spec["group"]
    assert spec["scope"] == "Namespaced"
    assert names["kind"] == "AgentSession" and names["listKind"] == "AgentSessionList"
    assert names["listKind"] != names["kind"]
    assert names["singular"] == "agentsession" and names["plural"] == "agentsessions"
    assert names["shortNames"] == ["ags"], names.get("shortNames")
    assert "tern" in names["categories"]
    versions = spec["versions"]
    assert len({v["name"] for v in versions}) == len(versions), "duplicate version names"
    assert sum(1 for v in versions if v.get("storage")) == 1, "exactly one storage version"
    assert VERSION["name"] == "v1alpha1" and VERSION["served"] and VERSION["storage"]
    assert VERSION["subresources"] == {"status": {}}, VERSION.get("subresources")
    for v in versions:
        assert "openAPIV3Schema" in v["schema"], v["name"]


@check("printer columns are valid and point at typed fields")
def _():
    cols = VERSION["additionalPrinterColumns"]
    want = {"PHASE": (".status.phase", "string"), "TURN": (".status.turn.number", "integer"),
            "TOOLS": (".status.usage.toolCalls", "integer"),
            "APPROVAL": (".status.pendingApproval.id", "string"),
            "REASON": (".status.reason", "string"),
            "AGE": (".metadata.creationTimestamp", "date"),
            "MESSAGE": (".status.message", "string")}
    got = {}
    for c in cols:
        for k in ("name", "type", "jsonPath"):
            assert c.get(k), f"printer column {c} lacks {k}"
        assert c["type"] in {"integer", "number", "string", "boolean", "date"}, c
        got[c["name"].upper()] = (c["jsonPath"], c["type"])
        if c["jsonPath"].startswith(".metadata."):
            continue
        node = schema_at(c["jsonPath"][1:])
        ftype = node.get("type")
        expect = {"integer": "integer", "string": "string", "number": "number",
                  "boolean": "boolean", "date": "string"}[c["type"]]
        assert ftype == expect, f"{c['name']}: field type {ftype}, column type {c['type']}"
    assert got == want, got


# ---- 2. structural rules ----

@check("structural: root, types, forbidden keys, list types, defaults")
def _():
    errs = []
    assert SCHEMA.get("type") == "object", "root must be type: object"
    assert "additionalProperties" not in SCHEMA, "root must not set additionalProperties"

    def visit(node, path, _corr):
        p = fmt_path(path) or "<root>"
        for k in node:
            if k in FORBIDDEN_KEYS:
                errs.append(f"{p}: forbidden key {k}")
            elif k not in ALLOWED_KEYS:
                errs.append(f"{p}: unknown key {k}")
        if node.get("uniqueItems") is True:
            errs.append(f"{p}: uniqueItems: true is forbidden")
        if "type" in node and node["type"] not in TYPES:
            errs.append(f"{p}: bad type {node['type']!r}")
        if "x-kubernetes-preserve-unknown-fields" in node and \
                node["x-kubernetes-preserve-unknown-fields"] is not True:
            errs.append(f"{p}: x-kubernetes-preserve-unknown-fields must be true or absent")
        ios = node.get("x-kubernetes-int-or-string")
        if ios is not None and ios is not True:
            errs.append(f"{p}: x-kubernetes-int-or-string must be true or absent")
        if ios and "type" in node:
            errs.append(f"{p}: int-or-string must not set type")
        if not ios and not node.get("x-kubernetes-preserve-unknown-fields") and "type" not in node:
            errs.append(f"{p}: no type")
        if node.get("type") == "array" and not isinstance(node.get("items"), dict):
            errs.append(f"{p}: array without a single items schema")
        if "properties" in node and "additionalProperties" in node:
            errs.append(f"{p}: properties and additionalProperties together")
        if "properties" in node and node.get("type") != "object":
            errs.append(f"{p}: properties on a non-object")
        lt = node.get("x-kubernetes-list-type")
        if lt is not None:
            if node.get("type") != "array" or lt not in ("atomic", "set", "map"):
                errs.append(f"{p}: bad x-kubernetes-list-type {lt}")
            items = node.get("items", {})
            if lt == "set" and items.get("type") in ("object", "array"):
                errs.append(f"{p}: list-type set needs scalar items")
            if lt == "map":
                keys = node.get("x-kubernetes-list-map-keys") or []
                if not keys or items.get("type") != "object":
                    errs.append(f"{p}: list-type map needs object items and list-map-keys")
                for k in keys:
                    if k not in (items.get("properties") or {}):
                        errs.append(f"{p}: map key {k} is not a property")
                    elif k not in (items.get("required") or []) and \
                            "default" not in items["properties"][k]:
                        errs.append(f"{p}: map key {k} must be required or defaulted")
        elif "x-kubernetes-list-map-keys" in node:
            errs.append(f"{p}: list-map-keys without list-type map")
        for req in node.get("required") or []:
            if req not in (node.get("properties") or {}):
                errs.append(f"{p}: required {req} is not a property")
        if "enum" in node:
            for v in node["enum"]:
                try:
                    jsonschema.validate(v, to_jsonschema(strip_enum(node), top=False))
                except jsonschema.ValidationError as e:
                    errs.append(f"{p}: enum value {v!r}: {e.message}")
        if "default" in node:
            try:
                jsonschema.validate(node["default"], to_jsonschema(node, top=False))
            except jsonschema.ValidationError as e:
                errs.append(f"{p}: default {node['default']!r} is invalid: {e.message}")

    walk(SCHEMA, [], visit)
    assert not errs, "\n    ".join([""] + errs)


@check("structural: metadata constrained only in name/generateName")
def _():
    md = SCHEMA["properties"]["metadata"]
    assert set(md) <= {"type", "properties"}, f"metadata sets {sorted(set(md))}"
    assert md["type"] == "object"
    for k, v in (md.get("properties") or {}).items():
        assert k in ("name", "generateName"), f"metadata.{k} must not be constrained"
        assert v.get("type") == "string", f"metadata.{k} must be a string"
        assert not (set(v) - {"type", "description", "maxLength", "minLength", "pattern"}), v

    def no_nested_metadata(node, path, _corr):
        if path and path[-1] == "metadata" and len(path) > 1:
            raise AssertionError(f"{fmt_path(path)}: nested metadata constrained")
    walk(SCHEMA, [], no_nested_metadata)


@check("CEL rules: rule set, single-line messages, transition rules correlatable")
def _():
    errs = []
    count = 0

    def visit(node, path, corr):
        nonlocal count
        for r in node.get("x-kubernetes-validations") or []:
            count += 1
            p = fmt_path(path)
            rule = r.get("rule")
            if not isinstance(rule, str) or not rule.strip():
                errs.append(f"{p}: rule missing")
                continue
            if set(r) - {"rule", "message", "messageExpression", "reason", "fieldPath",
                         "optionalOldSelf"}:
                errs.append(f"{p}: unknown keys {set(r)}")
            msg = r.get("message")
            if msg is not None and ("\n" in msg or not msg.strip()):
                errs.append(f"{p}: message must be one non-empty line")
            if "\n" in rule.strip() and not msg:
                errs.append(f"{p}: a multi-line rule needs a message")
            if rule.count("(") != rule.count(")") or rule.count("'") % 2:
                errs.append(f"{p}: unbalanced rule {rule}")
            if "oldSelf" in rule and not corr:
                errs.append(f"{p}: transition rule where the old value cannot be correlated")
    walk(SCHEMA, [], visit)
    assert count >= 6, f"only {count} CEL rules"
    assert not errs, "\n    ".join([""] + errs)
    # the two promised rules are there
    fork = schema_at("spec.forkFrom")["x-kubernetes-validations"]
    assert any(r["rule"] == "self == oldSelf" for r in fork), fork
    msgs = schema_at("spec.messages")["x-kubernetes-validations"]
    assert any("oldSelf" in r["rule"] and "size(self) >= size(oldSelf)" in r["rule"]
               for r in msgs), msgs


@check("every field described and bounded")
def _():
    errs = []

    def visit(node, path, _corr):
        p = fmt_path(path)
        if path and path[-1] != "[]" and path != ["metadata"] and not node.get("description"):
            errs.append(f"{p}: no description")
        t = node.get("type")
        if t == "string" and path not in (["apiVersion"], ["kind"]) and "maxLength" not in node and "enum" not in node and \
                node.get("format") != "date-time":
            errs.append(f"{p}: string without maxLength")
        if t == "array" and "maxItems" not in node:
            errs.append(f"{p}: array without maxItems")
        if t == "integer" and "minimum" not in node:
            errs.append(f"{p}: integer without minimum")
    walk(SCHEMA, [], visit)
    assert not errs, "\n    ".join([""] + errs)


# ---- 3. validation of manifests ----

JSON_SCHEMA = to_jsonschema(SCHEMA)
VALIDATOR = jsonschema.Draft7Validator(JSON_SCHEMA)


def list_type_errors(node, value, path):
    """Duplicate entries in list-type set/map lists (apiserver: Duplicate value)."""
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            sub = (node.get("properties") or {}).get(k)
            if sub:
                out += list_type_errors(sub, v, path + [k])
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        lt = node.get("x-kubernetes-list-type")
        seen = []
        for i, v in enumerate(value):
            key = v if lt == "set" else (
                tuple(v.get(k) for k in node.get("x-kubernetes-list-map-keys", []))
                if lt == "map" and isinstance(v, dict) else None)
            if lt in ("set", "map") and key is not None:
                if key in seen:
                    out.append((path + [i], "Duplicate value"))
                seen.append(key)
            out += list_type_errors(node["items"], v, path + [i])
    return out


def errors_of(doc):
    """(path, message) of every schema error of an AgentSession document."""
    out = []
    for e in VALIDATOR.iter_errors(doc):
        parts = list(e.absolute_path)
        if e.validator == "required":
            missing = [r for r in e.validator_value if r not in e.instance]
            parts.append(missing[0])
        elif e.validator == "additionalProperties" and e.validator_value is False:
            extra = sorted(set(e.instance) - set(e.schema.get("properties", {})))
            parts.append(extra[0])
        out.append((fmt_path(parts), e.message))
    out += [(fmt_path(p), m) for p, m in list_type_errors(SCHEMA, doc, [])]
    return out


def sessions_in(path):
    return [d for d in load_yaml_docs(path) if d.get("kind") == "AgentSession"]


EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.yaml")))
INVALID = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "invalid-sessions", "*.yaml")))


@check("examples exist (minimal, approvals-and-limits, context-skills-memory)")
def _():
    names = {os.path.basename(p) for p in EXAMPLES}
    for want in ("minimal.yaml", "approvals-and-limits.yaml", "context-skills-memory.yaml"):
        assert want in names, f"examples/{want} missing"


for _path in EXAMPLES:
    @check(f"example {os.path.basename(_path)} is valid")
    def _(path=_path):
        docs = load_yaml_docs(path)
        sessions = [d for d in docs if d.get("kind") == "AgentSession"]
        assert sessions, "no AgentSession in the file"
        configmaps = {(d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs
                      if d.get("kind") == "ConfigMap"}
        for d in docs:
            assert d.get("apiVersion") and d.get("kind") and d.get("metadata", {}).get("name"), d
        for s in sessions:
            assert s["apiVersion"] == "tern.dev/v1alpha1", s["apiVersion"]
            errs = errors_of(s)
            assert not errs, errs
            # ConfigMaps referenced by a multi-document example are in the file
            if len(docs) > 1:
                spec = s["spec"]
                ns = s["metadata"].get("namespace")
                refs = [f["configMapRef"]["name"] for f in spec.get("context", {}).get("files", [])]
                refs += [k["configMapRef"]["name"] for k in spec.get("skills", [])]
                if "memory" in spec:
                    refs.append(spec["memory"]["configMapRef"]["name"])
                for r in refs:
                    assert (ns, r) in configmaps, f"ConfigMap {r} not in {path}"


@check("invalid-sessions set is there")
def _():
    assert len(INVALID) >= 20, f"only {len(INVALID)} invalid manifests"


def header(path):
    h = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("# "):
                break
            k, _, v = line[2:].partition(":")
            h[k.strip()] = v.strip()
    return h


for _path in INVALID:
    @check(f"invalid {os.path.basename(_path)} fails at its field")
    def _(path=_path):
        h = header(path)
        assert "path" in h and "error" in h, f"header lacks path/error: {h}"
        (doc,) = sessions_in(path)
        errs = errors_of(doc)
        schema = h.get("schema", "")
        if schema.startswith("cel:"):
            # OpenAPI accepts it; a CEL rule at the named location rejects it
            assert not errs, f"expected only CEL to catch this, got {errs}"
            node = schema_at(schema[4:])
            assert node.get("x-kubernetes-validations"), f"no CEL rule at {schema[4:]}"
            return
        assert errs, "accepted by the schema"
        paths = {p for p, _ in errs}
        assert paths == {h["path"]}, f"errors at {sorted(paths)}, expected only {h['path']}: {errs}"


@check("the schema rejects what it should (sanity: a valid doc turned invalid)")
def _():
    (doc,) = sessions_in(os.path.join(ROOT, "examples", "minimal.yaml"))
    assert not errors_of(doc)
    doc = copy.deepcopy(doc)
    doc["spec"]["limits"] = {"maxModelTurns": 0}
    assert errors_of(doc) == [("spec.limits.maxModelTurns", errors_of(doc)[0][1])]


print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
