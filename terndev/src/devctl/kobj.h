/* kobj.h - small helpers over Kubernetes objects held as cJSON trees.
 *
 * Paths are dotted member names ("metadata.name", "spec.template.spec");
 * no array indexing. Getters borrow from the tree and never allocate; setters
 * create missing intermediate objects and replace existing members (values
 * are copied). Times are Unix seconds; RFC 3339 "YYYY-MM-DDTHH:MM:SSZ" on the
 * wire. Integers are read exactly (json_item_int64) and written exactly.
 */
#ifndef TERN_KOBJ_H
#define TERN_KOBJ_H

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>

/* The member at a dotted path, or NULL. */
const cJSON *kobj_at(const cJSON *o, const char *path);
/* The string at path, or NULL when absent or not a string. */
const char *kobj_str(const cJSON *o, const char *path);
/* The integer at path, or def when absent or not an exact integer. */
int64_t kobj_int(const cJSON *o, const char *path, int64_t def);
/* The boolean at path, or def. */
bool kobj_bool(const cJSON *o, const char *path, bool def);
/* True when path is present and not null. */
bool kobj_has(const cJSON *o, const char *path);

/* The object at path, created (with intermediates) when missing or not an
 * object. Never NULL. */
cJSON *kobj_obj(cJSON *o, const char *path);
void kobj_set_str(cJSON *o, const char *path, const char *v);
void kobj_set_int(cJSON *o, const char *path, int64_t v);
void kobj_set_bool(cJSON *o, const char *path, bool v);
/* Sets path to item (ownership of item passes to o). */
void kobj_set_item(cJSON *o, const char *path, cJSON *item);
/* Removes path if present. */
void kobj_del(cJSON *o, const char *path);

/* metadata.labels[key] or NULL. */
const char *kobj_label(const cJSON *o, const char *key);
/* metadata.finalizers membership / add (no duplicate) / remove (returns true
 * when something was removed). */
bool kobj_has_finalizer(const cJSON *o, const char *f);
void kobj_add_finalizer(cJSON *o, const char *f);
bool kobj_remove_finalizer(cJSON *o, const char *f);
/* True when metadata.deletionTimestamp is set. */
bool kobj_deleting(const cJSON *o);

/* The ownerReferences entry with controller=true, or NULL. */
const cJSON *kobj_controller_ref(const cJSON *o);
/* True when o has an ownerReference (any) with this uid. */
bool kobj_has_owner_uid(const cJSON *o, const char *uid);
/* A new ownerReference {apiVersion, kind, name, uid, controller, blockOwnerDeletion}
 * pointing at owner. */
cJSON *kobj_owner_ref(const cJSON *owner, bool controller, bool block);

/* Formats t as RFC 3339 UTC into out (at least 32 bytes); returns out. */
char *kobj_fmt_time(int64_t t, char out[32]);
/* Parses RFC 3339 ("...Z", optional fraction, or +hh:mm offset): 0 or
 * -EINVAL. */
int kobj_parse_time(const char *s, int64_t *ret);
/* The time at path, or def when absent or malformed. */
int64_t kobj_time(const cJSON *o, const char *path, int64_t def);

/* status.conditions entry of this type, or NULL. */
const cJSON *kobj_cond(const cJSON *o, const char *type);
/* True when the condition of this type has status "True". */
bool kobj_cond_true(const cJSON *o, const char *type);
/* Sets (adds or updates) a condition in status.conditions: type, status,
 * reason, message, lastProbeTime/lastUpdateTime untouched; lastTransitionTime
 * = now only when status changes (or the condition is new). Returns true when
 * anything changed. */
bool kobj_set_cond(cJSON *o, const char *type, const char *status, const char *reason,
                   const char *message, int64_t now);

/* metav1.LabelSelector (matchLabels, matchExpressions with In, NotIn, Exists,
 * DoesNotExist) against a labels object (may be NULL). A NULL selector
 * matches nothing; an empty one matches everything. */
bool kobj_selector_matches(const cJSON *selector, const cJSON *labels);

/* True when two trees print identically (key order matters). */
bool kobj_equal(const cJSON *a, const cJSON *b);

#endif
