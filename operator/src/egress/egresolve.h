/* egresolve.h - name lookups for the egress proxy.
 *
 * The proxy resolves every name itself, once per connection, and connects to
 * one of the addresses it got (the one egpolicy accepted): there is no second
 * lookup that a rebinding DNS server could answer differently.
 *
 * Two sources:
 *  - the system resolver (getaddrinfo) for the absolute name "NAME." (a
 *    trailing dot, so resolv.conf search domains never turn "api.example"
 *    into a cluster-internal "api.example.ns.svc.cluster.local");
 *  - a static name map (--hosts-file, for tests), in /etc/hosts format:
 *    "ADDRESS NAME [NAME...]" per line, '#' comments; a name listed on
 *    several lines gets every address in file order. When a map is given it
 *    is the only source: a name it does not list does not resolve.
 */
#ifndef TERN_EGRESOLVE_H
#define TERN_EGRESOLVE_H

#include "base/err.h"
#include "egress/egpolicy.h"

#include <stddef.h>

struct egresolve;

/* hosts_file NULL: the system resolver. Returns 0 and *ret, or an error
 * (unreadable, too large, malformed line: the line number in err). */
int egresolve_new(const char *hosts_file, struct egresolve **ret, struct tern_err *err);
/* The same from the text of a map (for tests). */
int egresolve_new_text(const char *text, size_t len, struct egresolve **ret, struct tern_err *err);
void egresolve_free(struct egresolve *r);

/* Up to max addresses of name (lower case, no trailing dot) into out, in
 * the resolver's order. Returns 0 and *ret_n >= 1, or TERN_ENOTFOUND (no
 * such name, or no address) / -EAGAIN (temporary failure) with err set. */
int egresolve_lookup(struct egresolve *r, const char *name, struct egpolicy_addr *out, size_t max,
                     size_t *ret_n, struct tern_err *err);

#endif
