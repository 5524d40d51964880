/* egmap.h - who is behind a source address: sandbox pods and the sessions
 * they belong to, as the API says (thread-safe index, no I/O).
 *
 * The proxy's informers feed it pods labelled tern.dev/role=sandbox and
 * AgentSessions; egmap_lookup maps a connection's source address to the
 * session whose allowlist decides it. Nothing the client sends is used.
 *
 * A pod counts as the sandbox of session S (namespace N) only when all of
 * these hold, so a pod someone else creates cannot borrow S's allowlist
 * while S's own sandbox runs:
 *   - labels tern.dev/role=sandbox, tern.dev/session=S,
 *     tern.dev/session-uid=U;
 *   - its controller ownerReference is the AgentSession S with uid U;
 *   - its name is S-sandbox (the name the operator gives it, and the one
 *     S's status names);
 *   - it is not being deleted and has not finished (phase is neither
 *     Succeeded nor Failed), and status.podIP(s) is set;
 *   - the AgentSession N/S exists with uid U.
 * An address that two such pods claim (a stale entry while a watch
 * catches up) identifies nobody until one of them goes.
 *
 * Ownership: objects passed in are borrowed for the call. egmap_lookup
 * returns a new struct egmap_client (its own copies of everything).
 */
#ifndef TERN_EGMAP_H
#define TERN_EGMAP_H

#include "egress/egpolicy.h"
#include "spec/session_spec.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>

struct egmap;

struct egmap *egmap_new(void);
/* Accepts NULL. */
void egmap_free(struct egmap *m);

/* Adds, updates or (when it no longer qualifies) removes a pod. */
void egmap_put_pod(struct egmap *m, const cJSON *pod);
void egmap_del_pod(struct egmap *m, const cJSON *pod);
/* Adds or replaces a session (its spec parsed with session_spec_parse; an
 * invalid spec is kept as such: its pods are refused with the reason). */
void egmap_put_session(struct egmap *m, const cJSON *session);
void egmap_del_session(struct egmap *m, const cJSON *session);

/* The client behind an address, with a copy of its session's allowlist. */
struct egmap_client {
    char *ns, *session, *session_uid, *pod;
    struct session_cidr *cidrs;
    size_t ncidrs;
    struct session_host *hosts;
    size_t nhosts;
};

/* Returns 0 and *ret, or TERN_ENOTFOUND with why (a sentence naming the
 * address and what is missing) when the address identifies no session's
 * sandbox pod, or TERN_EINVALID when the session's spec is invalid. */
int egmap_lookup(struct egmap *m, const struct egpolicy_addr *src, struct egmap_client **ret,
                 struct tern_err *why);
void egmap_client_free(struct egmap_client *c);
/* The client's allowlist for egpolicy (borrowed from c). */
struct egpolicy_allow egmap_client_allow(const struct egmap_client *c);

/* Counts for metrics: qualifying pods (addresses) and sessions. */
void egmap_counts(struct egmap *m, size_t *ret_pods, size_t *ret_sessions);

#endif
