/* egpolicy.h - the egress proxy's decision (pure).
 *
 * A connection is decided in two steps against the networkAllowlist of the
 * session the requesting pod belongs to (docs/egress.md):
 *
 *  1. the target, before any lookup (egpolicy_check_target):
 *     - a name is allowed when a host entry matches it and the port
 *       (session_host_match: exact or "*." suffix; ports 80 and 443 unless
 *       the entry names one);
 *     - an IP literal is allowed only when a CIDR entry covers it (a raw
 *       address is never allowed through a name entry);
 *  2. the addresses a name resolved to (egpolicy_pick_address): the first
 *     address that is public, or that a CIDR entry covers, is the one the
 *     proxy connects to, and the only one; an address in a special range
 *     (egpolicy_special: loopback, private, link-local and the metadata
 *     address 169.254.169.254, carrier-grade NAT, ...) is skipped unless a
 *     CIDR entry covers it. A name with no acceptable address is refused:
 *     this is what defeats DNS rebinding, since the proxy connects to the
 *     address it checked and never looks the name up again.
 *
 * IPv4-mapped (::ffff:a.b.c.d) and NAT64 (64:ff9b::/96) addresses are
 * judged by the IPv4 address inside them, for ranges and for CIDRs.
 */
#ifndef TERN_EGPOLICY_H
#define TERN_EGPOLICY_H

#include "spec/session_spec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Why a connection was allowed or refused; also the metrics label. */
enum egpolicy_reason {
    EGP_ALLOWED_HOST = 0, /* a host entry matched, the address is public */
    EGP_ALLOWED_CIDR,     /* a CIDR entry covers the address */
    EGP_NO_SESSION,       /* the client is not the sandbox pod of a session */
    EGP_NOT_ALLOWLISTED,  /* no host entry matches the name and port */
    EGP_ADDRESS_NOT_ALLOWLISTED, /* an IP literal no CIDR entry covers */
    EGP_PRIVATE_ADDRESS,  /* the name resolved only to special addresses */
    EGP_BAD_REQUEST,      /* not a proxy request we serve */
    EGP_RESOLVE_FAILED,   /* the name did not resolve */
    EGP_CONNECT_FAILED,   /* no connection to the chosen address */
    EGP_REASON_COUNT
};

/* "allowed_host", "not_allowlisted", ... (static). */
const char *egpolicy_reason_name(enum egpolicy_reason r);
/* true for the two EGP_ALLOWED_* reasons */
bool egpolicy_allowed(enum egpolicy_reason r);

/* An address: family AF_INET (4 bytes used) or AF_INET6. */
struct egpolicy_addr {
    int family;
    uint8_t addr[16];
};

/* The entries of one session's networkAllowlist (borrowed from its spec). */
struct egpolicy_allow {
    const struct session_cidr *cidrs;
    size_t ncidrs;
    const struct session_host *hosts;
    size_t nhosts;
};

/* The range a special address belongs to ("loopback", "private",
 * "link-local", "cloud metadata", "carrier-grade NAT", "unspecified",
 * "multicast", "reserved", "documentation", "benchmarking", "unique local",
 * "IPv4-mapped" is never returned: the inner address is judged), or NULL for
 * a public address. */
const char *egpolicy_special(const struct egpolicy_addr *a);

/* Whether a CIDR entry of allow covers a (the inner IPv4 address of a
 * mapped or NAT64 one too). */
bool egpolicy_cidr_covers(const struct egpolicy_allow *allow, const struct egpolicy_addr *a);

/* Step 1. name: lower case, no trailing dot (proxyreq's host) when
 * literal is NULL; literal: the address when the target is an IP literal.
 * Returns EGP_ALLOWED_HOST (a name entry matched: go on to step 2),
 * EGP_ALLOWED_CIDR (a covered literal: connect to it), or
 * EGP_NOT_ALLOWLISTED / EGP_ADDRESS_NOT_ALLOWLISTED. */
enum egpolicy_reason egpolicy_check_target(const struct egpolicy_allow *allow, const char *name,
                                           const struct egpolicy_addr *literal, int port);

/* Step 2 over the addresses a name resolved to. assume_public (may be
 * NULL/0): CIDRs whose addresses count as public (a test setting: servers on
 * loopback standing in for the internet). Returns EGP_ALLOWED_HOST or
 * EGP_ALLOWED_CIDR with *ret_index the address to use, or
 * EGP_PRIVATE_ADDRESS with *ret_index the first refused address (or
 * EGP_RESOLVE_FAILED when n == 0). */
enum egpolicy_reason egpolicy_pick_address(const struct egpolicy_allow *allow,
                                           const struct egpolicy_addr *addrs, size_t n,
                                           const struct session_cidr *assume_public,
                                           size_t nassume, size_t *ret_index);

/* The address as text ("10.0.0.1", "fd00::1"), into out. */
void egpolicy_addr_str(const struct egpolicy_addr *a, char *out, size_t n);

#endif
