/* access.c - who may touch which journal keys: the etcd users and roles of
 * the journal (journal.h, "access"; docs/journal.md, "The locked door").
 *
 *   root                 etcd's root role; used only for the calls below
 *   tern-operator        role tern-operator: READWRITE on /tern/v1/s/
 *   tern-s-<uid>         role tern-s-<uid>: READWRITE on /tern/v1/s/<uid>/
 *                        (one per session: what that session's runner may do)
 */
#include "journal_internal.h"

#include "base/mem.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

char *journal_session_user(const char *uid)
{
    return journal__valid_uid(uid) &&
                   strlen(JOURNAL_SESSION_USER_PREFIX) + strlen(uid) <= TERN_ETCD_MAX_USER
               ? xasprintf(JOURNAL_SESSION_USER_PREFIX "%s", uid)
               : NULL;
}

/* Adds a user, or sets its password when it exists already. */
static int ensure_user(struct etcd *admin, const char *name, const char *password,
                       struct tern_err *err)
{
    int r = etcd_user_add(admin, name, password, err);
    if (r == -EEXIST)
        r = etcd_user_password(admin, name, password, err);
    return r ? err_wrap(err, r, "journal access: user %s", name) : 0;
}

/* A role with exactly one READWRITE range, granted to user. Each step
 * tolerates having been done before, so an interrupted setup is completed
 * by the next call. */
static int ensure_role(struct etcd *admin, const char *role, const char *prefix,
                       const char *user, struct tern_err *err)
{
    int r = etcd_role_add(admin, role, err);
    if (r && r != -EEXIST)
        return err_wrap(err, r, "journal access: role %s", role);
    struct etcd_keys k = {.key = prefix, .prefix = true};
    r = etcd_role_grant(admin, role, ETCD_PERM_READWRITE, &k, err);
    if (r)
        return err_wrap(err, r, "journal access: grant %s on %s", role, prefix);
    r = etcd_user_grant(admin, user, role, err);
    if (r)
        return err_wrap(err, r, "journal access: grant role %s to %s", role, user);
    return 0;
}

/* One more range for role (idempotent). */
static int grant_range(struct etcd *admin, const char *role, int perm, const char *prefix,
                       struct tern_err *err)
{
    struct etcd_keys k = {.key = prefix, .prefix = true};
    int r = etcd_role_grant(admin, role, perm, &k, err);
    return r ? err_wrap(err, r, "journal access: grant %s on %s", role, prefix) : 0;
}

int journal_access_init(const struct journal_access_init *in, struct tern_err *err)
{
    if (!in || !in->base || !in->root_password || !in->operator_user ||
        !in->operator_password)
        return err_set(err, TERN_EINVALID, "journal access init: missing settings");
    struct etcd_config rc = *in->base;
    rc.username = JOURNAL_ROOT_USER;
    rc.password = in->root_password;
    rc.password_file = NULL;
    struct etcd_config anon = *in->base;
    anon.username = anon.password = anon.password_file = NULL;
    struct etcd *root = NULL, *bare = NULL;
    int r = etcd_new(&rc, &root, err);
    if (r)
        goto out;
    r = etcd_authenticate_check(root, err);
    if (r == -ENOTSUP) {
        /* auth is not on yet: only holders of a client certificate can
         * reach this etcd, and the first of them sets it up */
        if ((r = etcd_new(&anon, &bare, err)))
            goto out;
        if ((r = ensure_user(bare, JOURNAL_ROOT_USER, in->root_password, err)))
            goto out;
        r = etcd_user_grant(bare, JOURNAL_ROOT_USER, "root", err);
        if (r) {
            err_wrap(err, r, "journal access: grant root to root");
            goto out;
        }
        if ((r = ensure_user(bare, in->operator_user, in->operator_password, err)) ||
            (r = ensure_role(bare, in->operator_user, JOURNAL_ALL_PREFIX, in->operator_user,
                             err)) ||
            (r = grant_range(bare, in->operator_user, ETCD_PERM_READWRITE,
                             JOURNAL_BUDGET_PREFIX, err)))
            goto out;
        r = etcd_auth_enable(bare, err);
        if (r) {
            err_wrap(err, r, "journal access: enable auth");
            goto out;
        }
        if (in->ret_enabled)
            *in->ret_enabled = true;
        goto out;
    }
    if (r) {
        err_wrap(err, r, "journal access: authenticate as root (is the root password the one "
                         "the journal was set up with?)");
        goto out;
    }
    /* auth is on: repair the operator's user and role */
    if ((r = ensure_user(root, in->operator_user, in->operator_password, err)) ||
        (r = ensure_role(root, in->operator_user, JOURNAL_ALL_PREFIX, in->operator_user, err)) ||
        (r = grant_range(root, in->operator_user, ETCD_PERM_READWRITE, JOURNAL_BUDGET_PREFIX,
                         err)))
        goto out;
out:
    etcd_free(root);
    etcd_free(bare);
    return r;
}

int journal_access_grant(struct etcd *admin, const char *uid, const char *ns,
                         const char *password, struct tern_err *err)
{
    char *user = journal_session_user(uid), *prefix = journal_prefix(uid);
    char *mirrors = NULL, *counters = NULL, *records = NULL;
    int r;
    if (!user || !prefix || !password || !*password) {
        r = err_set(err, TERN_EINVALID, "journal access: bad uid or password");
        goto out;
    }
    if ((r = ensure_user(admin, user, password, err)))
        goto out;
    if ((r = ensure_role(admin, user, prefix, user, err)) || !ns || !*ns)
        goto out;
    /* team budgets (docs/budgets.md): its namespace's mirrors to read, their
     * counters to reserve and settle in, its own reservation records */
    mirrors = xasprintf("/tern/v1/bs/%s/", ns);
    counters = xasprintf("/tern/v1/b/%s/", ns);
    records = xasprintf("/tern/v1/br/%s/%s/", ns, uid);
    if ((r = grant_range(admin, user, ETCD_PERM_READ, mirrors, err)) ||
        (r = grant_range(admin, user, ETCD_PERM_READWRITE, counters, err)))
        goto out;
    r = grant_range(admin, user, ETCD_PERM_READWRITE, records, err);
out:
    free(user);
    free(prefix);
    free(mirrors);
    free(counters);
    free(records);
    return r;
}

int journal_access_check(struct etcd *admin, const char *uid, bool *ret_ok,
                         struct tern_err *err)
{
    char *user = journal_session_user(uid);
    if (!user)
        return err_set(err, TERN_EINVALID, "journal access: bad uid");
    char **roles = NULL;
    int r = etcd_user_roles(admin, user, &roles, NULL, err);
    bool ok = false;
    if (r == TERN_ENOTFOUND) {
        r = 0;
    } else if (r == 0) {
        for (char **p = roles; *p; p++)
            ok = ok || strcmp(*p, user) == 0;
    }
    etcd_strings_free(roles);
    free(user);
    if (r == 0)
        *ret_ok = ok;
    return r;
}

int journal_access_revoke(struct etcd *admin, const char *uid, struct tern_err *err)
{
    char *user = journal_session_user(uid);
    if (!user)
        return err_set(err, TERN_EINVALID, "journal access: bad uid");
    int r = etcd_user_delete(admin, user, err);
    if (r == TERN_ENOTFOUND)
        r = 0;
    if (r == 0) {
        r = etcd_role_delete(admin, user, err);
        if (r == TERN_ENOTFOUND)
            r = 0;
    }
    if (r)
        err_wrap(err, r, "journal access: remove %s", user);
    free(user);
    return r;
}
