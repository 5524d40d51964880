#!/usr/bin/python3
"""Validates recorded Chat Completions request bodies (one JSON per line)
against the official OpenAI OpenAPI schema
#/components/schemas/CreateChatCompletionRequest.

usage: openai_schema.py RECORD.jsonl [more.jsonl ...]

The spec is read from $TERN_SHARED_DIR/specs/openai-openapi.json (or
$TERN_SHARED_DIR/openai-openapi.json), else ../shared/specs/ relative to the
repository root; it is never copied into the repository. OpenAPI 3.1 schemas
are JSON Schema 2020-12: the spec's components are used as the root resource,
so every "#/components/schemas/..." $ref resolves in place.

Exit 0: every body valid (and the negative controls rejected); 1: invalid
bodies (printed); 77: spec not found; 2: usage.
"""
import json
import os
import sys

import jsonschema

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def spec_candidates():
    cands = []
    shared = os.environ.get("TERN_SHARED_DIR")
    if shared:
        cands += [os.path.join(shared, "specs", "openai-openapi.json"),
                  os.path.join(shared, "openai-openapi.json")]
    cands.append(os.path.normpath(os.path.join(REPO, "..", "shared", "specs",
                                               "openai-openapi.json")))
    return cands


def find_spec():
    for c in spec_candidates():
        if os.path.isfile(c):
            return c
    return None


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = find_spec()
    if not path:
        print("openai_schema: OpenAI spec data not found, schema check skipped "
              "(looked for %s; set TERN_SHARED_DIR to a directory holding "
              "specs/openai-openapi.json)" % ", ".join(spec_candidates()), file=sys.stderr)
        return 77
    with open(path) as f:
        spec = json.load(f)
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": "#/components/schemas/CreateChatCompletionRequest",
        "components": spec["components"],
    }
    v = jsonschema.Draft202012Validator(schema)

    # negative controls: the validator must reject these, or it checks nothing
    controls = [
        {"model": "m", "messages": []},
        {"model": "m", "messages": [{"role": "tool", "content": "x"}]},
        {"model": "m", "messages": [{"role": "wizard", "content": "x"}]},
        {"messages": [{"role": "user", "content": "x"}]},
    ]
    for c in controls:
        if v.is_valid(c):
            print("openai_schema: negative control accepted: %s" % json.dumps(c))
            return 1

    bad = 0
    total = 0
    for rec in argv[1:]:
        with open(rec) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                total += 1
                body = json.loads(line)
                errs = sorted(v.iter_errors(body), key=lambda e: list(e.path))
                if errs:
                    bad += 1
                    best = jsonschema.exceptions.best_match(errs)
                    print("%s:%d: invalid at %s: %s" % (rec, n, "/".join(map(str, best.path)),
                                                        best.message[:300]))
    if total == 0:
        print("openai_schema: no request bodies recorded")
        return 1
    print("openai_schema: %d bodies, %d invalid (spec %s)" % (total, bad, path))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
