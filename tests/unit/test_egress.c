/* Unit tests: the egress proxy's pure parts. proxyreq (request heads,
 * authority and absolute forms, the upstream head), egpolicy (the decision:
 * names, literals, special ranges, DNS rebinding), egmap (source address ->
 * session, and the conditions a pod must meet), egresolve's static map,
 * egrate (refusal Event rate limit) and the refusal answer. */
#include "harness.h"

#include "base/buf.h"
#include "base/mem.h"
#include "egress/egmap.h"
#include "egress/egpolicy.h"
#include "egress/egproxy.h"
#include "egress/egrate.h"
#include "egress/egresolve.h"
#include "egress/proxyreq.h"
#include "json/json.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int parse(const char *head, struct proxyreq *r, struct tern_err *e)
{
    return proxyreq_parse(head, strlen(head), r, e);
}

/* ---- proxyreq ---- */

TEST(proxyreq_connect)
{
    struct proxyreq r;
    struct tern_err e = {0};
    ASSERT_OK(parse("CONNECT PyPI.org.:443 HTTP/1.1\r\nHost: pypi.org:443\r\n"
                    "Proxy-Authorization: Basic eA==\r\n\r\n",
                    &r, &e));
    ASSERT_EQ_INT(r.kind, PROXYREQ_CONNECT);
    ASSERT_EQ_STR(r.target.host, "pypi.org");
    ASSERT_EQ_INT(r.target.port, 443);
    ASSERT_EQ_INT(r.target.family, 0);
    ASSERT_NULL(r.headers);
    proxyreq_done(&r);

    ASSERT_OK(parse("CONNECT [2001:db8::1]:8443 HTTP/1.0\n\n", &r, &e));
    ASSERT_EQ_INT(r.target.family, AF_INET6);
    ASSERT_EQ_STR(r.target.host, "2001:db8::1");
    ASSERT_TRUE(r.http10);
    char t[300];
    proxyreq_target_str(&r.target, t, sizeof t);
    ASSERT_EQ_STR(t, "[2001:db8::1]:8443");
    proxyreq_done(&r);

    ASSERT_OK(parse("CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n", &r, &e));
    ASSERT_EQ_INT(r.target.family, AF_INET);
    ASSERT_EQ_INT(r.target.addr[0], 169);
    ASSERT_EQ_INT(r.target.addr[3], 254);
    proxyreq_done(&r);

    /* other numeric spellings stay names, which no entry matches */
    ASSERT_OK(parse("CONNECT 127.1:80 HTTP/1.1\r\n\r\n", &r, &e));
    ASSERT_EQ_INT(r.target.family, 0);
    ASSERT_EQ_STR(r.target.host, "127.1");
    proxyreq_done(&r);
}

TEST(proxyreq_forward_rewrites_the_head)
{
    struct proxyreq r;
    struct tern_err e = {0};
    ASSERT_OK(parse("GET http://Files.Example.org:8080/simple/demo/?x=1 HTTP/1.1\r\n"
                    "Host: evil.example\r\nUser-Agent: pip/23\r\nProxy-Connection: keep-alive\r\n"
                    "Connection: keep-alive, X-Secret\r\nX-Secret: s\r\nKeep-Alive: 5\r\n"
                    "Proxy-Authorization: x\r\nAccept: */*\r\n\r\n",
                    &r, &e));
    ASSERT_EQ_INT(r.kind, PROXYREQ_FORWARD);
    ASSERT_EQ_STR(r.target.host, "files.example.org");
    ASSERT_EQ_INT(r.target.port, 8080);
    ASSERT_EQ_STR(r.path, "/simple/demo/?x=1");
    struct buf b;
    buf_init(&b, 1 << 16);
    proxyreq_upstream_head(&r, &b);
    ASSERT_EQ_STR(buf_str(&b), "GET /simple/demo/?x=1 HTTP/1.1\r\n"
                               "Host: files.example.org:8080\r\n"
                               "User-Agent: pip/23\r\nAccept: */*\r\n"
                               "Connection: close\r\n\r\n");
    buf_done(&b);
    proxyreq_done(&r);

    ASSERT_OK(parse("POST http://example.org?q HTTP/1.1\r\nContent-Length: 3\r\n\r\n", &r, &e));
    ASSERT_EQ_STR(r.path, "/?q");
    ASSERT_EQ_INT(r.target.port, 80);
    buf_init(&b, 1 << 16);
    proxyreq_upstream_head(&r, &b);
    ASSERT_CONTAINS(buf_str(&b), "POST /?q HTTP/1.1\r\nHost: example.org\r\nContent-Length: 3\r\n");
    buf_done(&b);
    proxyreq_done(&r);
}

TEST(proxyreq_refusals)
{
    static const struct {
        const char *head, *why;
    } t[] = {
        {"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not a proxy request"},
        {"GET https://pypi.org/ HTTP/1.1\r\n\r\n", "https URLs go through CONNECT"},
        {"GET ftp://pypi.org/ HTTP/1.1\r\n\r\n", "only http://"},
        {"GET http://user@pypi.org/ HTTP/1.1\r\n\r\n", "user information"},
        {"GET http://allowed.example@evil.example/ HTTP/1.1\r\n\r\n", "user information"},
        {"CONNECT a@b.org:443 HTTP/1.1\r\n\r\n", "user information"},
        {"CONNECT pypi.org HTTP/1.1\r\n\r\n", "a port is required"},
        {"CONNECT pypi.org:0 HTTP/1.1\r\n\r\n", "invalid port"},
        {"CONNECT pypi.org:65536 HTTP/1.1\r\n\r\n", "invalid port"},
        {"CONNECT pypi.org:044 HTTP/1.1\r\n\r\n", "invalid port"},
        {"CONNECT pypi.org:443x HTTP/1.1\r\n\r\n", "invalid port"},
        {"CONNECT py%70i.org:443 HTTP/1.1\r\n\r\n", "percent-encoded"},
        {"CONNECT pypi..org:443 HTTP/1.1\r\n\r\n", "empty label"},
        {"CONNECT [::1:443 HTTP/1.1\r\n\r\n", "unterminated"},
        {"CONNECT [fe80::1%eth0]:443 HTTP/1.1\r\n\r\n", "invalid IPv6"},
        {"CONNECT pypi.org:443 HTTP/2\r\n\r\n", "only HTTP/1.1"},
        {"CONNECT pypi.org:443  HTTP/1.1\r\n\r\n", "METHOD TARGET"},
        {"CONNECT pypi.org:443\r\n\r\n", "METHOD TARGET"},
        {"CONNECT pypi.org:443 HTTP/1.1\r\n", "end with an empty line"},
        {"CONNECT pypi.org:443 HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", "folded"},
        {"CONNECT pypi.org:443 HTTP/1.1\r\nBad Name: x\r\n\r\n", "invalid header field name"},
        {"CONNECT pypi.org:443 HTTP/1.1\r\nnocolon\r\n\r\n", "malformed header"},
        {"GET http://a.org/#f HTTP/1.1\r\n\r\n", "fragment"},
        {"GET http://a.org/\x01 HTTP/1.1\r\n\r\n", "invalid character"},
        {"GET http://a.org/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
         "conflicting Content-Length"},
        {"GET http://a.org/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
         "both Content-Length and Transfer-Encoding"},
        {"GET http://a.org/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "invalid Content-Length"},
        {"\r\n\r\n", "no request line"},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        struct proxyreq r;
        struct tern_err e = {0};
        if (parse(t[i].head, &r, &e) != TERN_EPARSE)
            th_fail(__FILE__, __LINE__, "accepted: %s", t[i].head);
        if (!strstr(e.msg, t[i].why))
            th_fail(__FILE__, __LINE__, "%s: \"%s\", expected \"%s\"", t[i].head, e.msg,
                    t[i].why);
    }
    /* more header fields than the bound */
    struct buf b;
    buf_init(&b, 1 << 20);
    buf_puts(&b, "CONNECT pypi.org:443 HTTP/1.1\r\n");
    for (int i = 0; i <= TERN_EGRESS_MAX_HEADERS; i++)
        buf_printf(&b, "X-%d: v\r\n", i);
    buf_puts(&b, "\r\n");
    struct proxyreq r;
    struct tern_err e = {0};
    ASSERT_EQ_INT(proxyreq_parse(b.data, b.len, &r, &e), TERN_EPARSE);
    ASSERT_CONTAINS(e.msg, "header fields");
    buf_done(&b);
}

/* ---- egpolicy ---- */

static struct egpolicy_addr v4(int a, int b, int c, int d)
{
    struct egpolicy_addr x = {.family = AF_INET, .addr = {(uint8_t)a, (uint8_t)b, (uint8_t)c,
                                                         (uint8_t)d}};
    return x;
}

static struct egpolicy_addr v6(const char *s)
{
    struct egpolicy_addr x = {.family = AF_INET6};
    if (inet_pton(AF_INET6, s, x.addr) != 1)
        abort();
    return x;
}

TEST(egpolicy_special_ranges)
{
    static const struct {
        int a, b, c, d;
        const char *what; /* NULL: public */
    } t[] = {
        {169, 254, 169, 254, "cloud metadata"}, {100, 100, 100, 200, "cloud metadata"},
        {169, 254, 1, 1, "link-local"},         {10, 1, 2, 3, "private"},
        {172, 16, 0, 1, "private"},             {172, 31, 255, 255, "private"},
        {172, 32, 0, 1, NULL},                  {192, 168, 1, 1, "private"},
        {127, 0, 0, 1, "loopback"},             {127, 1, 2, 3, "loopback"},
        {0, 0, 0, 0, "unspecified"},            {100, 64, 0, 1, "carrier-grade NAT"},
        {100, 128, 0, 1, NULL},                 {224, 0, 0, 1, "multicast"},
        {255, 255, 255, 255, "reserved"},       {192, 0, 2, 1, "documentation"},
        {198, 18, 0, 1, "benchmarking"},        {8, 8, 8, 8, NULL},
        {151, 101, 0, 223, NULL},               {11, 0, 0, 1, NULL},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        struct egpolicy_addr a = v4(t[i].a, t[i].b, t[i].c, t[i].d);
        const char *w = egpolicy_special(&a);
        if ((w == NULL) != (t[i].what == NULL) || (w && strcmp(w, t[i].what) != 0))
            th_fail(__FILE__, __LINE__, "%d.%d.%d.%d: \"%s\", expected \"%s\"", t[i].a, t[i].b,
                    t[i].c, t[i].d, w ? w : "public", t[i].what ? t[i].what : "public");
    }
    static const struct {
        const char *a, *what;
    } t6[] = {
        {"::1", "loopback"},
        {"::", "unspecified"},
        {"fe80::1", "link-local"},
        {"fd00::1", "unique local"},
        {"fd00:ec2::254", "cloud metadata"},
        {"ff02::1", "multicast"},
        {"2001:db8::1", "documentation"},
        {"::ffff:169.254.169.254", "cloud metadata"},
        {"::ffff:10.0.0.1", "private"},
        {"::ffff:8.8.8.8", NULL},
        {"64:ff9b::a9fe:a9fe", "cloud metadata"},
        {"64:ff9b::808:808", NULL},
        {"2002:a9fe:a9fe::1", "reserved"},
        {"2606:4700::1111", NULL},
    };
    for (size_t i = 0; i < sizeof t6 / sizeof *t6; i++) {
        struct egpolicy_addr a = v6(t6[i].a);
        const char *w = egpolicy_special(&a);
        if ((w == NULL) != (t6[i].what == NULL) || (w && strcmp(w, t6[i].what) != 0))
            th_fail(__FILE__, __LINE__, "%s: \"%s\", expected \"%s\"", t6[i].a, w ? w : "public",
                    t6[i].what ? t6[i].what : "public");
    }
}

/* An allowlist from spec-style strings. */
struct allow_fixture {
    struct session_cidr c[8];
    struct session_host h[8];
    struct egpolicy_allow a;
};

static void fixture(struct allow_fixture *f, const char *const *entries)
{
    memset(f, 0, sizeof *f);
    for (size_t i = 0; entries[i]; i++) {
        if (strchr(entries[i], '/')) {
            if (session_cidr_parse(entries[i], &f->c[f->a.ncidrs]) != 0)
                abort();
            f->a.ncidrs++;
        } else {
            const char *why;
            if (session_host_parse(entries[i], &f->h[f->a.nhosts], &why) != 0)
                abort();
            f->a.nhosts++;
        }
    }
    f->a.cidrs = f->c;
    f->a.hosts = f->h;
}

static void fixture_done(struct allow_fixture *f)
{
    for (size_t i = 0; i < f->a.nhosts; i++)
        free(f->h[i].name);
}

TEST(egpolicy_targets)
{
    struct allow_fixture f;
    const char *e[] = {"pypi.org", "*.githubusercontent.com", "git.example.com:8443",
                       "10.20.0.0/16", "169.254.169.254/32", NULL};
    fixture(&f, e);
    ASSERT_EQ_INT(egpolicy_check_target(&f.a, "pypi.org", NULL, 443), EGP_ALLOWED_HOST);
    ASSERT_EQ_INT(egpolicy_check_target(&f.a, "pypi.org", NULL, 80), EGP_ALLOWED_HOST);
    ASSERT_EQ_INT(egpolicy_check_target(&f.a, "pypi.org", NULL, 22), EGP_NOT_ALLOWLISTED);
    ASSERT_EQ_INT(egpolicy_check_target(&f.a, "files.pythonhosted.org", NULL, 443),
                  EGP_NOT_ALLOWLISTED);
    ASSERT_EQ_INT(egpolicy_check_target(&f.a, "raw.githubusercontent.com", NULL, 443),
                  EGP_ALLOWED_HOST);
    ASSERT_EQ_INT(egpolicy_check_target(&f.a, "githubusercontent.com", NULL, 443),
                  EGP_NOT_ALLOWLISTED);
    ASSERT_EQ_INT(egpolicy_check_target(&f.a, "git.example.com", NULL, 8443), EGP_ALLOWED_HOST);
    ASSERT_EQ_INT(egpolicy_check_target(&f.a, "git.example.com", NULL, 443),
                  EGP_NOT_ALLOWLISTED);
    struct egpolicy_addr in = v4(10, 20, 3, 4), out = v4(10, 21, 0, 1), md = v4(169, 254, 169, 254),
                         pub = v4(151, 101, 0, 223);
    ASSERT_EQ_INT(egpolicy_check_target(&f.a, "10.20.3.4", &in, 5432), EGP_ALLOWED_CIDR);
    ASSERT_EQ_INT(egpolicy_check_target(&f.a, "10.21.0.1", &out, 80),
                  EGP_ADDRESS_NOT_ALLOWLISTED);
    /* a raw public address is refused too: only CIDRs admit literals */
    ASSERT_EQ_INT(egpolicy_check_target(&f.a, "151.101.0.223", &pub, 443),
                  EGP_ADDRESS_NOT_ALLOWLISTED);
    ASSERT_EQ_INT(egpolicy_check_target(&f.a, "169.254.169.254", &md, 80), EGP_ALLOWED_CIDR);
    struct egpolicy_addr mapped = v6("::ffff:10.20.9.9");
    ASSERT_EQ_INT(egpolicy_check_target(&f.a, "::ffff:10.20.9.9", &mapped, 80), EGP_ALLOWED_CIDR);
    fixture_done(&f);
}

TEST(egpolicy_addresses_and_rebinding)
{
    struct allow_fixture f;
    const char *e[] = {"pypi.org", "internal.example.com", "10.20.0.0/16", NULL};
    fixture(&f, e);
    size_t idx = 99;
    /* public first */
    struct egpolicy_addr a1[] = {v4(151, 101, 0, 223)};
    ASSERT_EQ_INT(egpolicy_pick_address(&f.a, a1, 1, NULL, 0, &idx), EGP_ALLOWED_HOST);
    ASSERT_EQ_INT(idx, 0);
    /* rebinding: only private and metadata answers */
    struct egpolicy_addr a2[] = {v4(127, 0, 0, 1), v4(169, 254, 169, 254), v6("fd00::1")};
    ASSERT_EQ_INT(egpolicy_pick_address(&f.a, a2, 3, NULL, 0, &idx), EGP_PRIVATE_ADDRESS);
    ASSERT_EQ_INT(idx, 0);
    /* mixed: the private answer is skipped, the public one used */
    struct egpolicy_addr a3[] = {v4(10, 0, 0, 5), v6("::ffff:127.0.0.1"), v4(8, 8, 4, 4)};
    ASSERT_EQ_INT(egpolicy_pick_address(&f.a, a3, 3, NULL, 0, &idx), EGP_ALLOWED_HOST);
    ASSERT_EQ_INT(idx, 2);
    /* a CIDR entry admits a private address a name resolves to */
    struct egpolicy_addr a4[] = {v4(10, 20, 1, 1)};
    ASSERT_EQ_INT(egpolicy_pick_address(&f.a, a4, 1, NULL, 0, &idx), EGP_ALLOWED_CIDR);
    /* assume-public (tests): loopback counts as public, nothing else */
    struct session_cidr lo;
    ASSERT_OK(session_cidr_parse("127.0.0.1/32", &lo));
    struct egpolicy_addr a5[] = {v4(127, 0, 0, 2), v4(127, 0, 0, 1)};
    ASSERT_EQ_INT(egpolicy_pick_address(&f.a, a5, 2, &lo, 1, &idx), EGP_ALLOWED_HOST);
    ASSERT_EQ_INT(idx, 1);
    ASSERT_EQ_INT(egpolicy_pick_address(&f.a, a5, 1, &lo, 1, &idx), EGP_PRIVATE_ADDRESS);
    ASSERT_EQ_INT(egpolicy_pick_address(&f.a, a5, 0, &lo, 1, &idx), EGP_RESOLVE_FAILED);
    ASSERT_EQ_STR(egpolicy_reason_name(EGP_PRIVATE_ADDRESS), "private_address");
    ASSERT_TRUE(egpolicy_allowed(EGP_ALLOWED_CIDR));
    ASSERT_FALSE(egpolicy_allowed(EGP_NO_SESSION));
    fixture_done(&f);
}

/* ---- egmap ---- */

static cJSON *obj(const char *text)
{
    cJSON *o = NULL;
    if (json_parse(text, strlen(text), &o, NULL) != 0)
        abort();
    return o;
}

#define SESSION_JSON(ns, name, uid, allow)                                                         \
    "{\"apiVersion\":\"tern.dev/v1alpha1\",\"kind\":\"AgentSession\",\"metadata\":{\"name\":\"" name \
    "\",\"namespace\":\"" ns "\",\"uid\":\"" uid "\"},\"spec\":{\"objective\":\"x\","              \
    "\"permissions\":{\"networkAllowlist\":" allow "}}}"

static char *pod_json(const char *ns, const char *name, const char *session, const char *suid,
                      const char *owner_uid, const char *ip, const char *extra_meta,
                      const char *phase)
{
    return xasprintf(
        "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\",%s\"labels\":{\"tern.dev/role\":"
        "\"sandbox\",\"tern.dev/session\":\"%s\",\"tern.dev/session-uid\":\"%s\"},"
        "\"ownerReferences\":[{\"apiVersion\":\"tern.dev/v1alpha1\",\"kind\":\"AgentSession\","
        "\"name\":\"%s\",\"uid\":\"%s\",\"controller\":true}]},"
        "\"status\":{\"phase\":\"%s\",\"podIP\":\"%s\",\"podIPs\":[{\"ip\":\"%s\"}]}}",
        name, ns, extra_meta, session, suid, session, owner_uid, phase, ip, ip);
}

static int lookup(struct egmap *m, struct egpolicy_addr a, struct egmap_client **c,
                  struct tern_err *e)
{
    *c = NULL;
    memset(e, 0, sizeof *e);
    return egmap_lookup(m, &a, c, e);
}

static void put_pod(struct egmap *m, char *json)
{
    cJSON *p = obj(json);
    egmap_put_pod(m, p);
    cJSON_Delete(p);
    free(json);
}

TEST(egmap_source_to_session)
{
    struct egmap *m = egmap_new();
    cJSON *s = obj(SESSION_JSON("ns1", "s1", "u1", "[\"pypi.org\",\"10.0.0.0/8\"]"));
    egmap_put_session(m, s);
    put_pod(m, pod_json("ns1", "s1-sandbox", "s1", "u1", "u1", "10.213.0.9", "", "Running"));
    struct egmap_client *c;
    struct tern_err e;
    ASSERT_OK(lookup(m, v4(10, 213, 0, 9), &c, &e));
    ASSERT_EQ_STR(c->ns, "ns1");
    ASSERT_EQ_STR(c->session, "s1");
    ASSERT_EQ_STR(c->pod, "s1-sandbox");
    ASSERT_EQ_INT(c->nhosts, 1);
    ASSERT_EQ_STR(c->hosts[0].name, "pypi.org");
    ASSERT_EQ_INT(c->ncidrs, 1);
    egmap_client_free(c);
    size_t np, ns;
    egmap_counts(m, &np, &ns);
    ASSERT_EQ_INT(np, 1);
    ASSERT_EQ_INT(ns, 1);

    /* an unknown address */
    ASSERT_EQ_INT(lookup(m, v4(10, 213, 0, 10), &c, &e), TERN_ENOTFOUND);
    ASSERT_CONTAINS(e.msg, "10.213.0.10 is not the address of a running sandbox pod");

    /* the allowlist follows the session */
    cJSON *s2 = obj(SESSION_JSON("ns1", "s1", "u1", "[]"));
    egmap_put_session(m, s2);
    ASSERT_OK(lookup(m, v4(10, 213, 0, 9), &c, &e));
    ASSERT_EQ_INT(c->nhosts, 0);
    egmap_client_free(c);

    /* a session re-created under the same name (new uid) is not the pod's */
    cJSON *s3 = obj(SESSION_JSON("ns1", "s1", "u2", "[\"pypi.org\"]"));
    egmap_put_session(m, s3);
    ASSERT_EQ_INT(lookup(m, v4(10, 213, 0, 9), &c, &e), TERN_ENOTFOUND);
    ASSERT_CONTAINS(e.msg, "does not exist");
    egmap_put_session(m, s);

    /* deleted session, deleted pod */
    egmap_del_session(m, s);
    ASSERT_EQ_INT(lookup(m, v4(10, 213, 0, 9), &c, &e), TERN_ENOTFOUND);
    egmap_put_session(m, s);
    ASSERT_OK(lookup(m, v4(10, 213, 0, 9), &c, &e));
    egmap_client_free(c);
    cJSON *p = obj("{\"metadata\":{\"name\":\"s1-sandbox\",\"namespace\":\"ns1\"}}");
    egmap_del_pod(m, p);
    ASSERT_EQ_INT(lookup(m, v4(10, 213, 0, 9), &c, &e), TERN_ENOTFOUND);
    cJSON_Delete(p);
    cJSON_Delete(s);
    cJSON_Delete(s2);
    cJSON_Delete(s3);
    egmap_free(m);
}

TEST(egmap_pods_that_do_not_qualify)
{
    struct egmap *m = egmap_new();
    cJSON *s = obj(SESSION_JSON("ns1", "s1", "u1", "[\"pypi.org\"]"));
    egmap_put_session(m, s);
    struct egmap_client *c;
    struct tern_err e;
    /* another name than <session>-sandbox */
    put_pod(m, pod_json("ns1", "mine", "s1", "u1", "u1", "10.213.0.1", "", "Running"));
    /* owner uid differs from the label */
    put_pod(m, pod_json("ns1", "s1-sandbox", "s1", "u1", "u9", "10.213.0.2", "", "Running"));
    ASSERT_EQ_INT(lookup(m, v4(10, 213, 0, 1), &c, &e), TERN_ENOTFOUND);
    ASSERT_EQ_INT(lookup(m, v4(10, 213, 0, 2), &c, &e), TERN_ENOTFOUND);
    /* finished, being deleted */
    put_pod(m, pod_json("ns1", "s1-sandbox", "s1", "u1", "u1", "10.213.0.3", "", "Failed"));
    ASSERT_EQ_INT(lookup(m, v4(10, 213, 0, 3), &c, &e), TERN_ENOTFOUND);
    put_pod(m, pod_json("ns1", "s1-sandbox", "s1", "u1", "u1", "10.213.0.4",
                        "\"deletionTimestamp\":\"2026-01-01T00:00:00Z\",", "Running"));
    ASSERT_EQ_INT(lookup(m, v4(10, 213, 0, 4), &c, &e), TERN_ENOTFOUND);
    /* a qualifying update replaces the old address */
    put_pod(m, pod_json("ns1", "s1-sandbox", "s1", "u1", "u1", "10.213.0.5", "", "Running"));
    ASSERT_OK(lookup(m, v4(10, 213, 0, 5), &c, &e));
    egmap_client_free(c);
    put_pod(m, pod_json("ns1", "s1-sandbox", "s1", "u1", "u1", "10.213.0.6", "", "Running"));
    ASSERT_EQ_INT(lookup(m, v4(10, 213, 0, 5), &c, &e), TERN_ENOTFOUND);
    ASSERT_OK(lookup(m, v4(10, 213, 0, 6), &c, &e));
    egmap_client_free(c);
    /* two pods claiming one address identify nobody */
    cJSON *s2 = obj(SESSION_JSON("ns2", "s1", "u3", "[\"pypi.org\"]"));
    egmap_put_session(m, s2);
    put_pod(m, pod_json("ns2", "s1-sandbox", "s1", "u3", "u3", "10.213.0.6", "", "Running"));
    ASSERT_EQ_INT(lookup(m, v4(10, 213, 0, 6), &c, &e), TERN_ENOTFOUND);
    ASSERT_CONTAINS(e.msg, "claimed by 2 pods");
    cJSON *gone = obj("{\"metadata\":{\"name\":\"s1-sandbox\",\"namespace\":\"ns1\"}}");
    egmap_del_pod(m, gone);
    ASSERT_OK(lookup(m, v4(10, 213, 0, 6), &c, &e));
    ASSERT_EQ_STR(c->ns, "ns2");
    egmap_client_free(c);
    /* an invalid spec refuses with its reason */
    cJSON *bad = obj("{\"metadata\":{\"name\":\"s1\",\"namespace\":\"ns2\",\"uid\":\"u3\"},"
                     "\"spec\":{\"objective\":\"x\",\"permissions\":{\"networkAllowlist\":"
                     "[\"PYPI.org\"]}}}");
    egmap_put_session(m, bad);
    ASSERT_EQ_INT(lookup(m, v4(10, 213, 0, 6), &c, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "invalid spec");
    ASSERT_CONTAINS(e.msg, "lower case");
    cJSON_Delete(bad);
    cJSON_Delete(gone);
    cJSON_Delete(s);
    cJSON_Delete(s2);
    egmap_free(m);
}

/* ---- egresolve (static map) ---- */

TEST(egresolve_static_map)
{
    const char *text = "# test names\n127.0.0.1 Allowed.Example www.allowed.example\n"
                       "127.0.0.2   rebind.example  # private\n"
                       "::1 allowed.example\n\n";
    struct egresolve *r = NULL;
    struct tern_err e = {0};
    ASSERT_OK(egresolve_new_text(text, strlen(text), &r, &e));
    struct egpolicy_addr a[4];
    size_t n = 0;
    ASSERT_OK(egresolve_lookup(r, "allowed.example", a, 4, &n, &e));
    ASSERT_EQ_INT(n, 2);
    ASSERT_EQ_INT(a[0].family, AF_INET);
    ASSERT_EQ_INT(a[0].addr[3], 1);
    ASSERT_EQ_INT(a[1].family, AF_INET6);
    ASSERT_OK(egresolve_lookup(r, "rebind.example", a, 4, &n, &e));
    ASSERT_EQ_INT(n, 1);
    ASSERT_EQ_INT(a[0].addr[3], 2);
    ASSERT_EQ_INT(egresolve_lookup(r, "pypi.org", a, 4, &n, &e), TERN_ENOTFOUND);
    ASSERT_CONTAINS(e.msg, "static name map");
    egresolve_free(r);
    const char *bad[] = {"127.0.0.1\n", "not-an-address name\n", "1.2.3.4 ok\nzzz\n"};
    for (size_t i = 0; i < 3; i++) {
        ASSERT_EQ_INT(egresolve_new_text(bad[i], strlen(bad[i]), &r, &e), TERN_EPARSE);
        ASSERT_CONTAINS(e.msg, "hosts file line");
    }
}

/* ---- egrate ---- */

TEST(egrate_one_event_per_interval)
{
    struct egrate *r = egrate_new(30000);
    uint64_t held = 99;
    ASSERT_TRUE(egrate_allow(r, "ns/a", 1000, &held));
    ASSERT_EQ_INT(held, 0);
    ASSERT_FALSE(egrate_allow(r, "ns/a", 2000, &held));
    ASSERT_FALSE(egrate_allow(r, "ns/a", 30999, &held));
    ASSERT_TRUE(egrate_allow(r, "ns/b", 3000, &held)); /* per session */
    ASSERT_TRUE(egrate_allow(r, "ns/a", 31000, &held));
    ASSERT_EQ_INT(held, 2);
    ASSERT_FALSE(egrate_allow(r, "ns/a", 31001, &held));
    ASSERT_EQ_INT(egrate_suppressed_total(r), 3);
    /* the table is bounded: old keys are forgotten, new ones still report */
    char k[32];
    for (int i = 0; i < TERN_EGRESS_MAX_RATE_KEYS + 10; i++) {
        snprintf(k, sizeof k, "k%d", i);
        ASSERT_TRUE(egrate_allow(r, k, 40000 + i, &held));
    }
    egrate_free(r);
}

/* ---- the refusal answer ---- */

TEST(egproxy_refusal_answer)
{
    struct buf b;
    buf_init(&b, 1 << 16);
    egproxy_refusal(403, EGP_NOT_ALLOWLISTED,
                    "CONNECT x.example:443: x.example:443 is not in spec.permissions", &b);
    const char *s = buf_str(&b);
    const char *line = "HTTP/1.1 403 Forbidden by Tern egress proxy: host not in the session's "
                       "networkAllowlist\r\n";
    ASSERT_TRUE(strncmp(s, line, strlen(line)) == 0);
    ASSERT_CONTAINS(s, "X-Tern-Egress-Refused: not_allowlisted\r\n");
    ASSERT_CONTAINS(s, "Connection: close\r\n\r\ntern-egress-proxy: refused: CONNECT x.example:443");
    const char *body = strstr(s, "\r\n\r\n") + 4;
    char cl[64];
    snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", strlen(body));
    ASSERT_CONTAINS(s, cl);
    buf_done(&b);
}
