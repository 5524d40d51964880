/* mcp.c - the runner's MCP servers: catalog and calls. See mcp.h. */
#include "runner/mcp.h"

#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "mcp/mcpclient.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LIST_TIMEOUT_MS 30000

struct entry {
    char *name, *description, *schema;
    size_t server; /* index in spec.tools.mcpServers */
};

struct mcp_tools {
    const struct runner_spec *spec;
    struct mcpclient **clients; /* one per spec.tools.mcpServers[i] */
    struct entry *entries;
    struct policy_mcp_tool *catalog;
    size_t n;
    bool loaded;
};

struct mcp_tools *mcp_tools_new(const struct runner_spec *spec, atomic_bool *stop)
{
    struct mcp_tools *m = xcalloc(1, sizeof *m);
    m->spec = spec;
    m->clients = spec->nmcp ? xcalloc(spec->nmcp, sizeof *m->clients) : NULL;
    for (size_t i = 0; i < spec->nmcp; i++) {
        const struct runner_mcp_server *s = &spec->mcp[i];
        struct mcpclient_config cc = {.name = s->name,
                                      .url = s->url,
                                      .headers = (const char *const *)s->headers,
                                      .nheaders = s->nheaders,
                                      .cancel = stop};
        m->clients[i] = mcpclient_new(&cc);
    }
    return m;
}

void mcp_tools_free(struct mcp_tools *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->spec->nmcp; i++)
        mcpclient_free(m->clients[i]);
    free(m->clients);
    for (size_t i = 0; i < m->n; i++) {
        free(m->entries[i].name);
        free(m->entries[i].description);
        free(m->entries[i].schema);
    }
    free(m->entries);
    free(m->catalog);
    free(m);
}

/* Appends "<server>/<tool>: <why>" to notes. */
static void note(char *notes, size_t len, const char *server, const char *tool, const char *why)
{
    if (!notes || !len)
        return;
    size_t used = strlen(notes);
    if (used + 2 < len)
        snprintf(notes + used, len - used, "%s%s/%s: %s", used ? "; " : "", server, tool, why);
}

int mcp_tools_load(struct mcp_tools *m, char *notes, size_t notes_len, struct tern_err *err)
{
    if (m->loaded)
        return 0;
    for (size_t i = 0; i < m->spec->nmcp; i++) {
        const struct runner_mcp_server *s = &m->spec->mcp[i];
        struct mcpwire_tools listed = {0};
        int rc = mcpclient_list_tools(m->clients[i], LIST_TIMEOUT_MS, &listed, err);
        if (rc)
            return rc;
        for (size_t k = 0; k < s->nallowed; k++) {
            const struct mcpwire_tool *found = NULL;
            for (size_t j = 0; j < listed.n && !found; j++)
                if (strcmp(listed.tools[j].name, s->allowed[k]) == 0)
                    found = &listed.tools[j];
            if (!found) {
                note(notes, notes_len, s->name, s->allowed[k], "not listed by the server");
                continue;
            }
            if (found->problem) {
                note(notes, notes_len, s->name, s->allowed[k], found->problem);
                continue;
            }
            if (m->n >= TERN_MCP_MAX_OFFERED) {
                note(notes, notes_len, s->name, s->allowed[k],
                     "more than the tools offered at most");
                continue;
            }
            m->entries = xreallocarray(m->entries, m->n + 1, sizeof *m->entries);
            m->entries[m->n++] = (struct entry){
                .name = xasprintf("%s__%s", s->name, found->name),
                .description =
                    xasprintf("%s (MCP server %s, run outside the sandbox)",
                              *found->description ? found->description : found->name, s->name),
                .schema = xstrdup(found->schema),
                .server = i,
            };
        }
        mcpwire_tools_done(&listed);
    }
    m->catalog = m->n ? xcalloc(m->n, sizeof *m->catalog) : NULL;
    for (size_t e = 0; e < m->n; e++) {
        const struct runner_mcp_server *s = &m->spec->mcp[m->entries[e].server];
        m->catalog[e] = (struct policy_mcp_tool){
            .name = m->entries[e].name,
            .server = s->name,
            .tool = m->entries[e].name + strlen(s->name) + 2,
            .description = m->entries[e].description,
            .schema = m->entries[e].schema,
            .timeout_ms = s->timeout_ms,
        };
    }
    m->loaded = true;
    return 0;
}

const struct policy_mcp_tool *mcp_tools_catalog(const struct mcp_tools *m, size_t *ret_n)
{
    *ret_n = m->n;
    return m->catalog;
}

void mcp_outcome_done(struct mcp_outcome *o)
{
    if (!o)
        return;
    free(o->text);
    memset(o, 0, sizeof *o);
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int mcp_tools_call(struct mcp_tools *m, const struct policy_args *a, const char *idem_key,
                   int64_t timeout_ms, struct mcp_outcome *ret, struct tern_err *err)
{
    struct mcpclient *c = NULL;
    for (size_t i = 0; a->mcp && i < m->spec->nmcp && !c; i++)
        if (strcmp(m->spec->mcp[i].name, a->mcp->server) == 0)
            c = m->clients[i];
    if (!c) {
        *ret = (struct mcp_outcome){"error", xstrdup("error: no such MCP server"), 0};
        return 0;
    }
    for (int attempt = 0;; attempt++) {
        struct mcpclient_call r = {0};
        struct tern_err e = {0};
        long status = 0;
        int rc = mcpclient_call_tool(c, a->mcp->tool, a->json, idem_key, (long)timeout_ms, &r,
                                     &status, &e);
        if (rc == 0) {
            const char *st = r.rpc_error ? "error" : r.result.is_error ? "failed" : "completed";
            *ret = (struct mcp_outcome){st, r.result.text, r.http_status};
            r.result.text = NULL;
            mcpclient_call_done(&r);
            return 0;
        }
        mcpclient_call_done(&r);
        bool overloaded =
            rc == TERN_EHTTP && (status == 429 || status == 502 || status == 503 || status == 504);
        if (overloaded && attempt < 2) {
            pause_ms(1000L << attempt); /* the same key: a server that ran it answers its record */
            continue;
        }
        switch (rc) {
        case TERN_ETIMEOUT:
            *ret = (struct mcp_outcome){
                "timeout",
                xasprintf("timed out: the MCP server did not answer within %lld s; the call may "
                          "have run. (%s)",
                          (long long)(timeout_ms / 1000), e.msg),
                status};
            return 0;
        case TERN_EAUTH:
        case TERN_EHTTP:
        case TERN_EPARSE:
        case TERN_ETOOLARGE:
        case TERN_EINVALID:
            *ret = (struct mcp_outcome){"error", xasprintf("error: %s", e.msg), status};
            return 0;
        default:
            /* unreachable, a broken connection, cancelled: retried under the same key */
            if (err)
                *err = e;
            return rc;
        }
    }
}
