/* kubectl-tern - the kubectl plugin for AgentSessions.
 *
 *   kubectl tern approve SESSION [ID] [--reason TEXT] [--as-user NAME]
 *   kubectl tern deny SESSION [ID] [--reason TEXT] [--as-user NAME]
 *   kubectl tern memory approve|reject SESSION ID [--reason TEXT] [--as-user NAME]
 *   kubectl tern say SESSION MESSAGE
 *   kubectl tern retry SESSION
 *   kubectl tern fork SESSION NEW-NAME
 *   kubectl tern suspend SESSION | resume SESSION
 *   kubectl tern get SESSION
 *   kubectl tern logs [-f] [-o json] SESSION
 *   kubectl tern ls SESSION [PATH] [--depth N]
 *   kubectl tern cp SESSION:PATH DEST (a persisted artifact from the artifact store)
 *   kubectl tern persist SESSION
 * with -n/--namespace, --context, --kubeconfig, --as, --as-group as kubectl
 * has them. logs, ls and cp read the session through the aggregated API
 * stream.tern.dev (docs/stream-api.md): the API server authenticates and
 * authorizes them; nobody needs the journal's etcd or the sandbox.
 *
 * Every intent goes through the resource (annotations or spec), never to
 * the operator or the journal directly: the operator stays the one writer
 * of status and journal, and the API server's admission (the chart's
 * ValidatingAdmissionPolicy) decides who may approve. */
#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "http/httpc.h"
#include "json/json.h"
#include "kube/kclient.h"
#include "kube/kubeconfig.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const struct kgvr sessions = {"tern.dev", "v1alpha1", "agentsessions"};

struct cli {
    const char *cmd;
    const char *args[3];
    int nargs;
    const char *ns, *context, *kubeconfig, *reason, *as_user, *output, *as;
    const char *as_groups[TERN_KUBE_MAX_IMPERSONATE];
    int nas_groups;
    int64_t depth;
    bool follow;
    struct kubeconfig *kc;
    struct kclient *cl;
};

static const char usage_text[] =
    "kubectl tern: drive AgentSessions (tern.dev/v1alpha1)\n"
    "\n"
    "Commands:\n"
    "  approve SESSION [ID]    approve the pending tool call (ID defaults to the pending one)\n"
    "  deny SESSION [ID]       deny it; --reason TEXT is recorded in the journal\n"
    "  memory approve SESSION ID  apply a memory proposal (status.memoryProposals) to the\n"
    "                          session's memory ConfigMap\n"
    "  memory reject SESSION ID   reject it; --reason TEXT is recorded in the journal\n"
    "  say SESSION MESSAGE     append a user message (spec.messages); it becomes a turn\n"
    "                          (refused, saying why, when it would not be processed)\n"
    "  retry SESSION           continue a Failed session with a new turn from the journal\n"
    "                          (transient failures; a limit is raised in spec.limits)\n"
    "  fork SESSION NEW-NAME   fork conversation and workspace at the next turn boundary\n"
    "  suspend SESSION         remove the sandbox pod, keep workspace and journal\n"
    "  resume SESSION          undo suspend\n"
    "  get SESSION             a rich view: phase, turn, usage, approval, sandbox, conditions\n"
    "  logs [-f] SESSION       what the agent did: every event, tool output in full; -f follows\n"
    "                          new ones and a running command's output as it is produced,\n"
    "                          and ends when the session has finished\n"
    "  ls SESSION [PATH]       the session's workspace (--depth N, default 1)\n"
    "  cp SESSION:PATH DEST    copy a file of the workspace (an artifact: output/...) to DEST,\n"
    "                          also while the session's sandbox is parked; a persisted\n"
    "                          artifact comes from the artifact store (sha256 checked),\n"
    "                          also after the pod and (retainArtifacts) the session are gone\n"
    "  persist SESSION         copy output/ to the artifact store now (between turns)\n"
    "\n"
    "Flags:\n"
    "  -n, --namespace NS      the session's namespace (default: the context's)\n"
    "      --context NAME      kubeconfig context\n"
    "      --kubeconfig FILE   kubeconfig file (default: $KUBECONFIG, ~/.kube/config)\n"
    "      --reason TEXT       approve/deny/memory: why (tern.dev/reason)\n"
    "      --as-user NAME      approve/deny/memory: tern.dev/decided-by (default: who the API\n"
    "                          server says you are, if it can say)\n"
    "  -o, --output json       logs: one JSON object per line (the events as stored)\n"
    "      --as USER           act as USER (impersonation), --as-group GROUP likewise\n";

static int die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

static int parse(int argc, char **argv, struct cli *c)
{
    c->depth = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define VAL(name)                                                                                  \
    ((strcmp(a, name) == 0 && i + 1 < argc) ? argv[++i]                                           \
     : (strncmp(a, name "=", sizeof name) == 0) ? a + sizeof name : NULL)
        const char *v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0 || strcmp(a, "help") == 0) {
            fputs(usage_text, stdout);
            exit(0);
        } else if (strcmp(a, "-f") == 0 || strcmp(a, "--follow") == 0) {
            c->follow = true;
        } else if ((v = VAL("-n")) || (v = VAL("--namespace"))) {
            c->ns = v;
        } else if ((v = VAL("--context"))) {
            c->context = v;
        } else if ((v = VAL("--kubeconfig"))) {
            c->kubeconfig = v;
        } else if ((v = VAL("--reason"))) {
            c->reason = v;
        } else if ((v = VAL("--as-user"))) {
            c->as_user = v;
        } else if ((v = VAL("-o")) || (v = VAL("--output"))) {
            if (strcmp(v, "json") != 0)
                return die("--output: only json is supported");
            c->output = v;
        } else if ((v = VAL("--as"))) {
            c->as = v;
        } else if ((v = VAL("--as-group"))) {
            if (c->nas_groups + 1 >= TERN_KUBE_MAX_IMPERSONATE)
                return die("too many --as-group");
            c->as_groups[c->nas_groups++] = v;
        } else if ((v = VAL("--depth"))) {
            if (num_parse_range(v, 0, 32, &c->depth))
                return die("--depth: a number from 0 to 32");
        } else if (a[0] == '-' && a[1]) {
            return die("unknown flag %s (see kubectl tern --help)", a);
        } else if (!c->cmd) {
            c->cmd = a;
        } else if (c->nargs < 3) {
            c->args[c->nargs++] = a;
        } else {
            return die("too many arguments");
        }
#undef VAL
    }
    if (!c->cmd) {
        fputs(usage_text, stderr);
        return 1;
    }
    return 0;
}

static int connect_api(struct cli *c)
{
    struct kubeconfig_overrides ov = {.context = c->context, .namespace = c->ns, .as = c->as,
                                      .as_groups = c->nas_groups ? c->as_groups : NULL};
    struct tern_err err = {0};
    int r = c->kubeconfig ? kubeconfig_load_file(c->kubeconfig, &ov, &c->kc, &err)
                          : kubeconfig_load_default(&ov, &c->kc, &err);
    if (r)
        return die("kubeconfig: %s", err.msg);
    if (!c->ns)
        c->ns = c->kc->namespace;
    c->cl = kclient_new(c->kc, NULL);
    return 0;
}

static int get_session(struct cli *c, const char *name, cJSON **ret)
{
    struct kclient_err ke = {0};
    int r = kclient_get(c->cl, &sessions, c->ns, name, ret, &ke);
    if (r == TERN_ENOTFOUND)
        return die("agentsession %s not found in namespace %s", name, c->ns);
    if (r)
        return die("reading agentsession %s/%s: %s", c->ns, name, ke.e.msg);
    return 0;
}

static const char *str_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = json_get(o, a);
    if (b)
        v = json_get(v, b);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int patch(struct cli *c, const char *name, enum kclient_patch_type type, cJSON *body,
                 const char *done)
{
    char *text = json_print(body);
    cJSON_Delete(body);
    struct kclient_err ke = {0};
    int r = kclient_patch(c->cl, &sessions, c->ns, name, type, text, strlen(text), NULL, NULL,
                          &ke);
    free(text);
    if (r == TERN_ENOTFOUND)
        return die("agentsession %s not found in namespace %s", name, c->ns);
    if (r)
        return die("%s", ke.message[0] ? ke.message : ke.e.msg);
    printf("agentsession.tern.dev/%s %s\n", name, done);
    return 0;
}

/* Who the API server says we are (authentication.k8s.io/v1 SelfSubjectReview),
 * or NULL when it cannot say. */
static char *whoami(struct cli *c)
{
    const char *body = "{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"SelfSubjectReview\"}";
    cJSON *out = NULL;
    struct kclient_err ke = {0};
    if (kclient_request(c->cl, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                        "application/json", body, strlen(body), 0, &out, &ke))
        return NULL;
    const cJSON *u = json_get(json_get(json_get(out, "status"), "userInfo"), "username");
    char *name = cJSON_IsString(u) ? xstrdup(u->valuestring) : NULL;
    cJSON_Delete(out);
    return name;
}

static int cmd_decide(struct cli *c, bool approve)
{
    if (c->nargs < 1)
        return die("usage: kubectl tern %s SESSION [ID]", approve ? "approve" : "deny");
    const char *name = c->args[0];
    cJSON *s = NULL;
    if (get_session(c, name, &s))
        return 1;
    const char *pending = str_at(json_get(s, "status"), "pendingApproval", "id");
    const char *id = c->nargs > 1 ? c->args[1] : pending;
    if (!pending) {
        int rc = id ? die("agentsession %s has no pending approval, so %s cannot be %s; nothing "
                          "was changed (kubectl tern get %s shows its state)",
                          name, id, approve ? "approved" : "denied", name)
                    : die("agentsession %s has no pending approval; nothing was changed", name);
        cJSON_Delete(s);
        return rc;
    }
    if (strcmp(id, pending) != 0) {
        int rc = die("%s is not the pending approval of agentsession %s (pending: %s); nothing "
                     "was changed",
                     id, name, pending);
        cJSON_Delete(s);
        return rc;
    }
    char *user = c->as_user ? xstrdup(c->as_user) : whoami(c);
    cJSON *p = cJSON_CreateObject();
    cJSON *anns = cJSON_AddObjectToObject(cJSON_AddObjectToObject(p, "metadata"), "annotations");
    json_add_string(anns, approve ? "tern.dev/approve" : "tern.dev/deny", id);
    if (user)
        json_add_string(anns, "tern.dev/decided-by", user);
    if (c->reason)
        json_add_string(anns, "tern.dev/reason", c->reason);
    const char *summary = str_at(json_get(s, "status"), "pendingApproval", "summary");
    char *done = xasprintf("%s %s%s%s%s", approve ? "approved" : "denied", id,
                           summary ? " (" : "", summary ? summary : "", summary ? ")" : "");
    int r = patch(c, name, KCLIENT_PATCH_MERGE, p, done);
    free(done);
    free(user);
    cJSON_Delete(s);
    return r;
}

/* kubectl tern memory approve|reject SESSION ID: the proposal must be one
 * of status.memoryProposals waiting for a decision (Pending). */
static int cmd_memory(struct cli *c)
{
    if (c->nargs < 3 || (strcmp(c->args[0], "approve") != 0 && strcmp(c->args[0], "reject") != 0))
        return die("usage: kubectl tern memory approve|reject SESSION ID [--reason TEXT]");
    bool approve = strcmp(c->args[0], "approve") == 0;
    const char *name = c->args[1], *id = c->args[2];
    cJSON *s = NULL;
    if (get_session(c, name, &s))
        return 1;
    const cJSON *p = NULL, *it;
    struct buf known;
    buf_init(&known, 4096);
    cJSON_ArrayForEach(it, json_get(json_get(s, "status"), "memoryProposals"))
    {
        const char *pid = str_at(it, "id", NULL), *st = str_at(it, "state", NULL);
        if (pid && strcmp(pid, id) == 0)
            p = it;
        if (pid && st && strcmp(st, "Pending") == 0)
            buf_printf(&known, "%s%s", known.len ? ", " : "", pid);
    }
    int rc = 0;
    const char *state = p ? str_at(p, "state", NULL) : NULL;
    if (!p)
        rc = die("%s is not a memory proposal of agentsession %s (pending: %s); nothing was "
                 "changed",
                 id, name, known.len ? buf_str(&known) : "none");
    else if (!state || strcmp(state, "Pending") != 0)
        rc = die("memory proposal %s of agentsession %s is %s, not Pending; nothing was changed",
                 id, name, state ? state : "in no state");
    if (rc) {
        buf_done(&known);
        cJSON_Delete(s);
        return rc;
    }
    char *user = c->as_user ? xstrdup(c->as_user) : whoami(c);
    cJSON *body = cJSON_CreateObject();
    cJSON *anns =
        cJSON_AddObjectToObject(cJSON_AddObjectToObject(body, "metadata"), "annotations");
    json_add_string(anns, approve ? "tern.dev/memory-approve" : "tern.dev/memory-reject", id);
    if (user)
        json_add_string(anns, "tern.dev/decided-by", user);
    if (c->reason)
        json_add_string(anns, "tern.dev/reason", c->reason);
    const char *heading = str_at(p, "heading", NULL);
    char *done = xasprintf("memory proposal %s%s%s%s %s", id, heading ? " (" : "",
                           heading ? heading : "", heading ? ")" : "",
                           approve ? "approved" : "rejected");
    rc = patch(c, name, KCLIENT_PATCH_MERGE, body, done);
    free(done);
    free(user);
    buf_done(&known);
    cJSON_Delete(s);
    return rc;
}

static int64_t int_at(const cJSON *o, const char *k);
static const char *str_or(const cJSON *d, const char *k);

/* The spec.limits value of a limit by its journal name (timeoutSeconds in
 * ms, as status.failure.used is), or -1 when unknown. */
static int64_t spec_limit(const cJSON *spec, const char *name)
{
    const cJSON *l = json_get(spec, "limits");
    static const char *const known[] = {"maxModelTurns", "maxToolCalls", "maxTokens",
                                        "maxCostMicroUSD", "timeoutSeconds"};
    for (size_t i = 0; name && i < sizeof known / sizeof known[0]; i++)
        if (strcmp(name, known[i]) == 0) {
            if (!json_get(l, name))
                return -1; /* the server's default applies: let the operator judge */
            int64_t v = int_at(l, name);
            return strcmp(name, "timeoutSeconds") == 0 ? v * 1000 : v;
        }
    return -1;
}

/* Why a new turn cannot run now (a message or a retry would not be
 * processed), as the operator decides it, or NULL. Newly allocated. */
static char *why_not_continuable(const cJSON *s)
{
    const cJSON *st = json_get(s, "status"), *spec = json_get(s, "spec");
    const char *name = str_at(json_get(s, "metadata"), "name", NULL);
    if (json_get(json_get(s, "metadata"), "deletionTimestamp"))
        return xasprintf("agentsession %s is being deleted", name);
    const char *phase = str_at(st, "phase", NULL), *reason = str_at(st, "reason", NULL);
    if (!phase || strcmp(phase, "Failed") != 0)
        return NULL;
    if (reason && strcmp(reason, "InvalidSpec") == 0)
        return xasprintf("agentsession %s has an invalid spec: %s; fix the spec first", name,
                         str_at(st, "message", NULL) ? str_at(st, "message", NULL) : "");
    const cJSON *f = json_get(st, "failure");
    const char *limit = str_at(f, "limit", NULL);
    if (!limit)
        return NULL;
    int64_t now = spec_limit(spec, limit), used = int_at(f, "used");
    bool unlimited = strcmp(limit, "maxCostMicroUSD") == 0 && now == 0;
    if ((now >= 0 && now <= used && !unlimited) || (now < 0 && cJSON_IsTrue(json_get(f, "blocked")))) {
        bool secs = strcmp(limit, "timeoutSeconds") == 0;
        return xasprintf("agentsession %s stopped at a limit: %s; raise spec.limits.%s above "
                         "%lld first (kubectl patch agentsession %s --type=merge -p "
                         "'{\"spec\":{\"limits\":{\"%s\":N}}}'), which continues it",
                         name, str_at(f, "message", NULL) ? str_at(f, "message", NULL) : limit,
                         limit, (long long)(secs ? used / 1000 : used), name, limit);
    }
    return NULL;
}

static int cmd_say(struct cli *c)
{
    if (c->nargs != 2)
        return die("usage: kubectl tern say SESSION MESSAGE");
    cJSON *s = NULL;
    if (get_session(c, c->args[0], &s))
        return 1;
    char *why = why_not_continuable(s);
    if (why) {
        int rc = die("%s; the message was not added (it would not be processed)", why);
        free(why);
        cJSON_Delete(s);
        return rc;
    }
    const cJSON *msgs = json_get(json_get(s, "spec"), "messages");
    bool has = cJSON_IsArray(msgs);
    int index = has ? cJSON_GetArraySize(msgs) : 0;
    const cJSON *st = json_get(s, "status");
    const char *phase = str_at(st, "phase", NULL) ? str_at(st, "phase", NULL) : "Pending";
    const char *pending = str_at(st, "pendingApproval", "id");
    char *next;
    if (strcmp(phase, "Failed") == 0)
        next = xasprintf("the session failed (%s); this message continues it in a new turn",
                         str_at(st, "reason", NULL) ? str_at(st, "reason", NULL) : "?");
    else if (cJSON_IsTrue(json_get(json_get(s, "spec"), "suspend")))
        next = xstrdup("the session is suspended: it is taken after kubectl tern resume");
    else if (pending)
        next = xasprintf("it is taken once approval %s is decided", pending);
    else if (strcmp(phase, "Running") == 0)
        next = xstrdup("it becomes a turn after the current one");
    else if (strcmp(phase, "Blocked") == 0)
        next = xasprintf("it waits while the session is blocked (%s)",
                         str_at(st, "reason", NULL) ? str_at(st, "reason", NULL) : "?");
    else
        next = xstrdup("it starts a new turn");
    cJSON_Delete(s);
    /* a JSON patch appends without rewriting earlier messages */
    cJSON *ops = cJSON_CreateArray();
    cJSON *op = cJSON_CreateObject();
    json_add_string(op, "op", "add");
    if (has) {
        json_add_string(op, "path", "/spec/messages/-");
        json_add_string(op, "value", c->args[1]);
    } else {
        json_add_string(op, "path", "/spec/messages");
        cJSON *v = cJSON_AddArrayToObject(op, "value");
        cJSON_AddItemToArray(v, cJSON_CreateString(c->args[1]));
    }
    cJSON_AddItemToArray(ops, op);
    char *done = xasprintf("message added (spec.messages[%d]); %s", index, next);
    int r = patch(c, c->args[0], KCLIENT_PATCH_JSON, ops, done);
    free(done);
    free(next);
    return r;
}

static int cmd_retry(struct cli *c)
{
    if (c->nargs != 1)
        return die("usage: kubectl tern retry SESSION");
    const char *name = c->args[0];
    cJSON *s = NULL;
    if (get_session(c, name, &s))
        return 1;
    const cJSON *st = json_get(s, "status");
    const char *phase = str_at(st, "phase", NULL);
    if (!phase || strcmp(phase, "Failed") != 0) {
        int rc = die("agentsession %s is %s: there is nothing to retry", name,
                     phase ? phase : "not reconciled yet");
        cJSON_Delete(s);
        return rc;
    }
    char *why = why_not_continuable(s);
    if (why) {
        int rc = die("%s; nothing was changed", why);
        free(why);
        cJSON_Delete(s);
        return rc;
    }
    const cJSON *f = json_get(st, "failure");
    int64_t turn = int_at(f, "turn");
    char turn_s[24];
    snprintf(turn_s, sizeof turn_s, "%lld", (long long)turn);
    char *done = xasprintf("retry requested: turn %lld failed (%s: %s); a new turn continues "
                           "from the journal",
                           (long long)turn, str_at(f, "reason", NULL) ? str_at(f, "reason", NULL) : "?",
                           str_at(f, "message", NULL) ? str_at(f, "message", NULL) : "");
    cJSON_Delete(s);
    char *user = c->as_user ? xstrdup(c->as_user) : whoami(c);
    cJSON *p = cJSON_CreateObject();
    cJSON *anns = cJSON_AddObjectToObject(cJSON_AddObjectToObject(p, "metadata"), "annotations");
    json_add_string(anns, "tern.dev/retry", turn_s);
    if (user)
        json_add_string(anns, "tern.dev/decided-by", user);
    int r = patch(c, name, KCLIENT_PATCH_MERGE, p, done);
    free(done);
    free(user);
    return r;
}

static int cmd_fork(struct cli *c)
{
    if (c->nargs != 2)
        return die("usage: kubectl tern fork SESSION NEW-NAME");
    cJSON *p = cJSON_CreateObject();
    cJSON *anns = cJSON_AddObjectToObject(cJSON_AddObjectToObject(p, "metadata"), "annotations");
    json_add_string(anns, "tern.dev/fork", c->args[1]);
    char *done = xasprintf("will fork into %s at its next turn boundary", c->args[1]);
    int r = patch(c, c->args[0], KCLIENT_PATCH_MERGE, p, done);
    free(done);
    return r;
}

static int cmd_suspend(struct cli *c, bool suspend)
{
    if (c->nargs != 1)
        return die("usage: kubectl tern %s SESSION", suspend ? "suspend" : "resume");
    /* resuming does not undo a failure: say what does */
    char *done = xstrdup(suspend ? "suspended" : "resumed");
    cJSON *s = NULL;
    if (!suspend && get_session(c, c->args[0], &s) == 0) {
        const cJSON *st = json_get(s, "status");
        const char *ph = str_at(st, "phase", NULL), *why = str_at(st, "reason", NULL);
        if (ph && (strcmp(ph, "Failed") == 0 || strcmp(ph, "Blocked") == 0)) {
            free(done);
            done = xasprintf("resumed; it is %s (%s): %s", ph, why ? why : "?",
                             strcmp(ph, "Blocked") == 0
                                 ? "it goes on once that is fixed"
                                 : "kubectl tern retry, a new message or a raised limit "
                                   "continues it (kubectl tern get shows how)");
        }
    }
    cJSON_Delete(s);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddItemToObject(cJSON_AddObjectToObject(p, "spec"), "suspend", cJSON_CreateBool(suspend));
    int r = patch(c, c->args[0], KCLIENT_PATCH_MERGE, p, done);
    free(done);
    return r;
}

static int64_t int_at(const cJSON *o, const char *k)
{
    int64_t v = 0;
    json_get_int64(o, "", k, JSON_OPTIONAL, &v, NULL);
    return v;
}

static int cmd_get(struct cli *c)
{
    if (c->nargs != 1)
        return die("usage: kubectl tern get SESSION");
    cJSON *s = NULL;
    if (get_session(c, c->args[0], &s))
        return 1;
    const cJSON *st = json_get(s, "status"), *sp = json_get(s, "spec");
    printf("Session:    %s/%s\n", c->ns, c->args[0]);
    printf("Objective:  %s\n", str_at(sp, "objective", NULL) ? str_at(sp, "objective", NULL) : "");
    printf("Phase:      %s\n", str_at(st, "phase", NULL) ? str_at(st, "phase", NULL) : "(none yet)");
    if (str_at(st, "reason", NULL))
        printf("Reason:     %s: %s\n", str_at(st, "reason", NULL),
               str_at(st, "message", NULL) ? str_at(st, "message", NULL) : "");
    const cJSON *t = json_get(st, "turn");
    if (t)
        printf("Turn:       %lld (job %s, attempt %lld)\n", (long long)int_at(t, "number"),
               str_at(t, "job", NULL) ? str_at(t, "job", NULL) : "-", (long long)int_at(t, "attempt"));
    const cJSON *u = json_get(st, "usage");
    const cJSON *lim = json_get(sp, "limits");
    printf("Usage:      %lld model turns, %lld tool calls, %lld+%lld tokens, %lld micro-USD\n",
           (long long)int_at(u, "modelTurns"), (long long)int_at(u, "toolCalls"),
           (long long)int_at(u, "promptTokens"), (long long)int_at(u, "completionTokens"),
           (long long)int_at(u, "costMicroUSD"));
    if (lim)
        printf("Limits:     %lld turns, %lld tool calls, %lld tokens, %lld s, %lld micro-USD\n",
               (long long)int_at(lim, "maxModelTurns"), (long long)int_at(lim, "maxToolCalls"),
               (long long)int_at(lim, "maxTokens"), (long long)int_at(lim, "timeoutSeconds"),
               (long long)int_at(lim, "maxCostMicroUSD"));
    const cJSON *pa = json_get(st, "pendingApproval");
    if (pa)
        printf("Approval:   %s: %s %s (requested %s)\n           kubectl tern approve %s  |  "
               "kubectl tern deny %s --reason ...\n",
               str_at(pa, "id", NULL), str_at(pa, "tool", NULL) ? str_at(pa, "tool", NULL) : "",
               str_at(pa, "summary", NULL) ? str_at(pa, "summary", NULL) : "",
               str_at(pa, "requestedAt", NULL) ? str_at(pa, "requestedAt", NULL) : "?",
               c->args[0], c->args[0]);
    const cJSON *mp;
    cJSON_ArrayForEach(mp, json_get(st, "memoryProposals"))
    {
        printf("Memory:     %s %s: %s (%s)\n", str_at(mp, "id", NULL) ? str_at(mp, "id", NULL) : "?",
               str_at(mp, "state", NULL) ? str_at(mp, "state", NULL) : "?",
               str_at(mp, "heading", NULL) ? str_at(mp, "heading", NULL) : "",
               str_at(mp, "reason", NULL) ? str_at(mp, "reason", NULL) : "");
    }
    const cJSON *sb = json_get(st, "sandbox");
    if (sb)
        printf("Sandbox:    %s %s%s\n", str_at(sb, "pod", NULL) ? str_at(sb, "pod", NULL) : "",
               cJSON_IsTrue(json_get(sb, "ready")) ? "ready at " : "not running",
               str_at(sb, "address", NULL) ? str_at(sb, "address", NULL) : "");
    printf("Journal:    %lld events; %lld messages processed\n",
           (long long)int_at(json_get(st, "journal"), "lastSeq"),
           (long long)int_at(st, "messagesProcessed"));
    const cJSON *res = json_get(st, "result");
    if (res)
        printf("Result:     %s\n", str_at(res, "summary", NULL) ? str_at(res, "summary", NULL) : "");
    if (res && json_get(res, "value")) {
        char *v = json_print(json_get(res, "value"));
        printf("Value:      %s\n", v);
        free(v);
    }
    if (res && str_at(res, "valueRef", NULL))
        printf("Value:      in %s (%lld bytes, sha256 %s)\n", str_at(res, "valueRef", NULL),
               (long long)int_at(res, "valueSize"),
               str_at(res, "valueSha256", NULL) ? str_at(res, "valueSha256", NULL) : "?");
    const cJSON *art;
    cJSON_ArrayForEach(art, json_get(res, "artifacts"))
    {
        if (cJSON_IsTrue(json_get(art, "stored")))
            printf("Artifact:   %s %lld bytes sha256 %s (ConfigMap %s)\n", str_or(art, "path"),
                   (long long)int_at(art, "size"), str_or(art, "sha256"),
                   str_or(art, "configMap"));
        else
            printf("Artifact:   %s not stored: %s%s%s\n", str_or(art, "path"),
                   str_or(art, "reason"), *str_or(art, "message") ? ": " : "",
                   str_or(art, "message"));
    }
    const cJSON *f, *forks = json_get(st, "forks");
    if (cJSON_GetArraySize(forks) > 0) {
        printf("Forks:     ");
        cJSON_ArrayForEach(f, forks) printf(" %s", cJSON_IsString(f) ? f->valuestring : "?");
        printf("\n");
    }
    printf("Conditions:\n");
    cJSON_ArrayForEach(f, json_get(st, "conditions"))
    {
        printf("  %-16s %-6s %-22s %s\n", str_at(f, "type", NULL) ? str_at(f, "type", NULL) : "",
               str_at(f, "status", NULL) ? str_at(f, "status", NULL) : "",
               str_at(f, "reason", NULL) ? str_at(f, "reason", NULL) : "",
               str_at(f, "message", NULL) ? str_at(f, "message", NULL) : "");
    }
    cJSON_Delete(s);
    return 0;
}

static const char *str_or(const cJSON *d, const char *k)
{
    const char *v = str_at(d, k, NULL);
    return v ? v : "";
}

/* ---- the aggregated API (stream.tern.dev) ---------------------------------- */

/* .../namespaces/NS/sessions/NAME/sub (escaped), newly allocated. */
static char *api_path(struct cli *c, const char *name, const char *sub)
{
    char *ens = httpc_escape(c->ns), *en = httpc_escape(name);
    char *p = xasprintf("/apis/stream.tern.dev/v1alpha1/namespaces/%s/sessions/%s/%s", ens, en,
                        sub);
    free(ens);
    free(en);
    return p;
}

/* The message of a Status body (or the text), for errors. */
static void status_message(long status, const char *body, size_t len, char *out, size_t outsz)
{
    cJSON *j = NULL;
    const char *msg = json_parse(body ? body : "", len, &j, NULL) == 0 ? str_at(j, "message", NULL)
                                                                       : NULL;
    /* the API server's own answer when nothing serves the group */
    bool missing = status == 503 || (status == 404 && (!msg || strcmp(msg, "the server could not "
                                                                        "find the requested "
                                                                        "resource") == 0));
    if (msg && !missing)
        snprintf(out, outsz, "%s", msg);
    else if (missing)
        snprintf(out, outsz, "%s (HTTP %ld): is the aggregated API stream.tern.dev installed and "
                             "its operator running? (kubectl get apiservice "
                             "v1alpha1.stream.tern.dev)",
                 msg ? msg : "no answer", status);
    else
        snprintf(out, outsz, "HTTP %ld%s%.300s", status, len ? ": " : "", body ? body : "");
    cJSON_Delete(j);
}

/* Prints text with every line after the first indented (nothing is cut). */
static void print_block(const char *text, const char *indent)
{
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        printf("%s%.*s\n", indent, (int)n, p);
        p += n + (nl ? 1 : 0);
    }
}

#define INDENT "                                    "

/* One journal event as readable lines: a head line, and any multi-line
 * text (a tool's output, a model's answer) below it in full. */
static void print_event_json(const cJSON *ev, bool live_shown)
{
    const cJSON *d = json_get(ev, "data");
    const char *type = str_or(ev, "type");
    int64_t seq = 0, turn = 0;
    json_get_int64(ev, "", "seq", JSON_OPTIONAL, &seq, NULL);
    json_get_int64(ev, "", "turn", JSON_OPTIONAL, &turn, NULL);
    struct buf head;
    buf_init(&head, 1u << 20);
    const char *body = NULL;
    char *owned = NULL;
#define S(k) str_or(d, k)
    if (strcmp(type, "user_message") == 0) {
        buf_printf(&head, "user:");
        body = S("text");
    } else if (strcmp(type, "model_response") == 0) {
        buf_printf(&head, "model%s%s%s:", *S("kind") && strcmp(S("kind"), "ok") ? " (" : "",
                   *S("kind") && strcmp(S("kind"), "ok") ? S("kind") : "",
                   *S("kind") && strcmp(S("kind"), "ok") ? ")" : "");
        const cJSON *tc;
        cJSON_ArrayForEach(tc, json_get(d, "toolCalls"))
        {
            buf_printf(&head, " [%s %s]", str_or(tc, "name"), str_or(tc, "arguments"));
        }
        if (*S("refusal"))
            buf_printf(&head, " (refusal: %s)", S("refusal"));
        body = S("content");
    } else if (strcmp(type, "tool_call") == 0) {
        buf_printf(&head, "tool call %s %s %s", S("callId"), S("tool"), S("arguments"));
    } else if (strcmp(type, "tool_result") == 0) {
        buf_printf(&head, "tool result %s %s: %s%s", S("callId"), S("tool"), S("status"),
                   cJSON_IsTrue(json_get(d, "replayed")) ? " (replayed)" : "");
        if (*S("commit")) /* publish_branch */
            buf_printf(&head, " (%s %s to %s as %s)",
                       cJSON_IsFalse(json_get(d, "pushed")) ? "found" : "pushed", S("commit"),
                       S("remote"), S("ref"));
        if (*S("server")) /* an MCP tool */
            buf_printf(&head, " (MCP server %s)", S("server"));
        if (cJSON_IsTrue(json_get(d, "redacted")))
            buf_puts(&head, " (credentials redacted)");
        const cJSON *mp = json_get(d, "memoryProposal"); /* propose_memory_update */
        if (mp)
            buf_printf(&head, " (memory proposal %s for %s: %s)", str_or(mp, "id"),
                       str_or(mp, "heading"), str_or(mp, "reason"));
        body = S("output");
        if (live_shown && strcmp(S("tool"), "exec_command") == 0)
            buf_puts(&head, " (its output was shown above as it ran; as recorded:)");
    } else if (strcmp(type, "approval_requested") == 0) {
        buf_printf(&head, "approval requested %s: %s", S("id"), S("summary"));
    } else if (strcmp(type, "approval_decided") == 0) {
        buf_printf(&head, "approval %s %s by %s", S("id"), S("decision"),
                   *S("decidedBy") ? S("decidedBy") : "(unknown)");
        if (*S("reason"))
            buf_printf(&head, ": %s", S("reason"));
    } else if (strcmp(type, "memory_decided") == 0) {
        buf_printf(&head, "memory proposal %s %s by %s", S("id"), S("decision"),
                   *S("decidedBy") ? S("decidedBy") : "(unknown)");
        if (*S("reason"))
            buf_printf(&head, ": %s", S("reason"));
    } else if (strcmp(type, "memory_applied") == 0) {
        buf_printf(&head, "memory proposal %s %s: %s", S("id"),
                   strcmp(S("result"), "applied") == 0 ? "applied" : "not applied (conflict)",
                   S("message"));
    } else if (strcmp(type, "turn_finished") == 0) {
        buf_printf(&head, "turn finished: %s%s%s", S("outcome"), *S("reason") ? " " : "",
                   S("reason"));
        /* the answer below, then its files */
        struct buf ans;
        buf_init(&ans, 1u << 20);
        buf_puts(&ans, S("summary"));
        const cJSON *a;
        cJSON_ArrayForEach(a, json_get(d, "artifacts"))
        {
            if (cJSON_IsString(a))
                buf_printf(&ans, "%s%s", a == json_get(d, "artifacts")->child ? "\nartifacts: "
                                                                               : ", ",
                           a->valuestring);
        }
        owned = buf_steal(&ans);
        body = owned;
    } else if (strcmp(type, "result_invalid") == 0) {
        int64_t attempt = 0;
        json_item_int64(json_get(d, "attempt"), &attempt);
        buf_printf(&head, "result invalid (attempt %lld): the answer %s", (long long)attempt,
                   S("problem"));
    } else if (strcmp(type, "artifacts_persisted") == 0) {
        int stored = 0, n = 0;
        const cJSON *a;
        cJSON_ArrayForEach(a, json_get(d, "artifacts"))
        {
            n++;
            stored += cJSON_IsTrue(json_get(a, "stored"));
        }
        if (json_get(d, "error"))
            buf_printf(&head, "artifacts not persisted: %s: %s",
                       str_or(json_get(d, "error"), "reason"),
                       str_or(json_get(d, "error"), "message"));
        else
            buf_printf(&head, "artifacts persisted: %d of %d files in ConfigMap %s%s", stored, n,
                       S("configMap"), *S("request") ? " (asked for)" : "");
    } else if (strcmp(type, "snapshot") == 0) {
        int64_t upto = 0;
        json_item_int64(json_get(d, "upto"), &upto);
        buf_printf(&head, "snapshot of the session up to seq %lld (the events before it were "
                   "compacted)", (long long)upto);
    } else if (strcmp(type, "error") == 0) {
        buf_printf(&head, "error (%s):", S("phase"));
        body = S("message");
    } else {
        char *j = json_print(d);
        buf_printf(&head, "%s %s", type, j);
        free(j);
    }
#undef S
    for (char *p = head.data; p && *p; p++)
        if (*p == '\n')
            *p = ' ';
    const char *t = str_or(ev, "time");
    printf("%6lld  t%-3lld %.19s  %s", (long long)seq, (long long)turn, t, buf_str(&head));
    if (body && *body && !strchr(body, '\n') && head.len + strlen(body) < 200) {
        printf(" %s\n", body);
    } else {
        printf("\n");
        if (body && *body)
            print_block(body, INDENT);
    }
    fflush(stdout);
    free(owned);
    buf_done(&head);
}

/* The log stream, line by line. */
struct logs {
    struct cli *c;
    struct buf line, err;
    long status;
    int64_t last_seq;
    bool ended, failed, live_shown;
    char live_call[128];
    struct buf partial[2]; /* a command's output line not ended yet */
};

static void flush_partial(struct logs *l)
{
    for (int s = 0; s < 2; s++)
        if (l->partial[s].len) {
            printf(INDENT "| %s\n", buf_str(&l->partial[s]));
            buf_reset(&l->partial[s]);
        }
    fflush(stdout);
}

static void print_output(struct logs *l, const cJSON *o)
{
    const cJSON *out = json_get(o, "output");
    const char *stream = str_at(out, "stream", NULL), *data = str_at(out, "data", NULL);
    int64_t skipped = 0;
    if (!l->live_shown || strcmp(l->live_call, str_or(o, "callId")) != 0) {
        snprintf(l->live_call, sizeof l->live_call, "%s", str_or(o, "callId"));
        l->live_shown = true;
    }
    if (json_item_int64(json_get(out, "skipped"), &skipped) == 0) {
        flush_partial(l);
        printf(INDENT "| [%lld bytes of %s not shown: the sandbox keeps the last 256 KiB of a "
                      "running command; the result below has what was recorded]\n",
               (long long)skipped, stream ? stream : "output");
    }
    if (stream && data) {
        struct buf *p = &l->partial[strcmp(stream, "stderr") == 0 ? 1 : 0];
        for (const char *s = data; *s; s++) {
            if (*s == '\n') {
                printf(INDENT "|%s %s\n", p == &l->partial[1] ? "!" : "", buf_str(p));
                buf_reset(p);
            } else {
                buf_putc(p, *s);
            }
        }
    }
    if (cJSON_IsTrue(json_get(out, "done")))
        flush_partial(l);
    fflush(stdout);
}

static int on_log_line(struct logs *l, const char *line, size_t n)
{
    if (n == 0)
        return 0;
    cJSON *o = NULL;
    if (json_parse(line, n, &o, NULL) != 0) {
        fprintf(stderr, "warning: an unreadable line from the API: %.200s\n", line);
        return 0;
    }
    const char *type = str_or(o, "type");
    if (strcmp(type, "heartbeat") == 0) {
        cJSON_Delete(o);
        return 0;
    }
    if (strcmp(type, "ERROR") == 0) {
        fprintf(stderr, "error: %s\n", str_or(json_get(o, "object"), "message"));
        l->failed = true;
        cJSON_Delete(o);
        return 1;
    }
    if (strcmp(type, "end") == 0) {
        l->ended = true;
        if (!l->c->output)
            fprintf(stderr, "session %s has finished: %s\n", l->c->args[0], str_or(o, "phase"));
    }
    if (l->c->output) {
        /* -o json: the stored events (and live output, end) one per line */
        if (strcmp(type, "event") == 0) {
            char *t = json_print(json_get(o, "event"));
            printf("%s\n", t);
            free(t);
        } else if (strcmp(type, "end") != 0) {
            char *t = json_print(o);
            printf("%s\n", t);
            free(t);
        }
        fflush(stdout);
    } else if (strcmp(type, "event") == 0) {
        const cJSON *ev = json_get(o, "event");
        bool result = strcmp(str_or(ev, "type"), "tool_result") == 0;
        bool same = result && l->live_shown &&
                    strcmp(l->live_call, str_or(json_get(ev, "data"), "callId")) == 0;
        flush_partial(l);
        print_event_json(ev, same);
        if (result)
            l->live_shown = false;
    } else if (strcmp(type, "output") == 0) {
        print_output(l, o);
    }
    if (strcmp(type, "event") == 0)
        json_get_int64(json_get(o, "event"), "", "seq", JSON_OPTIONAL, &l->last_seq, NULL);
    cJSON_Delete(o);
    return l->ended ? 1 : 0;
}

static atomic_bool interrupted;
static void on_int(int sig)
{
    (void)sig;
    atomic_store(&interrupted, true);
}

static int log_data(void *ctx, long status, const char *p, size_t n)
{
    struct logs *l = ctx;
    l->status = status;
    if (atomic_load(&interrupted))
        return -ECANCELED;
    if (status != 200) {
        buf_append(&l->err, p, n);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\n') {
            if (buf_putc(&l->line, p[i]))
                return TERN_ETOOLARGE;
            continue;
        }
        int r = on_log_line(l, buf_str(&l->line), l->line.len);
        buf_reset(&l->line);
        if (r)
            return r;
    }
    return 0;
}

static int cmd_logs(struct cli *c)
{
    if (c->nargs != 1)
        return die("usage: kubectl tern logs [-f] [-o json] SESSION");
    struct logs l = {.c = c};
    buf_init(&l.line, TERN_JOURNAL_MAX_DATA * 2);
    buf_init(&l.err, 64u << 10);
    buf_init(&l.partial[0], 1u << 20);
    buf_init(&l.partial[1], 1u << 20);
    struct sigaction sa = {.sa_handler = on_int};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int rc = 0;
    for (int attempt = 0;; attempt++) {
        char *base = api_path(c, c->args[0], "log");
        /* the first request names no seq: the server starts at seq 1, or
         * at the latest snapshot of a compacted journal */
        char since[48] = "";
        if (l.last_seq)
            snprintf(since, sizeof since, "sinceSeq=%lld&", (long long)l.last_seq + 1);
        char *path = xasprintf("%s?%s%s", base, since, c->follow ? "follow=true" : "");
        free(base);
        struct kclient_err ke = {0};
        buf_reset(&l.err);
        l.status = 0;
        int r = kclient_stream(c->cl, path, "application/x-ndjson, application/json", log_data,
                               &l, &ke);
        free(path);
        if (l.line.len) { /* a last line without its newline */
            on_log_line(&l, buf_str(&l.line), l.line.len);
            buf_reset(&l.line);
        }
        if (l.status && l.status != 200) {
            char msg[1024];
            status_message(l.status, l.err.data, l.err.len, msg, sizeof msg);
            rc = die("%s", msg);
            break;
        }
        if (l.failed) {
            rc = 1;
            break;
        }
        if (!c->follow || l.ended || atomic_load(&interrupted) || r == -ECANCELED)
            break;
        /* the stream was cut (a proxy, a restart of the operator): resume
         * after the last event seen */
        if (attempt > 100 || (r && r != 1 && attempt > 10)) {
            rc = die("following the log: %s", ke.e.msg[0] ? ke.e.msg : "the stream ended");
            break;
        }
        struct timespec ts = {0, 500 * 1000000L};
        nanosleep(&ts, NULL);
    }
    flush_partial(&l);
    buf_done(&l.line);
    buf_done(&l.err);
    buf_done(&l.partial[0]);
    buf_done(&l.partial[1]);
    return rc;
}

/* ---- ls and cp ------------------------------------------------------------- */

struct body {
    long status;
    struct buf b;
    FILE *f;   /* cp: the file being written (200 only) */
    uint64_t written;
    bool write_failed;
    EVP_MD_CTX *md; /* cp of a persisted artifact: the sha256 of what is written */
};

static int body_data(void *ctx, long status, const char *p, size_t n)
{
    struct body *b = ctx;
    b->status = status;
    if (status == 200 && b->f) {
        if (fwrite(p, 1, n, b->f) != n) {
            b->write_failed = true;
            return -EIO;
        }
        if (b->md)
            EVP_DigestUpdate(b->md, p, n);
        b->written += n;
        return 0;
    }
    if (buf_append(&b->b, p, n))
        return TERN_ETOOLARGE;
    return 0;
}

static int cmd_ls(struct cli *c)
{
    if (c->nargs < 1 || c->nargs > 2)
        return die("usage: kubectl tern ls SESSION [PATH] [--depth N]");
    char *base = api_path(c, c->args[0], "files");
    char *ep = httpc_escape(c->nargs > 1 ? c->args[1] : "");
    char *path = xasprintf("%s?path=%s&depth=%lld", base, ep, (long long)c->depth);
    free(base);
    free(ep);
    struct body b = {0};
    buf_init(&b.b, 64u << 20);
    struct kclient_err ke = {0};
    int r = kclient_stream(c->cl, path, NULL, body_data, &b, &ke);
    free(path);
    int rc = 0;
    cJSON *j = NULL;
    if (r && !b.status) {
        rc = die("%s", ke.e.msg);
    } else if (b.status != 200) {
        char msg[1024];
        status_message(b.status, b.b.data, b.b.len, msg, sizeof msg);
        rc = die("%s", msg);
    } else if (json_parse(b.b.data ? b.b.data : "", b.b.len, &j, NULL) != 0) {
        rc = die("the API sent an unreadable listing");
    } else if (c->output) {
        char *t = json_print(j);
        printf("%s\n", t);
        free(t);
    } else {
        const cJSON *e;
        cJSON_ArrayForEach(e, json_get(j, "entries"))
        {
            int64_t size = 0;
            json_item_int64(json_get(e, "size"), &size);
            const char *type = str_or(e, "type");
            if (strcmp(type, "dir") == 0)
                printf("dir              %s/\n", str_or(e, "path"));
            else if (strcmp(type, "symlink") == 0)
                printf("symlink          %s -> %s\n", str_or(e, "path"), str_or(e, "target"));
            else
                printf("%-5s %10lld %s\n", type, (long long)size, str_or(e, "path"));
        }
        if (cJSON_IsTrue(json_get(j, "truncated")))
            printf("(more entries than one listing holds: list a subdirectory)\n");
    }
    cJSON_Delete(j);
    buf_done(&b.b);
    return rc;
}

/* The persisted artifact src of session name as the API lists it: its
 * sha256 and size when stored; else why not (owned), if the list says. */
static void stored_artifact(struct cli *c, const char *name, const char *src, char sha[65],
                            int64_t *size, char **why_not)
{
    char *path = api_path(c, name, "artifacts");
    struct body b = {0};
    buf_init(&b.b, 16u << 20);
    struct kclient_err ke = {0};
    int r = kclient_stream(c->cl, path, NULL, body_data, &b, &ke);
    free(path);
    cJSON *j = NULL;
    if (r || b.status != 200 || json_parse(b.b.data ? b.b.data : "", b.b.len, &j, NULL) != 0)
        goto out;
    const cJSON *it;
    cJSON_ArrayForEach(it, json_get(j, "items"))
    {
        if (strcmp(str_or(it, "path"), src) != 0)
            continue;
        const char *h = str_or(it, "sha256");
        if (cJSON_IsTrue(json_get(it, "stored")) && strlen(h) == 64) {
            memcpy(sha, h, 65);
            *size = int_at(it, "size");
        } else {
            free(*why_not);
            *why_not = xasprintf("%s%s%s", str_or(it, "reason"), *str_or(it, "message") ? ": " : "",
                                 str_or(it, "message"));
        }
    }
out:
    cJSON_Delete(j);
    buf_done(&b.b);
}

static int cmd_persist(struct cli *c)
{
    if (c->nargs != 1)
        return die("usage: kubectl tern persist SESSION");
    /* refused, saying why, when the operator would not take a set */
    cJSON *s = NULL;
    if (get_session(c, c->args[0], &s))
        return 1;
    const cJSON *st = json_get(s, "status");
    const char *phase = str_at(st, "phase", NULL);
    bool suspended = cJSON_IsTrue(json_get(json_get(s, "spec"), "suspend"));
    if ((phase && strcmp(phase, "Failed") == 0) || suspended) {
        int rc = die("agentsession %s is %s: its output/ is persisted once it goes on (%s); "
                     "nothing was changed",
                     c->args[0], suspended ? "suspended" : "Failed",
                     suspended ? "kubectl tern resume" : "kubectl tern retry, or a new message");
        cJSON_Delete(s);
        return rc;
    }
    cJSON_Delete(s);
    char req[64];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(req, sizeof req, "%lld.%09ld-%ld", (long long)ts.tv_sec, ts.tv_nsec, (long)getpid());
    cJSON *p = cJSON_CreateObject();
    cJSON *anns = cJSON_AddObjectToObject(cJSON_AddObjectToObject(p, "metadata"), "annotations");
    json_add_string(anns, "tern.dev/persist-artifacts", req);
    return patch(c, c->args[0], KCLIENT_PATCH_MERGE, p,
                 "persisting output/ at the next turn boundary (kubectl tern get shows the "
                 "ArtifactsPersisted condition)");
}

static int cmd_cp(struct cli *c)
{
    if (c->nargs != 2 || !strchr(c->args[0], ':'))
        return die("usage: kubectl tern cp SESSION:PATH DEST");
    const char *colon = strchr(c->args[0], ':');
    char *name = xstrndup(c->args[0], (size_t)(colon - c->args[0]));
    const char *src = colon + 1;
    if (!*name || !*src) {
        free(name);
        return die("usage: kubectl tern cp SESSION:PATH DEST");
    }
    /* DEST: a file, or a directory (then the source's base name in it) */
    const char *base_name = strrchr(src, '/') ? strrchr(src, '/') + 1 : src;
    struct stat st;
    char *dest = stat(c->args[1], &st) == 0 && S_ISDIR(st.st_mode)
                     ? xasprintf("%s%s%s", c->args[1],
                                 c->args[1][0] && c->args[1][strlen(c->args[1]) - 1] == '/'
                                     ? ""
                                     : "/",
                                 base_name)
                     : xstrdup(c->args[1]);
    char *tmp = xasprintf("%s.tern-cp.%ld", dest, (long)getpid());
    struct body b = {0};
    buf_init(&b.b, 64u << 10);
    b.f = fopen(tmp, "wbx");
    int rc = 0;
    if (!b.f) {
        rc = die("cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    /* a persisted artifact: from the store, checked against its sha256 */
    char want_sha[65] = "", *why_not = NULL;
    int64_t want_size = -1;
    if (strncmp(src, "output/", 7) == 0)
        stored_artifact(c, name, src, want_sha, &want_size, &why_not);
    char *basep = api_path(c, name, want_sha[0] ? "artifacts" : "content");
    char *ep = httpc_escape(src);
    char *path = xasprintf("%s?path=%s", basep, ep);
    free(basep);
    free(ep);
    if (want_sha[0])
        b.md = EVP_MD_CTX_new();
    if (b.md)
        EVP_DigestInit_ex(b.md, EVP_sha256(), NULL);
    struct kclient_err ke = {0};
    int r = kclient_stream(c->cl, path, "application/octet-stream", body_data, &b, &ke);
    free(path);
    bool closed_ok = fclose(b.f) == 0;
    b.f = NULL;
    char got_sha[65] = "";
    if (b.md) {
        unsigned char d[32];
        unsigned int dl = 0;
        EVP_DigestFinal_ex(b.md, d, &dl);
        EVP_MD_CTX_free(b.md);
        b.md = NULL;
        for (int i = 0; i < 32; i++)
            snprintf(got_sha + 2 * i, 3, "%02x", d[i]);
    }
    if (b.status && b.status != 200) {
        char msg[1024];
        status_message(b.status, b.b.data, b.b.len, msg, sizeof msg);
        if (why_not)
            rc = die("%s (not in the artifact store: %s)", msg, why_not);
        else
            rc = die("%s", msg);
    } else if (want_sha[0] && !r && (strcmp(got_sha, want_sha) != 0 ||
                                      (int64_t)b.written != want_size)) {
        rc = die("%s: the copy's sha256 %s (%llu bytes) is not the persisted %s (%lld bytes); "
                 "nothing was written",
                 src, got_sha, (unsigned long long)b.written, want_sha, (long long)want_size);
    } else if (r || b.write_failed || !closed_ok) {
        rc = die("copying %s: %s", src, b.write_failed || !closed_ok ? strerror(errno)
                                                                     : ke.e.msg);
    } else if (rename(tmp, dest) != 0) {
        rc = die("cannot write %s: %s", dest, strerror(errno));
    } else if (want_sha[0]) {
        fprintf(stderr, "%s:%s -> %s (%llu bytes, persisted artifact, sha256 %s verified)\n",
                name, src, dest, (unsigned long long)b.written, got_sha);
    } else {
        fprintf(stderr, "%s:%s -> %s (%llu bytes)\n", name, src, dest,
                (unsigned long long)b.written);
    }
    if (rc)
        unlink(tmp);
    free(why_not);
out:
    buf_done(&b.b);
    free(tmp);
    free(dest);
    free(name);
    return rc;
}

int main(int argc, char **argv)
{
    struct cli c = {0};
    signal(SIGPIPE, SIG_IGN);
    kclient_set_default_user_agent("kubectl-tern/0.1.0");
    if (parse(argc, argv, &c))
        return 1;
    static const char *const known[] = {"approve", "deny", "say",    "fork", "suspend",
                                        "resume",  "get",  "logs",   "ls",   "cp",
                                        "retry",   "memory", "persist"};
    bool ok = false;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        ok = ok || strcmp(c.cmd, known[i]) == 0;
    if (!ok)
        return die("unknown command %s (see kubectl tern --help)", c.cmd);
    if (connect_api(&c))
        return 1;
    int r;
    if (strcmp(c.cmd, "approve") == 0)
        r = cmd_decide(&c, true);
    else if (strcmp(c.cmd, "deny") == 0)
        r = cmd_decide(&c, false);
    else if (strcmp(c.cmd, "memory") == 0)
        r = cmd_memory(&c);
    else if (strcmp(c.cmd, "say") == 0)
        r = cmd_say(&c);
    else if (strcmp(c.cmd, "retry") == 0)
        r = cmd_retry(&c);
    else if (strcmp(c.cmd, "fork") == 0)
        r = cmd_fork(&c);
    else if (strcmp(c.cmd, "suspend") == 0)
        r = cmd_suspend(&c, true);
    else if (strcmp(c.cmd, "resume") == 0)
        r = cmd_suspend(&c, false);
    else if (strcmp(c.cmd, "get") == 0)
        r = cmd_get(&c);
    else if (strcmp(c.cmd, "ls") == 0)
        r = cmd_ls(&c);
    else if (strcmp(c.cmd, "cp") == 0)
        r = cmd_cp(&c);
    else if (strcmp(c.cmd, "persist") == 0)
        r = cmd_persist(&c);
    else
        r = cmd_logs(&c);
    kclient_free(c.cl);
    kubeconfig_free(c.kc);
    return r;
}
