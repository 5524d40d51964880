/* kubectl-tern - the kubectl plugin for AgentSessions.
 *
 *   kubectl tern approve SESSION [ID] [--reason TEXT] [--as-user NAME]
 *   kubectl tern deny SESSION [ID] [--reason TEXT] [--as-user NAME]
 *   kubectl tern say SESSION MESSAGE
 *   kubectl tern retry SESSION
 *   kubectl tern fork SESSION NEW-NAME
 *   kubectl tern suspend SESSION | resume SESSION
 *   kubectl tern get SESSION
 *   kubectl tern logs [-f] SESSION        (reads the journal; --etcd-endpoints)
 * with -n/--namespace, --context, --kubeconfig as kubectl has them.
 *
 * Every intent goes through the resource (annotations or spec), never to
 * the operator or the journal directly: the operator stays the one writer
 * of status and journal, and the API server's admission (the chart's
 * ValidatingAdmissionPolicy) decides who may approve. */
#include "base/buf.h"
#include "base/mem.h"
#include "journal/journal.h"
#include "json/json.h"
#include "kube/kclient.h"
#include "kube/kubeconfig.h"

#include <errno.h>
#include <stdarg.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct kgvr sessions = {"tern.dev", "v1alpha1", "agentsessions"};

struct cli {
    const char *cmd;
    const char *args[3];
    int nargs;
    const char *ns, *context, *kubeconfig, *reason, *as_user, *etcd;
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
    "  say SESSION MESSAGE     append a user message (spec.messages); it becomes a turn\n"
    "                          (refused, saying why, when it would not be processed)\n"
    "  retry SESSION           continue a Failed session with a new turn from the journal\n"
    "                          (transient failures; a limit is raised in spec.limits)\n"
    "  fork SESSION NEW-NAME   fork conversation and workspace at the next turn boundary\n"
    "  suspend SESSION         remove the sandbox pod, keep workspace and journal\n"
    "  resume SESSION          undo suspend\n"
    "  get SESSION             a rich view: phase, turn, usage, approval, sandbox, conditions\n"
    "  logs [-f] SESSION       the journal as readable events; -f follows new ones\n"
    "\n"
    "Flags:\n"
    "  -n, --namespace NS      the session's namespace (default: the context's)\n"
    "      --context NAME      kubeconfig context\n"
    "      --kubeconfig FILE   kubeconfig file (default: $KUBECONFIG, ~/.kube/config)\n"
    "      --reason TEXT       approve/deny: why (tern.dev/reason)\n"
    "      --as-user NAME      approve/deny: tern.dev/decided-by (default: who the API\n"
    "                          server says you are, if it can say)\n"
    "      --etcd-endpoints U  logs: the journal's etcd (env TERN_ETCD_ENDPOINTS); on a\n"
    "                          cluster, port-forward the chart's etcd Service first\n";

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
    c->etcd = getenv("TERN_ETCD_ENDPOINTS");
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
        } else if ((v = VAL("--etcd-endpoints"))) {
            c->etcd = v;
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
    struct kubeconfig_overrides ov = {.context = c->context, .namespace = c->ns};
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

static int64_t int_at(const cJSON *o, const char *k);

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

/* One journal event as a readable line. */
static int print_event(void *ctx, const struct journal_event *ev)
{
    (void)ctx;
    const cJSON *d = ev->data;
    struct buf b;
    buf_init(&b, 4096);
#define S(k) str_or(d, k)
    switch (ev->type) {
    case JOURNAL_EV_USER_MESSAGE: buf_printf(&b, "user: %s", S("text")); break;
    case JOURNAL_EV_MODEL_RESPONSE: {
        buf_printf(&b, "model: %s", S("content"));
        const cJSON *tc;
        cJSON_ArrayForEach(tc, json_get(d, "toolCalls"))
        {
            buf_printf(&b, " [%s %s]", str_or(tc, "name"), str_or(tc, "arguments"));
        }
        if (*S("refusal"))
            buf_printf(&b, " (refusal: %s)", S("refusal"));
        break;
    }
    case JOURNAL_EV_TOOL_CALL:
        buf_printf(&b, "tool call %s %s %s", S("callId"), S("tool"), S("arguments"));
        break;
    case JOURNAL_EV_TOOL_RESULT:
        buf_printf(&b, "tool result %s %s: %s%s", S("callId"), S("tool"), S("status"),
                   cJSON_IsTrue(json_get(d, "replayed")) ? " (replayed)" : "");
        if (*S("commit")) /* publish_branch */
            buf_printf(&b, " (%s %s to %s as %s)",
                       cJSON_IsFalse(json_get(d, "pushed")) ? "found" : "pushed", S("commit"),
                       S("remote"), S("ref"));
        if (*S("server")) /* an MCP tool */
            buf_printf(&b, " (MCP server %s)", S("server"));
        if (cJSON_IsTrue(json_get(d, "redacted")))
            buf_puts(&b, " (credentials redacted)");
        break;
    case JOURNAL_EV_APPROVAL_REQUESTED:
        buf_printf(&b, "approval requested %s: %s", S("id"), S("summary"));
        break;
    case JOURNAL_EV_APPROVAL_DECIDED:
        buf_printf(&b, "approval %s %s by %s", S("id"), S("decision"), S("decidedBy"));
        break;
    case JOURNAL_EV_TURN_FINISHED:
        buf_printf(&b, "turn finished: %s %s%s", S("outcome"), S("reason"), S("summary"));
        break;
    case JOURNAL_EV_SNAPSHOT: {
        int64_t upto = 0;
        json_item_int64(json_get(d, "upto"), &upto);
        buf_printf(&b, "snapshot of the session up to seq %lld", (long long)upto);
        break;
    }
    default: {
        char *txt = json_print(d);
        buf_printf(&b, "%s %.200s", ev->type_name ? ev->type_name : "?", txt);
        free(txt);
    }
    }
#undef S
    if (b.len > 300) {
        b.len = 300;
        b.data[300] = '\0';
        buf_puts(&b, "...");
    }
    for (char *p = b.data; p && *p; p++)
        if (*p == '\n')
            *p = ' ';
    printf("%6llu  t%-3lld %.19s  %s\n", (unsigned long long)ev->seq, (long long)ev->turn,
           ev->time ? ev->time : "", buf_str(&b));
    fflush(stdout);
    buf_done(&b);
    return 0;
}

static atomic_bool interrupted;
static void on_int(int sig)
{
    (void)sig;
    atomic_store(&interrupted, true);
}

static int cmd_logs(struct cli *c)
{
    if (c->nargs != 1)
        return die("usage: kubectl tern logs [-f] SESSION");
    if (!c->etcd)
        return die("logs reads the journal from etcd: give --etcd-endpoints (or "
                   "TERN_ETCD_ENDPOINTS); on a cluster, `kubectl port-forward` the etcd "
                   "Service of the tern chart first");
    cJSON *s = NULL;
    if (get_session(c, c->args[0], &s))
        return 1;
    const char *uid = str_at(json_get(s, "metadata"), "uid", NULL);
    char *uidc = uid ? xstrdup(uid) : NULL;
    cJSON_Delete(s);
    if (!uidc)
        return die("agentsession %s has no uid", c->args[0]);
    struct tern_err err = {0};
    char **eps = NULL;
    size_t n = 0;
    struct etcd *e = NULL;
    struct journal *j = NULL;
    int rc = 1;
    if (etcd_endpoints_parse(c->etcd, &eps, &n, &err)) {
        die("--etcd-endpoints: %s", err.msg);
        goto out;
    }
    struct etcd_config ec = {.endpoints = (const char *const *)eps, .nendpoints = n};
    if (etcd_new(&ec, &e, &err) || journal_open(e, uidc, NULL, &j, &err)) {
        die("journal: %s", err.msg);
        goto out;
    }
    int r;
    /* a compacted journal (the runner's snapshots) starts at its latest
     * snapshot: say so, then show from there */
    uint64_t from = 1;
    if (journal_summary(j)->snapshot_seq &&
        journal_replay(j, 1, NULL, NULL, NULL, &err) == TERN_ECOMPACTED) {
        fprintf(stderr,
                "kubectl-tern: events before seq %llu were compacted into a snapshot; showing "
                "from it\n",
                (unsigned long long)journal_summary(j)->snapshot_seq);
        from = JOURNAL_FROM_SNAPSHOT;
    }
    if (c->follow) {
        struct sigaction sa = {.sa_handler = on_int};
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        r = journal_tail(j, from, print_event, NULL, &interrupted, &err);
        if (r == -ECANCELED)
            r = 0;
    } else {
        r = journal_replay(j, from, print_event, NULL, NULL, &err);
    }
    if (r) {
        die("journal: %s", err.msg);
        goto out;
    }
    rc = 0;
out:
    journal_free(j);
    etcd_free(e);
    etcd_endpoints_free(eps);
    free(uidc);
    return rc;
}

int main(int argc, char **argv)
{
    struct cli c = {0};
    signal(SIGPIPE, SIG_IGN);
    kclient_set_default_user_agent("kubectl-tern/0.1.0");
    if (parse(argc, argv, &c))
        return 1;
    static const char *const known[] = {"approve", "deny", "say", "fork", "suspend",
                                        "resume", "get", "logs", "retry"};
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
    else
        r = cmd_logs(&c);
    kclient_free(c.cl);
    kubeconfig_free(c.kc);
    return r;
}
