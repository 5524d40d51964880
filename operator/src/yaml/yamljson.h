/* yamljson.h - YAML -> JSON (cJSON trees) over libyaml's event API.
 *
 * For Kubernetes manifests and kubeconfig files. The conversion follows what
 * `kubectl` sends to the API server (sigs.k8s.io/yaml over go-yaml v2, i.e.
 * YAML 1.1 resolution of plain scalars), with the differences listed in
 * docs/yaml.md. In brief:
 *   - plain scalars: null (`~ null Null NULL` or empty), booleans
 *     (`true/false/yes/no/on/off/y/n` in the go-yaml v2 spellings), integers
 *     (decimal, 0x, 0o, 0b, leading-0 octal, `_` separators; kept exact in
 *     the item's valuestring as decimal digits, like json.h), floats; anything
 *     else is a string. Quoted and block scalars are always strings.
 *   - tags: !!str !!int !!float !!bool !!null force a type (an impossible
 *     conversion is an error); !!binary and !!timestamp keep the text as a
 *     string; !!map/!!seq must match the node; other tags are ignored.
 *   - anchors and aliases: an alias is expanded into a deep copy. Aliases per
 *     stream, nodes and string bytes after expansion, depth after expansion are
 *     bounded (TERN_YAML_* in limits.h), which defeats "billion laughs".
 *   - merge keys `<<` (a mapping or a sequence of mappings) are supported; keys
 *     written in the mapping win over merged ones, earlier sources over later.
 *   - duplicate keys are an error naming the path ("spec.limits.cpu").
 *   - mapping keys must be scalars and are taken verbatim as strings.
 *   - .inf/.nan (not representable in JSON) and NUL characters are errors.
 * Errors carry "line L:C" (1-based) of the offending event in err->msg.
 * Returned trees are owned by the caller (cJSON_Delete); number items keep
 * their exact text in valuestring, so json_item_int64/json_print from json.h
 * stay exact.
 */
#ifndef TERN_YAMLJSON_H
#define TERN_YAMLJSON_H

#include "base/err.h"

#include <cJSON.h>
#include <stddef.h>

/* Bounds; 0 in any field selects the TERN_YAML_* default from limits.h. */
struct yamljson_opts {
    size_t max_bytes;          /* input size */
    int max_depth;             /* nesting of mappings/sequences, after expansion */
    unsigned max_aliases;      /* alias references per stream */
    size_t max_nodes;          /* nodes created per stream, after expansion */
    size_t max_expanded_bytes; /* scalar and key bytes per stream, after expansion */
    unsigned max_docs;         /* documents per stream */
};

/* Parses a YAML stream of any number of documents. Returns 0 and *ret, a
 * cJSON array holding one item per non-empty document in order (documents
 * that are empty or null are skipped, as kubectl does); or TERN_EPARSE (syntax,
 * duplicate key, bad tag, unrepresentable value) / TERN_ETOOLARGE (a bound)
 * with the position and reason in err. o may be NULL. */
int yamljson_parse_stream(const char *s, size_t n, const struct yamljson_opts *o, cJSON **ret,
                          struct tern_err *err);

/* Parses a stream that must hold at most one document. Returns 0 and *ret
 * (the document's value; a cJSON null item when the stream has no document or
 * the document is empty), TERN_EPARSE if there is more than one document, or
 * the errors of yamljson_parse_stream. o may be NULL. */
int yamljson_parse_one(const char *s, size_t n, const struct yamljson_opts *o, cJSON **ret,
                       struct tern_err *err);

#endif
