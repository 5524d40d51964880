/* egpolicy.c - the egress decision. See egpolicy.h. */
#include "egress/egpolicy.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

static const char *const reason_names[EGP_REASON_COUNT] = {
    [EGP_ALLOWED_HOST] = "allowed_host",
    [EGP_ALLOWED_CIDR] = "allowed_cidr",
    [EGP_NO_SESSION] = "no_session",
    [EGP_NOT_ALLOWLISTED] = "not_allowlisted",
    [EGP_ADDRESS_NOT_ALLOWLISTED] = "address_not_allowlisted",
    [EGP_PRIVATE_ADDRESS] = "private_address",
    [EGP_BAD_REQUEST] = "bad_request",
    [EGP_RESOLVE_FAILED] = "resolve_failed",
    [EGP_CONNECT_FAILED] = "connect_failed",
};

const char *egpolicy_reason_name(enum egpolicy_reason r)
{
    return (unsigned)r < EGP_REASON_COUNT ? reason_names[r] : "unknown";
}

bool egpolicy_allowed(enum egpolicy_reason r)
{
    return r == EGP_ALLOWED_HOST || r == EGP_ALLOWED_CIDR;
}

/* The IPv4 address inside a mapped (::ffff:0:0/96) or NAT64 (64:ff9b::/96)
 * IPv6 address, as an AF_INET address; a itself otherwise. */
static struct egpolicy_addr inner(const struct egpolicy_addr *a)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};
    if (a->family == AF_INET6 &&
        (memcmp(a->addr, mapped, 12) == 0 || memcmp(a->addr, nat64, 12) == 0)) {
        struct egpolicy_addr v4 = {.family = AF_INET};
        memcpy(v4.addr, a->addr + 12, 4);
        return v4;
    }
    return *a;
}

struct range {
    uint8_t net[16];
    int prefix;
    const char *what;
};

static bool in_range(const uint8_t *addr, const struct range *r)
{
    int full = r->prefix / 8, rest = r->prefix % 8;
    if (memcmp(addr, r->net, (size_t)full) != 0)
        return false;
    return rest == 0 || ((addr[full] ^ r->net[full]) & (uint8_t)(0xffu << (8 - rest))) == 0;
}

/* IANA special-purpose registries; the metadata address first so it is
 * named as such. */
static const struct range v4_ranges[] = {
    {{169, 254, 169, 254}, 32, "cloud metadata"},
    {{100, 100, 100, 200}, 32, "cloud metadata"},
    {{0}, 8, "unspecified"},
    {{10}, 8, "private"},
    {{100, 64}, 10, "carrier-grade NAT"},
    {{127}, 8, "loopback"},
    {{169, 254}, 16, "link-local"},
    {{172, 16}, 12, "private"},
    {{192, 0, 0}, 24, "reserved"},
    {{192, 0, 2}, 24, "documentation"},
    {{192, 88, 99}, 24, "reserved"},
    {{192, 168}, 16, "private"},
    {{198, 18}, 15, "benchmarking"},
    {{198, 51, 100}, 24, "documentation"},
    {{203, 0, 113}, 24, "documentation"},
    {{224}, 4, "multicast"},
    {{240}, 4, "reserved"},
};

static const struct range v6_ranges[] = {
    {{0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54}, 128, "cloud metadata"},
    {{0}, 128, "unspecified"},
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128, "loopback"},
    {{0}, 96, "reserved"}, /* IPv4-compatible, deprecated */
    {{0, 0x64, 0xff, 0x9b, 0, 1}, 48, "private"}, /* local-use NAT64 */
    {{0x01, 0x00}, 64, "reserved"},            /* discard-only */
    {{0x20, 0x01, 0x00, 0x00}, 23, "reserved"}, /* IETF protocol assignments */
    {{0x20, 0x01, 0x0d, 0xb8}, 32, "documentation"},
    {{0x20, 0x02}, 16, "reserved"},             /* 6to4: embeds any IPv4 */
    {{0x3f, 0xff}, 20, "documentation"},
    {{0xfc}, 7, "unique local"},
    {{0xfe, 0x80}, 10, "link-local"},
    {{0xfe, 0xc0}, 10, "reserved"},             /* site-local, deprecated */
    {{0xff}, 8, "multicast"},
};

const char *egpolicy_special(const struct egpolicy_addr *a)
{
    struct egpolicy_addr x = inner(a);
    const struct range *r = x.family == AF_INET ? v4_ranges : v6_ranges;
    size_t n = x.family == AF_INET ? sizeof v4_ranges / sizeof *v4_ranges
                                   : sizeof v6_ranges / sizeof *v6_ranges;
    if (x.family != AF_INET && x.family != AF_INET6)
        return "unspecified";
    for (size_t i = 0; i < n; i++)
        if (in_range(x.addr, &r[i]))
            return r[i].what;
    if (x.family == AF_INET && x.addr[0] == 255 && x.addr[1] == 255 && x.addr[2] == 255 &&
        x.addr[3] == 255)
        return "reserved";
    return NULL;
}

static bool covered_by(const struct session_cidr *c, size_t n, const struct egpolicy_addr *a)
{
    struct egpolicy_addr x = inner(a);
    for (size_t i = 0; i < n; i++)
        if (session_cidr_contains(&c[i], a->family, a->addr) ||
            session_cidr_contains(&c[i], x.family, x.addr))
            return true;
    return false;
}

bool egpolicy_cidr_covers(const struct egpolicy_allow *allow, const struct egpolicy_addr *a)
{
    return covered_by(allow->cidrs, allow->ncidrs, a);
}

enum egpolicy_reason egpolicy_check_target(const struct egpolicy_allow *allow, const char *name,
                                           const struct egpolicy_addr *literal, int port)
{
    if (literal)
        return egpolicy_cidr_covers(allow, literal) ? EGP_ALLOWED_CIDR
                                                    : EGP_ADDRESS_NOT_ALLOWLISTED;
    for (size_t i = 0; i < allow->nhosts; i++)
        if (session_host_match(&allow->hosts[i], name, port))
            return EGP_ALLOWED_HOST;
    return EGP_NOT_ALLOWLISTED;
}

enum egpolicy_reason egpolicy_pick_address(const struct egpolicy_allow *allow,
                                           const struct egpolicy_addr *addrs, size_t n,
                                           const struct session_cidr *assume_public,
                                           size_t nassume, size_t *ret_index)
{
    if (n == 0)
        return EGP_RESOLVE_FAILED;
    for (size_t i = 0; i < n; i++) {
        if (egpolicy_cidr_covers(allow, &addrs[i])) {
            *ret_index = i;
            return EGP_ALLOWED_CIDR;
        }
        if (!egpolicy_special(&addrs[i]) || covered_by(assume_public, nassume, &addrs[i])) {
            *ret_index = i;
            return EGP_ALLOWED_HOST;
        }
    }
    *ret_index = 0;
    return EGP_PRIVATE_ADDRESS;
}

void egpolicy_addr_str(const struct egpolicy_addr *a, char *out, size_t n)
{
    char b[INET6_ADDRSTRLEN] = "?";
    inet_ntop(a->family == AF_INET6 ? AF_INET6 : AF_INET, a->addr, b, sizeof b);
    snprintf(out, n, "%s", b);
}
