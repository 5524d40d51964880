/* apires.h - the table of served resources and API discovery documents.
 *
 * A table lists every resource the server serves: the built-in kinds (a
 * static list) and one entry per served version of each established
 * CustomResourceDefinition. Tables are immutable snapshots shared by
 * reference count: a request takes the current table from the registry,
 * uses it without locks, and puts it back. Changing CRDs installs a new
 * table (apires_registry_set_crds).
 *
 * Storage keys follow kube-apiserver: built-ins under /registry/<resource>
 * (with its historic exceptions: services/specs, minions), custom resources
 * and CRDs under /registry/<group>/<resource>; then /<namespace>/<name> or
 * /<name>.
 */
#ifndef TERN_APIRES_H
#define TERN_APIRES_H

#include <cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

struct apires {
    char *group;    /* "" for core */
    char *version;
    char *plural;
    char *singular;
    char *kind;
    char *list_kind;
    bool namespaced;
    bool has_status;          /* status subresource */
    char **short_names;       /* NULL-terminated */
    char **categories;        /* NULL-terminated */
    char *prefix;             /* etcd key prefix without trailing slash */
    char **fields;            /* extra field-selector paths, NULL-terminated */
    bool review;              /* a review (SelfSubjectAccessReview, SelfSubjectReview):
                               * POST only, answered
                               * from the request, never stored */
    bool core_event;          /* events.k8s.io Events: stored as core/v1 Events (prefix
                               * /registry/events), converted on the way in and out
                               * (apievent.h), as kube-apiserver does */
    /* custom resources only */
    bool crd;
    const cJSON *schema;      /* openAPIV3Schema of this version (borrowed from crds) */
    const cJSON *columns;     /* additionalPrinterColumns or NULL */
    char *storage_version;    /* the version objects are stored in */
    char *crd_name;
};

struct apires_table {
    struct apires *v;
    size_t n;
    cJSON *crds;              /* owned: the CRD objects the CR entries point into */
    int refs;                 /* guarded by the registry mutex */
};

struct apires_registry {
    pthread_mutex_t mu;
    struct apires_table *cur;
};

/* Initialises with the built-in resources only. */
void apires_registry_init(struct apires_registry *r);
void apires_registry_done(struct apires_registry *r);
/* The current table with a reference taken; release with apires_put. */
struct apires_table *apires_get(struct apires_registry *r);
void apires_put(struct apires_registry *r, struct apires_table *t);
/* Installs a table of the built-ins plus the established CRDs in crds (a
 * JSON array of CRD objects; ownership passes to the registry). */
void apires_registry_set_crds(struct apires_registry *r, cJSON *crds);

/* Lookups (NULL when absent). group "" is core. */
const struct apires *apires_find(const struct apires_table *t, const char *group,
                                 const char *version, const char *plural);
/* True if some resource of the table has this group (any version). */
bool apires_has_group(const struct apires_table *t, const char *group);
bool apires_has_group_version(const struct apires_table *t, const char *group,
                              const char *version);

/* The etcd key of an object (ns ignored for cluster-scoped), or of the list
 * prefix (name NULL: ends with '/'; ns NULL for all namespaces). Caller
 * frees. */
char *apires_key(const struct apires *res, const char *ns, const char *name);

/* Discovery documents (caller owns the result). */
cJSON *apires_api_versions(const char *server_address);
cJSON *apires_group_list(const struct apires_table *t);
cJSON *apires_group(const struct apires_table *t, const char *group);
cJSON *apires_resource_list(const struct apires_table *t, const char *group, const char *version);
/* "v1" or "group/version" (caller frees). */
char *apires_api_version(const struct apires *res);

#endif
