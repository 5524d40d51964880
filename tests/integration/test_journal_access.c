/* test_journal_access.c - the journal's locked door against a real etcd:
 * client-certificate TLS plus etcd users and roles (journal/access.c).
 * Every test runs on Debian's etcd 3.4 and, when `make kube` built it, on
 * etcd 3.6 (build/kube/bin/etcd): the same guarantees on both, and the
 * documented differences (3.4 lets any user keep any lease alive, list
 * leases and compact; 3.6 does not) asserted as they are. */
#include "harness.h"

#include "../support/etcd_fixture.h"
#include "base/mem.h"
#include "etcd/etcd.h"
#include "journal/journal.h"
#include "json/json.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct etcd_fixture fx;
static char dir[512];

#define ETCD36 "build/kube/bin/etcd"

/* The journal's PKI as the product makes it: one CA, a server certificate
 * for 127.0.0.1, client certificates for the operator and the runner, and
 * a second CA with a client certificate of its own (a stranger). No
 * certificate has a CommonName (etcd's gateway refuses those once auth is
 * on). */
static void make_pki(const char *d)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "set -e; exec >/dev/null 2>&1; cd '%s';"
             "key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $1.key; };"
             "ca() { key $1; openssl req -x509 -new -key $1.key -subj /O=tern/OU=$1 -days 2 -out "
             "$1.crt -addext basicConstraints=critical,CA:TRUE -addext "
             "keyUsage=critical,keyCertSign,cRLSign; };"
             "leaf() { key $1; openssl req -new -key $1.key -subj /O=tern/OU=$1 -out $1.csr;"
             " printf 'basicConstraints=critical,CA:FALSE\\nkeyUsage=critical,digitalSignature\\n"
             "extendedKeyUsage=%%s\\n%%s' $3 \"$4\" > $1.ext;"
             " openssl x509 -req -in $1.csr -CA $2.crt -CAkey $2.key -CAcreateserial -days 2 "
             "-extfile $1.ext -out $1.crt; };"
             "ca ca; ca other-ca;"
             "leaf server ca serverAuth,clientAuth 'subjectAltName=IP:127.0.0.1';"
             "leaf operator ca clientAuth ''; leaf runner ca clientAuth '';"
             "leaf runner2 ca clientAuth ''; leaf stranger other-ca clientAuth ''",
             d);
    if (system(cmd) != 0)
        th_fail(__FILE__, __LINE__, "openssl failed in %s", d);
}

/* What the tests hand out and keep for the process's life (paths the
 * fixture and clients borrow, clients' TLS settings): kept reachable here
 * so that LeakSanitizer does not count them. */
static void *kept[1024];
static size_t nkept;

static void *keep(void *p)
{
    if (nkept < sizeof kept / sizeof kept[0])
        kept[nkept++] = p;
    return p;
}

static char *path_of(const char *name)
{
    return keep(xasprintf("%s/%s", dir, name));
}

/* Starts the locked etcd (bin NULL: Debian's) and sets auth up. */
static void start(const char *bin)
{
    if (bin && access(bin, X_OK) != 0)
        TH_SKIP("etcd 3.6 is not built (make kube)");
    if (bin)
        setenv("TERN_ETCD_BIN", bin, 1);
    snprintf(dir, sizeof dir, "%s", th_tmpdir());
    make_pki(dir);
    char *cert = path_of("server.crt"), *key = path_of("server.key"), *ca = path_of("ca.crt");
    char *sub = path_of("etcd");
    struct tern_err e = {0};
    static const char *args[] = {"--bcrypt-cost=4", NULL}; /* the fixture keeps it */
    struct etcd_fixture_opts o = {
        .cert_file = cert, .key_file = key, .trusted_ca_file = ca, .extra_args = args};
    if (etcd_fixture_start(&fx, sub, &o, &e))
        th_fail(__FILE__, __LINE__, "etcd fixture: %s", e.msg);
    /* (cert, key, ca and sub stay allocated: the fixture borrows them) */
}

static struct httpc_tls tls_of(const char *who)
{
    char crt[64], key[64];
    snprintf(crt, sizeof crt, "%s.crt", who);
    snprintf(key, sizeof key, "%s.key", who);
    return (struct httpc_tls){.ca_file = path_of("ca.crt"),
                              .cert_file = who ? path_of(crt) : NULL,
                              .key_file = who ? path_of(key) : NULL};
}

/* A client over TLS with who's certificate (NULL: none), as user (NULL:
 * none) with password. The tls struct is kept for the process's life. */
static struct etcd *client(const char *who, const char *user, const char *password)
{
    struct httpc_tls *t = keep(xcalloc(1, sizeof *t));
    *t = tls_of(who);
    if (!who)
        t->cert_file = t->key_file = NULL;
    const char *eps[] = {fx.tls_url};
    struct etcd *c = NULL;
    struct tern_err e = {0};
    ASSERT_OK(etcd_new(&(struct etcd_config){.endpoints = eps,
                                             .nendpoints = 1,
                                             .tls = t,
                                             .username = user,
                                             .password = password},
                       &c, &e));
    return c;
}

static void init_access(bool *enabled)
{
    struct httpc_tls t = tls_of("operator");
    const char *eps[] = {fx.tls_url};
    struct etcd_config base = {.endpoints = eps, .nendpoints = 1, .tls = &t};
    struct tern_err e = {0};
    int r = journal_access_init(&(struct journal_access_init){.base = &base,
                                                              .root_password = "root-pw",
                                                              .operator_user = JOURNAL_OPERATOR_USER,
                                                              .operator_password = "op-pw",
                                                              .ret_enabled = enabled},
                                &e);
    if (r)
        th_fail(__FILE__, __LINE__, "journal_access_init: %d %s", r, e.msg);
}

static int put_raw(struct etcd *c, const char *key, const char *value)
{
    struct etcd_put_resp pr = {0};
    struct tern_err e = {0};
    int r = etcd_put(c, &(struct etcd_put_req){.key = key, .value = value,
                                               .value_len = strlen(value)},
                     &pr, &e);
    etcd_put_resp_done(&pr);
    return r;
}

static int del_prefix(struct etcd *c, const char *prefix)
{
    struct etcd_delete_resp dr = {0};
    struct tern_err e = {0};
    int r = etcd_delete(c, &(struct etcd_delete_req){.keys = {.key = prefix, .prefix = true}},
                        &dr, &e);
    etcd_delete_resp_done(&dr);
    return r;
}

static void append_user_message(struct journal *j, const char *text)
{
    cJSON *d = cJSON_CreateObject();
    json_add_string(d, "text", text);
    struct tern_err e = {0};
    int r = journal_append(
        j, &(struct journal_append_req){.type = JOURNAL_EV_USER_MESSAGE, .data = d}, NULL, &e);
    cJSON_Delete(d);
    if (r)
        th_fail(__FILE__, __LINE__, "append: %d %s", r, e.msg);
}

static void init_is_idempotent(const char *bin)
{
    start(bin);
    bool enabled = false;
    init_access(&enabled);
    ASSERT_TRUE(enabled);
    enabled = false;
    init_access(&enabled); /* a restart of the operator: repairs, changes nothing */
    ASSERT_FALSE(enabled);
    /* a wrong root password is told as such */
    struct httpc_tls t = tls_of("operator");
    const char *eps[] = {fx.tls_url};
    struct etcd_config base = {.endpoints = eps, .nendpoints = 1, .tls = &t};
    struct tern_err e = {0};
    ASSERT_EQ_INT(journal_access_init(&(struct journal_access_init){.base = &base,
                                                                    .root_password = "wrong",
                                                                    .operator_user = "tern-operator",
                                                                    .operator_password = "op-pw"},
                                      &e),
                  TERN_EAUTH);
    ASSERT_CONTAINS(e.msg, "root password");
    etcd_fixture_stop(&fx);
}
TEST(init_enables_auth_once_on_34) { init_is_idempotent(NULL); }
TEST(init_enables_auth_once_on_36) { init_is_idempotent(ETCD36); }

/* Nothing without a certificate of the journal's CA; nothing with one but
 * without a user. */
static void door(const char *bin)
{
    start(bin);
    init_access(NULL);
    struct tern_err e = {0};
    struct etcd_kv *kv = NULL;
    struct etcd *c = client(NULL, JOURNAL_OPERATOR_USER, "op-pw");
    int r = etcd_get(c, "/tern/v1/s/a/sum", &kv, NULL, &e);
    ASSERT_TRUE(r == TERN_EUNREACHABLE || r == -EIO);
    etcd_free(c);
    c = client("stranger", JOURNAL_OPERATOR_USER, "op-pw");
    r = etcd_get(c, "/tern/v1/s/a/sum", &kv, NULL, &e);
    ASSERT_TRUE(r == TERN_EUNREACHABLE || r == -EIO);
    etcd_free(c);
    c = client("runner", NULL, NULL); /* the door opens, but who is it? */
    ASSERT_EQ_INT(etcd_get(c, "/tern/v1/s/a/sum", &kv, NULL, &e), TERN_EAUTH);
    ASSERT_EQ_INT(put_raw(c, "/tern/v1/s/a/ev/0000000000000001", "{}"), TERN_EAUTH);
    etcd_free(c);
    c = client("operator", JOURNAL_OPERATOR_USER, "not-the-password");
    ASSERT_EQ_INT(etcd_get(c, "/tern/v1/s/a/sum", &kv, NULL, &e), TERN_EAUTH);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}
TEST(no_certificate_or_no_user_no_journal_on_34) { door(NULL); }
TEST(no_certificate_or_no_user_no_journal_on_36) { door(ETCD36); }

/* A session's user inside its own journal: everything a turn does. Outside
 * it: nothing. */
static void session_scope(const char *bin, bool is36)
{
    start(bin);
    init_access(NULL);
    struct tern_err e = {0};
    struct etcd *op = client("operator", JOURNAL_OPERATOR_USER, "op-pw");
    struct etcd *admin = client("operator", JOURNAL_ROOT_USER, "root-pw");
    ASSERT_OK(journal_access_grant(admin, "uid-a", NULL, "pw-a", &e));
    ASSERT_OK(journal_access_grant(admin, "uid-b", NULL, "pw-b", &e));
    ASSERT_OK(journal_access_grant(admin, "uid-a", NULL, "pw-a", &e)); /* idempotent */
    bool ok = false;
    ASSERT_OK(journal_access_check(admin, "uid-a", &ok, &e));
    ASSERT_TRUE(ok);
    ASSERT_OK(journal_access_check(admin, "uid-c", &ok, &e));
    ASSERT_FALSE(ok);

    /* session b has a journal and a held turn lock */
    struct etcd *b = client("runner", "tern-s-uid-b", "pw-b");
    struct journal *jb = NULL;
    ASSERT_OK(journal_open(b, "uid-b", NULL, &jb, &e));
    append_user_message(jb, "b's secret conversation");
    struct journal_lock *lb = NULL;
    ASSERT_OK(journal_lock_acquire(b, "uid-b", "runner-b", 30, &lb, &e));

    /* session a's runner: its own journal works end to end */
    struct etcd *a = client("runner", "tern-s-uid-a", "pw-a");
    struct journal *ja = NULL;
    ASSERT_OK(journal_open(a, "uid-a", NULL, &ja, &e));
    ASSERT_OK(journal_create_meta(ja, "ns", "a", &e));
    append_user_message(ja, "hello");
    struct journal_lock *la = NULL;
    ASSERT_OK(journal_lock_acquire(a, "uid-a", "runner-a", 30, &la, &e));
    ASSERT_OK(journal_lock_release(la, &e));
    struct journal_summary sum;
    ASSERT_OK(journal_replay(ja, 1, NULL, NULL, &sum, &e));
    ASSERT_EQ_INT(sum.last_seq, 1);
    journal_summary_done(&sum);

    /* ... and nothing of b's: read, append, delete the journal, delete or
     * take over the lock, revoke the lock's lease */
    struct journal *jx = NULL;
    ASSERT_EQ_INT(journal_open(a, "uid-b", NULL, &jx, &e), TERN_EAUTH);
    struct etcd_kv *kv = NULL;
    ASSERT_EQ_INT(etcd_get(a, "/tern/v1/s/uid-b/ev/0000000000000001", &kv, NULL, &e), TERN_EAUTH);
    ASSERT_EQ_INT(put_raw(a, "/tern/v1/s/uid-b/ev/0000000000000002",
                          "{\"v\":1,\"seq\":2,\"type\":\"approval_decided\"}"),
                  TERN_EAUTH);
    ASSERT_EQ_INT(del_prefix(a, "/tern/v1/s/uid-b/"), TERN_EAUTH);
    ASSERT_EQ_INT(del_prefix(a, "/tern/v1/s/uid-b/lock"), TERN_EAUTH);
    ASSERT_EQ_INT(put_raw(a, "/tern/v1/s/uid-b/lock", "{\"owner\":\"intruder\"}"), TERN_EAUTH);
    ASSERT_EQ_INT(etcd_lease_revoke(a, journal_lock_lease(lb), &e), TERN_EAUTH);
    /* nor the prefix of every session, nor a sibling prefix ("uid-a" must
     * not reach "uid-ab") */
    ASSERT_EQ_INT(del_prefix(a, "/tern/v1/s/"), TERN_EAUTH);
    ASSERT_EQ_INT(put_raw(a, "/tern/v1/s/uid-ab/sum", "{}"), TERN_EAUTH);
    ASSERT_EQ_INT(put_raw(a, "/registry/anything", "x"), TERN_EAUTH);
    /* nor users and roles */
    ASSERT_EQ_INT(etcd_user_add(a, "tern-s-uid-b", "mine-now", &e), TERN_EAUTH);
    ASSERT_EQ_INT(etcd_user_password(a, "tern-s-uid-b", "mine-now", &e), TERN_EAUTH);
    ASSERT_EQ_INT(etcd_role_grant(a, "tern-s-uid-a", ETCD_PERM_READWRITE,
                                  &(struct etcd_keys){.key = "/", .prefix = true}, &e),
                  TERN_EAUTH);
    ASSERT_EQ_INT(etcd_auth_disable(a, &e), TERN_EAUTH);
    /* b's lock is still held by b, b's journal intact */
    ASSERT_OK(etcd_get(op, "/tern/v1/s/uid-b/lock", &kv, NULL, &e));
    ASSERT_CONTAINS(kv->value, "runner-b");
    etcd_kv_free(kv);
    ASSERT_OK(journal_replay(jb, 1, NULL, NULL, &sum, &e));
    ASSERT_EQ_INT(sum.last_seq, 1);
    journal_summary_done(&sum);

    /* What etcd's lease API allows besides: 3.4 lets any user refresh a
     * lease whose id it learns (which it can: 3.4 lists every lease to any
     * user) and compact the history; 3.6 refuses all three. A refreshed
     * lease only keeps b's lock from expiring while b's runner is gone (the
     * next turn waits, TERN_LOCK_WAIT_MS); compaction loses no data (the
     * journal never reads old revisions; a watch relists). */
    int r_keep = etcd_lease_keepalive(a, journal_lock_lease(lb), NULL, &e);
    int r_compact = etcd_compact(a, 2, false, &e);
    if (is36) {
        ASSERT_EQ_INT(r_keep, TERN_EAUTH);
        ASSERT_EQ_INT(r_compact, TERN_EAUTH);
    } else {
        ASSERT_EQ_INT(r_keep, 0);
        ASSERT_EQ_INT(r_compact, 0);
    }

    /* the operator's user reaches every session but administers nothing */
    struct journal *jo = NULL;
    ASSERT_OK(journal_open(op, "uid-b", NULL, &jo, &e));
    append_user_message(jo, "from the operator");
    journal_free(jo);
    ASSERT_EQ_INT(etcd_user_add(op, "tern-s-evil", "x", &e), TERN_EAUTH);
    ASSERT_EQ_INT(etcd_auth_disable(op, &e), TERN_EAUTH);

    /* revoking a's access ends it at once */
    ASSERT_OK(journal_access_revoke(admin, "uid-a", &e));
    ASSERT_OK(journal_access_revoke(admin, "uid-a", &e)); /* idempotent */
    ASSERT_EQ_INT(etcd_get(a, "/tern/v1/s/uid-a/sum", &kv, NULL, &e), TERN_EAUTH);
    ASSERT_OK(journal_access_check(admin, "uid-a", &ok, &e));
    ASSERT_FALSE(ok);

    ASSERT_OK(journal_lock_release(lb, &e));
    journal_free(ja);
    journal_free(jb);
    etcd_free(a);
    etcd_free(b);
    etcd_free(op);
    etcd_free(admin);
    etcd_fixture_stop(&fx);
}
TEST(session_user_reaches_only_its_journal_on_34) { session_scope(NULL, false); }
TEST(session_user_reaches_only_its_journal_on_36) { session_scope(ETCD36, true); }

static void cp(const char *from, const char *to)
{
    char *cmd = xasprintf("cp '%s/%s' '%s/%s'", dir, from, dir, to);
    if (system(cmd) != 0)
        th_fail(__FILE__, __LINE__, "%s", cmd);
    free(cmd);
}

/* Rotation: leaf certificates (server and client) are re-read from disk for
 * every new connection, so they rotate without a restart; the trusted CA is
 * read by etcd only at start, so a new CA takes a restart (with both CAs in
 * the bundle in between). */
static void rotation(const char *bin)
{
    start(bin);
    init_access(NULL);
    struct tern_err e = {0};
    /* the operator's client reads its certificate from these files */
    cp("operator.crt", "live.crt");
    cp("operator.key", "live.key");
    struct httpc_tls t = {.ca_file = path_of("ca.crt"),
                          .cert_file = path_of("live.crt"),
                          .key_file = path_of("live.key")};
    const char *eps[] = {fx.tls_url};
    struct etcd *c = NULL;
    ASSERT_OK(etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1, .tls = &t,
                                             .username = JOURNAL_OPERATOR_USER,
                                             .password = "op-pw"},
                       &c, &e));
    ASSERT_OK(put_raw(c, "/tern/v1/s/r/meta", "1"));
    /* a new client certificate from the same CA: taken by the next
     * connection of the same client */
    cp("runner2.crt", "live.crt");
    cp("runner2.key", "live.key");
    struct etcd *c2 = NULL;
    ASSERT_OK(etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1, .tls = &t,
                                             .username = JOURNAL_OPERATOR_USER,
                                             .password = "op-pw"},
                       &c2, &e));
    ASSERT_OK(put_raw(c2, "/tern/v1/s/r/meta", "2"));
    etcd_free(c2);
    /* a certificate of another CA on disk: a new connection is refused */
    cp("stranger.crt", "live.crt");
    cp("stranger.key", "live.key");
    ASSERT_OK(etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1, .tls = &t,
                                             .username = JOURNAL_OPERATOR_USER,
                                             .password = "op-pw"},
                       &c2, &e));
    int r = put_raw(c2, "/tern/v1/s/r/meta", "3");
    ASSERT_TRUE(r == TERN_EUNREACHABLE || r == -EIO || r == TERN_EUNKNOWN);
    etcd_free(c2);
    etcd_free(c);

    /* CA rotation: the bundle holds both CAs, etcd restarts to read it,
     * then a certificate of the new CA works */
    char *cmd = xasprintf("cd '%s' && cat ca.crt other-ca.crt > bundle.tmp && mv bundle.tmp "
                          "ca.crt",
                          dir);
    if (system(cmd) != 0)
        th_fail(__FILE__, __LINE__, "%s", cmd);
    free(cmd);
    etcd_fixture_kill(&fx);
    if (etcd_fixture_restart(&fx, &e))
        th_fail(__FILE__, __LINE__, "restart: %s", e.msg);
    ASSERT_OK(etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1, .tls = &t,
                                             .username = JOURNAL_OPERATOR_USER,
                                             .password = "op-pw"},
                       &c2, &e));
    ASSERT_OK(put_raw(c2, "/tern/v1/s/r/meta", "4"));
    etcd_free(c2);
    etcd_fixture_stop(&fx);
}
TEST_T(certificates_rotate_on_34, 60) { rotation(NULL); }
TEST_T(certificates_rotate_on_36, 60) { rotation(ETCD36); }

/* A password read from a file is read again when the client has to log in
 * again, so a rotated password needs no restart. */
static void password_file(const char *bin)
{
    start(bin);
    init_access(NULL);
    struct tern_err e = {0};
    struct etcd *admin = client("operator", JOURNAL_ROOT_USER, "root-pw");
    ASSERT_OK(journal_access_grant(admin, "uid-p", NULL, "first", &e));
    char *pf = path_of("password");
    FILE *f = fopen(pf, "w");
    fputs("first\n", f);
    fclose(f);
    struct httpc_tls t = tls_of("runner");
    const char *eps[] = {fx.tls_url};
    struct etcd *c = NULL;
    ASSERT_OK(etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1, .tls = &t,
                                             .username = "tern-s-uid-p", .password_file = pf},
                       &c, &e));
    ASSERT_OK(put_raw(c, "/tern/v1/s/uid-p/meta", "1"));
    /* the password changes (and the old token dies with the user's
     * re-creation); the file says the new one */
    ASSERT_OK(journal_access_revoke(admin, "uid-p", &e));
    ASSERT_OK(journal_access_grant(admin, "uid-p", NULL, "second", &e));
    f = fopen(pf, "w");
    fputs("second\n", f);
    fclose(f);
    ASSERT_OK(put_raw(c, "/tern/v1/s/uid-p/meta", "2"));
    etcd_free(c);
    etcd_free(admin);
    etcd_fixture_stop(&fx);
}
TEST(password_file_is_reread_on_34) { password_file(NULL); }
TEST(password_file_is_reread_on_36) { password_file(ETCD36); }

/* The operator's summary watch under its prefix role: etcd_revision (a
 * range outside every prefix) is refused, etcd_revision_in the watched
 * prefix reads the revision, and a watch "from now" (which pins the
 * revision the same way) delivers a put. Without it the operator's watch
 * never started on a locked journal. */
struct watch_probe {
    struct etcd *c;
    atomic_bool seen;
};

static int probe_batch(void *ctx, const struct etcd_watch_batch *b)
{
    struct watch_probe *p = ctx;
    if (b->nevents > 0)
        atomic_store(&p->seen, true);
    return b->nevents > 0 ? 1 : 0;
}

static void *probe_writer(void *arg)
{
    struct watch_probe *p = arg;
    /* until the watch has seen one: each put is after the watch began, or
     * the next one is */
    for (int i = 0; i < 600 && !atomic_load(&p->seen); i++) {
        put_raw(p->c, "/tern/v1/s/uid-w/sum", "{}");
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void prefix_role_watch(const char *bin)
{
    start(bin);
    init_access(NULL);
    struct etcd *op = client("operator", JOURNAL_OPERATOR_USER, "op-pw");
    struct tern_err e = {0};
    int64_t rev = 0;
    ASSERT_TRUE(etcd_revision(op, &rev, &e) != 0); /* outside the role */
    e = (struct tern_err){0};
    ASSERT_OK(etcd_revision_in(op, &(struct etcd_keys){.key = "/tern/v1/s/", .prefix = true},
                               &rev, &e));
    ASSERT_TRUE(rev > 0);
    struct etcd *w = client("operator", JOURNAL_OPERATOR_USER, "op-pw");
    struct watch_probe p = {.c = w};
    pthread_t th;
    ASSERT_EQ_INT(pthread_create(&th, NULL, probe_writer, &p), 0);
    int r = etcd_watch(op,
                       &(struct etcd_watch_req){.keys = {.key = "/tern/v1/s/", .prefix = true},
                                                .give_up_ms = 20000},
                       probe_batch, &p, NULL, NULL, &e);
    atomic_store(&p.seen, true);
    pthread_join(th, NULL);
    if (r != 1)
        th_fail(__FILE__, __LINE__, "watch from now under the operator's role: %d %s", r, e.msg);
    etcd_free(w);
    etcd_free(op);
    etcd_fixture_stop(&fx);
}
TEST(prefix_role_reads_the_revision_and_watches_on_34) { prefix_role_watch(NULL); }
TEST(prefix_role_reads_the_revision_and_watches_on_36) { prefix_role_watch(ETCD36); }
