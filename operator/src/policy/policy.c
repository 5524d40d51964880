/* policy.c - tool definitions, argument validation, decisions, limits (pure). */
#include "policy/policy.h"

#include "base/buf.h"
#include "base/glob.h"
#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"
#include "mcp/mcpwire.h"
#include "memory/memprop.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Strict-mode schemas: every property listed in required, optional ones
 * nullable, no additional properties (OpenAI Structured Outputs rules). */
#define PUBLISH_SCHEMA_HEAD                                                                        \
    "{\"type\":\"object\",\"properties\":{"                                                         \
    "\"repo\":{\"type\":\"string\",\"description\":\"The repository's directory relative to "       \
    "the workspace, e.g. working/repo.\"},"                                                        \
    "\"branch\":{\"type\":\"string\",\"description\":\"The local branch to publish.\"},"            \
    "\"remote\":{\"description\":\"The remote to push to.\","
#define PUBLISH_SCHEMA_TAIL                                                                        \
    "},\"remoteBranch\":{\"type\":[\"string\",\"null\"],\"description\":\"The branch name at the "  \
    "remote, or null for the same name.\"}},"                                                      \
    "\"required\":[\"repo\",\"branch\",\"remote\",\"remoteBranch\"],\"additionalProperties\":false}"
static const struct chat_tool_def defs[POLICY_NTOOLS] = {
    [POLICY_EXEC] = {
        "exec_command",
        "Run a shell command (sh -c) in the sandbox. The working directory is the workspace "
        "(/workspace) unless cwd is given. Returns exit code, stdout and stderr (truncated "
        "when large).",
        "{\"type\":\"object\",\"properties\":{"
        "\"cmd\":{\"type\":\"string\",\"description\":\"The shell command to run.\"},"
        "\"cwd\":{\"type\":[\"string\",\"null\"],\"description\":\"Working directory relative "
        "to the workspace, or null.\"},"
        "\"timeoutMs\":{\"type\":[\"integer\",\"null\"],\"description\":\"Timeout in "
        "milliseconds, or null for the default (120000).\"}},"
        "\"required\":[\"cmd\",\"cwd\",\"timeoutMs\"],\"additionalProperties\":false}",
        true},
    [POLICY_READ] = {
        "read_file",
        "Read a file of the workspace. Paths are relative to the workspace.",
        "{\"type\":\"object\",\"properties\":{"
        "\"path\":{\"type\":\"string\",\"description\":\"File path relative to the "
        "workspace.\"},"
        "\"offset\":{\"type\":[\"integer\",\"null\"],\"description\":\"Byte offset to start "
        "at, or null.\"},"
        "\"limit\":{\"type\":[\"integer\",\"null\"],\"description\":\"Maximum bytes to read, "
        "or null.\"}},"
        "\"required\":[\"path\",\"offset\",\"limit\"],\"additionalProperties\":false}",
        true},
    [POLICY_WRITE] = {
        "write_file",
        "Write (or append to) a file of the workspace. Only working/ and output/ are "
        "writable unless configured otherwise.",
        "{\"type\":\"object\",\"properties\":{"
        "\"path\":{\"type\":\"string\",\"description\":\"File path relative to the "
        "workspace.\"},"
        "\"content\":{\"type\":\"string\",\"description\":\"The text to write.\"},"
        "\"append\":{\"type\":[\"boolean\",\"null\"],\"description\":\"Append instead of "
        "replacing, or null (replace).\"}},"
        "\"required\":[\"path\",\"content\",\"append\"],\"additionalProperties\":false}",
        true},
    [POLICY_LIST] = {
        "list_files",
        "List files under a directory of the workspace.",
        "{\"type\":\"object\",\"properties\":{"
        "\"path\":{\"type\":\"string\",\"description\":\"Directory relative to the workspace "
        "('.' for the root).\"},"
        "\"depth\":{\"type\":[\"integer\",\"null\"],\"description\":\"How many levels to "
        "descend (1 = direct children), or null for 1.\"}},"
        "\"required\":[\"path\",\"depth\"],\"additionalProperties\":false}",
        true},
    [POLICY_PUBLISH] = {
        "publish_branch",
        "Publish a branch of a git repository in the workspace: the trusted side takes the "
        "branch's commits from the workspace and pushes them to a remote configured for this "
        "session (the sandbox itself has no network and no credentials). Commit first. "
        "Returns the commit pushed.",
        PUBLISH_SCHEMA_HEAD "\"type\":\"string\"" PUBLISH_SCHEMA_TAIL,
        true},
    [POLICY_MEMORY] = {
        "propose_memory_update",
        "Propose a change to simple.md, the team's memory (read-only to you): the new text of "
        "one markdown section, with the reason. A human reviews the proposal; once approved it "
        "is applied for later sessions (this session keeps seeing the current file). "
        "replace_section.heading names the section by its heading line (e.g. \"## Build\"): its "
        "body up to the next heading of the same level is replaced by content; a heading not in "
        "simple.md adds a new section at the end; empty content removes the section. Content "
        "may hold deeper headings only. Returns the proposal's id.",
        "{\"type\":\"object\",\"properties\":{"
        "\"reason\":{\"type\":\"string\",\"description\":\"Why the memory should change "
        "(for the human who reviews it).\"},"
        "\"replace_section\":{\"type\":\"object\",\"properties\":{"
        "\"heading\":{\"type\":\"string\",\"description\":\"The section's heading line, "
        "e.g. ## Build.\"},"
        "\"content\":{\"type\":\"string\",\"description\":\"The section's new body "
        "(without the heading line); empty removes the section.\"}},"
        "\"required\":[\"heading\",\"content\"],\"additionalProperties\":false}},"
        "\"required\":[\"reason\",\"replace_section\"],\"additionalProperties\":false}",
        true},
    [POLICY_MCP] = {NULL, NULL, NULL, false},
};

const char *policy_tool_name(enum policy_tool t)
{
    return (unsigned)t < POLICY_NTOOLS ? defs[t].name : NULL;
}

int policy_tool_from_name(const char *name, enum policy_tool *ret)
{
    for (int i = 0; i < POLICY_NTOOLS; i++)
        if (name && defs[i].name && strcmp(name, defs[i].name) == 0) {
            *ret = (enum policy_tool)i;
            return 0;
        }
    return -ENOENT;
}

size_t policy_tool_defs(const struct policy_config *cfg, struct chat_tool_def out[POLICY_NTOOLS])
{
    size_t n = 0;
    for (int i = 0; i < POLICY_NTOOLS; i++)
        if (defs[i].name && (cfg->tools & (1u << i))) {
            out[n] = defs[i];
            if (i == POLICY_PUBLISH && cfg->publish_schema)
                out[n].parameters = cfg->publish_schema;
            n++;
        }
    return n;
}

size_t policy_mcp_defs(const struct policy_config *cfg, struct chat_tool_def *out, size_t max)
{
    size_t n = 0;
    if (!(cfg->tools & (1u << POLICY_MCP)))
        return 0;
    for (size_t i = 0; i < cfg->nmcp && n < max; i++)
        out[n++] = (struct chat_tool_def){cfg->mcp[i].name, cfg->mcp[i].description,
                                          cfg->mcp[i].schema, false};
    return n;
}

char *policy_publish_schema(const char *const *remotes, size_t n)
{
    struct buf b;
    buf_init(&b, 1u << 20);
    buf_puts(&b, PUBLISH_SCHEMA_HEAD "\"type\":\"string\",\"enum\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            buf_putc(&b, ',');
        buf_put_json_string(&b, remotes[i]);
    }
    buf_puts(&b, "]" PUBLISH_SCHEMA_TAIL);
    return buf_steal(&b);
}

bool policy_branch_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > TERN_PUBLISH_MAX_REF || name[0] == '-' || name[0] == '/' ||
        name[n - 1] == '/' || name[n - 1] == '.' || strcmp(name, "@") == 0 ||
        strstr(name, "..") || strstr(name, "//") || strstr(name, "@{"))
        return false;
    if (n >= 5 && strcmp(name + n - 5, ".lock") == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c <= 0x20 || c >= 0x7f || strchr("~^:?*[\\", c))
            return false;
        /* no component starts with a dot or ends with .lock */
        if ((i == 0 || name[i - 1] == '/') && c == '.')
            return false;
        if (c == '/' && i >= 5 && strncmp(name + i - 5, ".lock", 5) == 0)
            return false;
    }
    return true;
}

int policy_config_validate(const struct policy_config *cfg, struct tern_err *err)
{
    if (cfg->napproval > TERN_POLICY_MAX_PATTERNS || cfg->nwritable > TERN_POLICY_MAX_PATTERNS)
        return err_set(err, TERN_EINVALID, "more than %d patterns", TERN_POLICY_MAX_PATTERNS);
    for (size_t i = 0; i < cfg->napproval; i++) {
        const char *p = cfg->approval[i];
        const char *colon = p ? strchr(p, ':') : NULL;
        enum policy_tool t;
        if (p && strncmp(p, "mcp:", 4) == 0) {
            const char *slash = strchr(p + 4, '/');
            const char *c2 = slash ? strchr(slash + 1, ':') : NULL;
            if (!slash || slash == p + 4 || !c2 || c2 == slash + 1)
                return err_set(err, TERN_EINVALID,
                               "requiresApproval[%zu]: must be \"mcp:<server>/<tool glob>:"
                               "<arguments glob>\"",
                               i);
            char *tool = xstrndup(slash + 1, (size_t)(c2 - slash - 1));
            bool ok = glob_valid(tool) && glob_valid(c2 + 1);
            free(tool);
            if (!ok)
                return err_set(err, TERN_EINVALID, "requiresApproval[%zu]: invalid glob", i);
            continue;
        }
        if (!colon)
            return err_set(err, TERN_EINVALID,
                           "requiresApproval[%zu]: must be \"<tool>:<glob>\"", i);
        char name[64];
        size_t nl = (size_t)(colon - p);
        if (nl >= sizeof name)
            return err_set(err, TERN_EINVALID, "requiresApproval[%zu]: unknown tool", i);
        memcpy(name, p, nl);
        name[nl] = 0;
        if (policy_tool_from_name(name, &t) != 0)
            return err_set(err, TERN_EINVALID, "requiresApproval[%zu]: unknown tool \"%s\"", i,
                           name);
        if (!glob_valid(colon + 1))
            return err_set(err, TERN_EINVALID, "requiresApproval[%zu]: invalid glob", i);
    }
    for (size_t i = 0; i < cfg->nwritable; i++)
        if (!glob_valid(cfg->writable[i]))
            return err_set(err, TERN_EINVALID, "writablePaths[%zu]: invalid glob", i);
    if (cfg->exec_max_timeout_ms < 0)
        return err_set(err, TERN_EINVALID, "exec timeout bound: must be >= 0");
    return 0;
}

/* ---- arguments --------------------------------------------------------- */

int policy_normalize_path(const char *in, char **ret, struct tern_err *err)
{
    if (!in)
        return err_set(err, TERN_EINVALID, "path: Required value");
    size_t len = strlen(in);
    if (len > TERN_POLICY_MAX_PATH)
        return err_set(err, TERN_EINVALID, "path: longer than %d bytes", TERN_POLICY_MAX_PATH);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)in[i] < 0x20 || in[i] == 0x7f)
            return err_set(err, TERN_EINVALID, "path: contains a control character");
    const char *p = in;
    if (p[0] == '/') {
        if (strncmp(p, "/workspace", 10) == 0 && (p[10] == 0 || p[10] == '/'))
            p += 10;
        else
            return err_set(err, TERN_EINVALID,
                           "path: must be relative to the workspace (or under /workspace)");
    }
    struct buf b;
    buf_init(&b, TERN_POLICY_MAX_PATH + 1);
    while (*p) {
        while (*p == '/')
            p++;
        const char *end = strchr(p, '/');
        size_t sl = end ? (size_t)(end - p) : strlen(p);
        if (sl == 0)
            break;
        if (sl == 1 && p[0] == '.') {
            /* skip */
        } else if (sl == 2 && p[0] == '.' && p[1] == '.') {
            buf_done(&b);
            return err_set(err, TERN_EINVALID, "path: \"..\" is not allowed");
        } else {
            if (b.len)
                buf_putc(&b, '/');
            buf_append(&b, p, sl);
        }
        p += sl;
    }
    if (b.len == 0)
        buf_putc(&b, '.');
    *ret = buf_steal(&b);
    return 0;
}

void policy_args_done(struct policy_args *a)
{
    if (!a)
        return;
    free(a->cmd);
    free(a->cwd);
    free(a->path);
    free(a->content);
    free(a->branch);
    free(a->remote);
    free(a->remote_branch);
    free(a->target);
    free(a->reason);
    free(a->heading);
    free(a->json);
    memset(a, 0, sizeof *a);
}

static bool member_allowed(const char *key, const char *const *allowed)
{
    for (; *allowed; allowed++)
        if (strcmp(key, *allowed) == 0)
            return true;
    return false;
}

int policy_parse_args(enum policy_tool tool, const char *arguments, struct policy_args *ret,
                      struct tern_err *err)
{
    static const char *const members[POLICY_NTOOLS][5] = {
        [POLICY_EXEC] = {"cmd", "cwd", "timeoutMs", NULL},
        [POLICY_READ] = {"path", "offset", "limit", NULL},
        [POLICY_WRITE] = {"path", "content", "append", NULL},
        [POLICY_LIST] = {"path", "depth", NULL, NULL},
        [POLICY_PUBLISH] = {"repo", "branch", "remote", "remoteBranch", NULL},
    };
    struct policy_args a = {.tool = tool, .timeout_ms = -1, .offset = -1, .limit = -1,
                            .depth = -1};
    cJSON *root = NULL;
    const char *s = NULL;
    int rc;

    if ((unsigned)tool >= POLICY_NTOOLS || tool == POLICY_MCP)
        return err_set(err, TERN_EINVALID, "unknown tool");
    if (!arguments)
        return err_set(err, TERN_EINVALID, "arguments: Required value");
    if (tool == POLICY_MEMORY) {
        struct memprop_args m = {0};
        if ((rc = memprop_parse_args(arguments, strlen(arguments), &m, err)))
            return rc;
        a.reason = m.reason;
        a.heading = m.heading;
        a.content = m.content;
        *ret = a;
        return 0;
    }
    rc = json_parse(arguments, strlen(arguments), &root, err);
    if (rc) {
        rc = err_wrap(err, TERN_EINVALID, "arguments are not valid JSON");
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        rc = err_set(err, TERN_EINVALID, "arguments: must be a JSON object");
        goto out;
    }
    for (const cJSON *m = root->child; m; m = m->next)
        if (!member_allowed(m->string, members[tool])) {
            rc = err_set(err, TERN_EINVALID,
                         "unknown member \"%.100s\" (allowed: %s%s%s%s%s%s%s)", m->string,
                         members[tool][0], members[tool][1] ? ", " : "",
                         members[tool][1] ? members[tool][1] : "", members[tool][2] ? ", " : "",
                         members[tool][2] ? members[tool][2] : "", members[tool][3] ? ", " : "",
                         members[tool][3] ? members[tool][3] : "");
            goto out;
        }

    switch (tool) {
    case POLICY_PUBLISH: {
        const char *br = NULL, *rem = NULL, *rb = NULL;
        if ((rc = json_get_string(root, "", "repo", JSON_REQUIRED, &s, err)) ||
            (rc = policy_normalize_path(s, &a.path, err)) ||
            (rc = json_get_string(root, "", "branch", JSON_REQUIRED, &br, err)) ||
            (rc = json_get_string(root, "", "remote", JSON_REQUIRED, &rem, err)) ||
            (rc = json_get_string(root, "", "remoteBranch", JSON_OPTIONAL, &rb, err)))
            goto out;
        if (!policy_branch_ok(br) || (rb && !policy_branch_ok(rb))) {
            rc = err_set(err, TERN_EINVALID,
                         "%s: \"%.100s\" is not a valid branch name (git check-ref-format)",
                         policy_branch_ok(br) ? "remoteBranch" : "branch",
                         policy_branch_ok(br) ? rb : br);
            goto out;
        }
        if (!*rem || strlen(rem) > 64) {
            rc = err_set(err, TERN_EINVALID, "remote: must be 1..64 bytes");
            goto out;
        }
        a.branch = xstrdup(br);
        a.remote = xstrdup(rem);
        a.remote_branch = xstrdup(rb ? rb : br);
        a.target = xasprintf("%s/%s", a.remote, a.remote_branch);
        break;
    }
    case POLICY_EXEC:
        if ((rc = json_get_string(root, "", "cmd", JSON_REQUIRED, &s, err)))
            goto out;
        if (!*s || strlen(s) > TERN_POLICY_MAX_CMD) {
            rc = err_set(err, TERN_EINVALID, "cmd: must be 1..%d bytes", TERN_POLICY_MAX_CMD);
            goto out;
        }
        a.cmd = xstrdup(s);
        s = NULL;
        if ((rc = json_get_string(root, "", "cwd", JSON_OPTIONAL, &s, err)))
            goto out;
        if (s && (rc = policy_normalize_path(s, &a.cwd, err)))
            goto out;
        if ((rc = json_get_int_range(root, "", "timeoutMs", JSON_OPTIONAL, 1, INT64_MAX / 2,
                                     &a.timeout_ms, err)))
            goto out;
        break;
    case POLICY_READ:
    case POLICY_WRITE:
    case POLICY_LIST:
        if ((rc = json_get_string(root, "", "path", JSON_REQUIRED, &s, err)) ||
            (rc = policy_normalize_path(s, &a.path, err)))
            goto out;
        if (tool == POLICY_READ) {
            if ((rc = json_get_int_range(root, "", "offset", JSON_OPTIONAL, 0, INT64_MAX / 2,
                                         &a.offset, err)) ||
                (rc = json_get_int_range(root, "", "limit", JSON_OPTIONAL, 0, INT64_MAX / 2,
                                         &a.limit, err)))
                goto out;
        } else if (tool == POLICY_WRITE) {
            s = NULL;
            if ((rc = json_get_string(root, "", "content", JSON_REQUIRED, &s, err)))
                goto out;
            if (strlen(s) > TERN_POLICY_MAX_WRITE) {
                rc = err_set(err, TERN_EINVALID, "content: longer than %u bytes",
                             TERN_POLICY_MAX_WRITE);
                goto out;
            }
            a.content = xstrdup(s);
            if ((rc = json_get_bool(root, "", "append", JSON_OPTIONAL, &a.append, err)))
                goto out;
            if (strcmp(a.path, ".") == 0) {
                rc = err_set(err, TERN_EINVALID, "path: must name a file");
                goto out;
            }
        } else {
            if ((rc = json_get_int_range(root, "", "depth", JSON_OPTIONAL, 1,
                                         TERN_POLICY_MAX_DEPTH, &a.depth, err)))
                goto out;
        }
        break;
    default: break;
    }
    *ret = a;
    a = (struct policy_args){0};
out:
    policy_args_done(&a);
    cJSON_Delete(root);
    return rc;
}

int policy_parse_call(const struct policy_config *cfg, const char *name, const char *arguments,
                      struct policy_args *ret, struct tern_err *err)
{
    enum policy_tool t;
    int rc;
    if (policy_tool_from_name(name, &t) == 0) {
        if ((rc = policy_parse_args(t, arguments, ret, err)))
            return rc;
        if (t != POLICY_PUBLISH)
            return 0;
        for (size_t i = 0; i < cfg->nremotes; i++)
            if (strcmp(cfg->remotes[i], ret->remote) == 0)
                return 0;
        struct buf b;
        buf_init(&b, 4096);
        for (size_t i = 0; i < cfg->nremotes; i++)
            buf_printf(&b, "%s%s", i ? ", " : "", cfg->remotes[i]);
        rc = err_set(err, TERN_EINVALID, "remote: \"%.64s\" is not configured (remotes: %s)",
                     ret->remote, b.len ? buf_str(&b) : "none");
        buf_done(&b);
        policy_args_done(ret);
        return rc;
    }
    for (size_t i = 0; name && i < cfg->nmcp; i++) {
        const struct policy_mcp_tool *m = &cfg->mcp[i];
        if (strcmp(m->name, name) != 0)
            continue;
        struct policy_args a = {.tool = POLICY_MCP, .mcp = m, .timeout_ms = -1, .offset = -1,
                                .limit = -1, .depth = -1};
        if ((rc = mcpwire_check_args(m->schema, arguments, &a.json, err)))
            return rc;
        *ret = a;
        return 0;
    }
    return err_set(err, TERN_ENOTFOUND, "unknown tool \"%.200s\"", name ? name : "");
}

const char *policy_main_arg(const struct policy_args *a)
{
    switch (a->tool) {
    case POLICY_EXEC: return a->cmd;
    case POLICY_PUBLISH: return a->target;
    case POLICY_MEMORY: return a->heading;
    case POLICY_MCP: return a->json;
    default: return a->path;
    }
}

char *policy_summary(const struct policy_args *a)
{
    switch (a->tool) {
    case POLICY_PUBLISH:
        return xasprintf("push branch %s of %s to %s as %s", a->branch, a->path, a->remote,
                         a->remote_branch);
    case POLICY_MEMORY:
        return xasprintf("propose a change of simple.md section %s: %s", a->heading,
                         a->reason ? a->reason : "");
    case POLICY_MCP:
        return xasprintf("%s/%s %s", a->mcp ? a->mcp->server : "?", a->mcp ? a->mcp->tool : "?",
                         a->json ? a->json : "{}");
    default: {
        const char *m = policy_main_arg(a);
        return xstrdup(m ? m : "");
    }
    }
}

/* ---- decisions --------------------------------------------------------- */

/* "mcp:<server>/<tool glob>:<arguments glob>" against an MCP call. */
static bool mcp_pattern_matches(const char *pattern, const struct policy_args *a)
{
    const char *srv = pattern + 4;
    const char *slash = strchr(srv, '/');
    const char *colon = slash ? strchr(slash + 1, ':') : NULL;
    if (a->tool != POLICY_MCP || !a->mcp || !slash || !colon)
        return false;
    if (strlen(a->mcp->server) != (size_t)(slash - srv) ||
        strncmp(a->mcp->server, srv, (size_t)(slash - srv)) != 0)
        return false;
    char *tool = xstrndup(slash + 1, (size_t)(colon - slash - 1));
    bool hit = glob_match(tool, a->mcp->tool, GLOB_TEXT) &&
               glob_match(colon + 1, a->json ? a->json : "{}", GLOB_TEXT);
    free(tool);
    return hit;
}

bool policy_pattern_matches(const char *pattern, const struct policy_args *a)
{
    if (pattern && strncmp(pattern, "mcp:", 4) == 0)
        return mcp_pattern_matches(pattern, a);
    const char *colon = pattern ? strchr(pattern, ':') : NULL;
    const char *name = policy_tool_name(a->tool);
    if (!colon || !name || strlen(name) != (size_t)(colon - pattern) ||
        strncmp(pattern, name, (size_t)(colon - pattern)) != 0)
        return false;
    const char *arg = policy_main_arg(a);
    bool text = a->tool == POLICY_EXEC || a->tool == POLICY_PUBLISH || a->tool == POLICY_MEMORY;
    return arg && glob_match(colon + 1, arg, text ? GLOB_TEXT : GLOB_PATH);
}

static bool writable(const struct policy_config *cfg, const char *path)
{
    for (size_t i = 0; i < cfg->nwritable; i++)
        if (glob_match(cfg->writable[i], path, GLOB_PATH))
            return true;
    return false;
}

void policy_decide(const struct policy_config *cfg, const struct policy_args *a,
                   struct policy_decision *ret)
{
    struct policy_decision d = {.verdict = POLICY_ALLOW};
    const char *name = policy_tool_name(a->tool);

    if (a->tool == POLICY_EXEC) {
        int64_t bound = cfg->exec_max_timeout_ms > 0 ? cfg->exec_max_timeout_ms
                                                     : POLICY_EXEC_TIMEOUT_MS;
        d.timeout_ms = POLICY_EXEC_TIMEOUT_MS < bound ? POLICY_EXEC_TIMEOUT_MS : bound;
        if (a->timeout_ms > 0) {
            d.timeout_ms = a->timeout_ms;
            if (d.timeout_ms > bound) {
                d.timeout_ms = bound;
                d.timeout_clamped = true;
            }
        }
    } else if (a->tool == POLICY_PUBLISH) {
        d.timeout_ms = POLICY_PUBLISH_TIMEOUT_MS;
    } else if (a->tool == POLICY_MEMORY) {
        d.timeout_ms = POLICY_MEMORY_TIMEOUT_MS;
    } else if (a->tool == POLICY_MCP) {
        d.timeout_ms = a->mcp && a->mcp->timeout_ms > 0 ? a->mcp->timeout_ms : 60000;
        name = a->mcp ? a->mcp->name : NULL;
    } else {
        d.timeout_ms = POLICY_FILE_TIMEOUT_MS;
    }

    if (!name || (unsigned)a->tool >= POLICY_NTOOLS || !(cfg->tools & (1u << a->tool))) {
        d.verdict = POLICY_DENY;
        snprintf(d.reason, sizeof d.reason, "tool %s is not permitted in this session",
                 name ? name : "?");
    } else if (a->tool == POLICY_WRITE && !writable(cfg, a->path)) {
        d.verdict = POLICY_DENY;
        snprintf(d.reason, sizeof d.reason,
                 "path %.300s is not writable (writablePaths does not match it)", a->path);
    } else {
        for (size_t i = 0; i < cfg->napproval; i++)
            if (policy_pattern_matches(cfg->approval[i], a)) {
                d.verdict = POLICY_NEEDS_APPROVAL;
                d.pattern = cfg->approval[i];
                break;
            }
    }
    *ret = d;
}

/* ---- limits ------------------------------------------------------------ */

static bool reached(int64_t limit, int64_t used)
{
    return limit > 0 && used >= limit;
}

enum policy_limit policy_check_limits(const struct policy_limits *l, const struct policy_usage *u,
                                      enum policy_stage stage)
{
    if (stage == POLICY_BEFORE_MODEL && reached(l->max_model_turns, u->model_turns))
        return POLICY_LIMIT_MODEL_TURNS;
    if (stage == POLICY_BEFORE_TOOL && reached(l->max_tool_calls, u->tool_calls))
        return POLICY_LIMIT_TOOL_CALLS;
    if (reached(l->max_tokens, u->tokens))
        return POLICY_LIMIT_TOKENS;
    if (reached(l->max_cost_micro_usd, u->cost_micro_usd))
        return POLICY_LIMIT_COST;
    if (reached(l->timeout_ms, u->elapsed_ms))
        return POLICY_LIMIT_TIME;
    return POLICY_LIMIT_NONE;
}

const char *policy_limit_name(enum policy_limit l)
{
    switch (l) {
    case POLICY_LIMIT_NONE: return "none";
    case POLICY_LIMIT_MODEL_TURNS: return "maxModelTurns";
    case POLICY_LIMIT_TOOL_CALLS: return "maxToolCalls";
    case POLICY_LIMIT_TOKENS: return "maxTokens";
    case POLICY_LIMIT_COST: return "maxCostMicroUSD";
    case POLICY_LIMIT_TIME: return "timeoutSeconds";
    }
    return "none";
}
