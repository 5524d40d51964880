/* policy.c - tool definitions, argument validation, decisions, limits (pure). */
#include "policy/policy.h"

#include "base/buf.h"
#include "base/glob.h"
#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Strict-mode schemas: every property listed in required, optional ones
 * nullable, no additional properties (OpenAI Structured Outputs rules). */
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
};

const char *policy_tool_name(enum policy_tool t)
{
    return (unsigned)t < POLICY_NTOOLS ? defs[t].name : NULL;
}

int policy_tool_from_name(const char *name, enum policy_tool *ret)
{
    for (int i = 0; i < POLICY_NTOOLS; i++)
        if (name && strcmp(name, defs[i].name) == 0) {
            *ret = (enum policy_tool)i;
            return 0;
        }
    return -ENOENT;
}

size_t policy_tool_defs(const struct policy_config *cfg, struct chat_tool_def out[POLICY_NTOOLS])
{
    size_t n = 0;
    for (int i = 0; i < POLICY_NTOOLS; i++)
        if (cfg->tools & (1u << i))
            out[n++] = defs[i];
    return n;
}

int policy_config_validate(const struct policy_config *cfg, struct tern_err *err)
{
    if (cfg->napproval > TERN_POLICY_MAX_PATTERNS || cfg->nwritable > TERN_POLICY_MAX_PATTERNS)
        return err_set(err, TERN_EINVALID, "more than %d patterns", TERN_POLICY_MAX_PATTERNS);
    for (size_t i = 0; i < cfg->napproval; i++) {
        const char *p = cfg->approval[i];
        const char *colon = p ? strchr(p, ':') : NULL;
        enum policy_tool t;
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
    static const char *const members[POLICY_NTOOLS][4] = {
        [POLICY_EXEC] = {"cmd", "cwd", "timeoutMs", NULL},
        [POLICY_READ] = {"path", "offset", "limit", NULL},
        [POLICY_WRITE] = {"path", "content", "append", NULL},
        [POLICY_LIST] = {"path", "depth", NULL, NULL},
    };
    struct policy_args a = {.tool = tool, .timeout_ms = -1, .offset = -1, .limit = -1,
                            .depth = -1};
    cJSON *root = NULL;
    const char *s = NULL;
    int rc;

    if ((unsigned)tool >= POLICY_NTOOLS)
        return err_set(err, TERN_EINVALID, "unknown tool");
    if (!arguments)
        return err_set(err, TERN_EINVALID, "arguments: Required value");
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
            rc = err_set(err, TERN_EINVALID, "unknown member \"%.100s\" (allowed: %s%s%s%s%s)",
                         m->string, members[tool][0], members[tool][1] ? ", " : "",
                         members[tool][1] ? members[tool][1] : "", members[tool][2] ? ", " : "",
                         members[tool][2] ? members[tool][2] : "");
            goto out;
        }

    switch (tool) {
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

const char *policy_main_arg(const struct policy_args *a)
{
    return a->tool == POLICY_EXEC ? a->cmd : a->path;
}

/* ---- decisions --------------------------------------------------------- */

bool policy_pattern_matches(const char *pattern, const struct policy_args *a)
{
    const char *colon = pattern ? strchr(pattern, ':') : NULL;
    const char *name = policy_tool_name(a->tool);
    if (!colon || !name || strlen(name) != (size_t)(colon - pattern) ||
        strncmp(pattern, name, (size_t)(colon - pattern)) != 0)
        return false;
    const char *arg = policy_main_arg(a);
    return arg && glob_match(colon + 1, arg, a->tool == POLICY_EXEC ? GLOB_TEXT : GLOB_PATH);
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
    } else {
        d.timeout_ms = POLICY_FILE_TIMEOUT_MS;
    }

    if (!name || !(cfg->tools & (1u << a->tool))) {
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
