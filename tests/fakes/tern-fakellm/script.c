/* script.c - tern-fakellm script parsing and step selection (pure). */
#include "script.h"

#include "base/mem.h"
#include "json/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *opt_str(const cJSON *o, const char *key)
{
    const cJSON *it = json_get(o, key);
    if (cJSON_IsString(it))
        return xstrdup(it->valuestring);
    if (cJSON_IsNumber(it))
        return json_print(it);
    return NULL;
}

static int parse_fault(const cJSON *f, const char *path, struct script_fault *ret,
                       struct tern_err *err)
{
    struct script_fault x = {0};
    const char *type = NULL;
    int rc;
    if (cJSON_IsString(f)) {
        type = f->valuestring;
    } else if (cJSON_IsObject(f)) {
        if ((rc = json_get_string(f, path, "type", JSON_REQUIRED, &type, err)))
            return rc;
    } else {
        return err_set(err, TERN_EINVALID, "%s: must be a string or an object", path);
    }
    if (strcmp(type, "429") == 0)
        x.kind = FAULT_429;
    else if (strcmp(type, "500") == 0)
        x.kind = FAULT_500;
    else if (strcmp(type, "slow") == 0)
        x.kind = FAULT_SLOW;
    else if (strcmp(type, "drop") == 0)
        x.kind = FAULT_DROP;
    else if (strcmp(type, "bad_tool_json") == 0)
        x.kind = FAULT_BAD_TOOL_JSON;
    else if (strcmp(type, "error") == 0)
        x.kind = FAULT_ERROR;
    else
        return err_set(err, TERN_EINVALID,
                       "%s.type: must be 429, 500, slow, drop, bad_tool_json or error", path);
    if (cJSON_IsObject(f)) {
        int64_t v = 0;
        if ((rc = json_get_int_range(f, path, "ms", JSON_OPTIONAL, 0, 600000, &v, err)))
            return rc;
        x.ms = (long)v;
        v = 0;
        if ((rc = json_get_int_range(f, path, "status", JSON_OPTIONAL, 100, 599, &v, err)))
            return rc;
        x.status = (int)v;
        x.retry_after = opt_str(f, "retryAfter");
        x.retry_after_ms = opt_str(f, "retryAfterMs");
        x.should_retry = opt_str(f, "shouldRetry");
        x.code = opt_str(f, "code");
        x.message = opt_str(f, "message");
    }
    if (x.kind == FAULT_ERROR && !x.status)
        x.status = 400;
    *ret = x;
    return 0;
}

static void fault_done(struct script_fault *f)
{
    free(f->retry_after);
    free(f->retry_after_ms);
    free(f->should_retry);
    free(f->code);
    free(f->message);
}

static int parse_alt(const cJSON *a, const char *path, struct script_alt *alt,
                     struct tern_err *err)
{
    const cJSON *match = NULL, *faults = NULL, *reply = NULL;
    int rc;
    char sub[160];
    if (!cJSON_IsObject(a))
        return err_set(err, TERN_EINVALID, "%s: must be an object", path);
    if ((rc = json_get_object(a, path, "match", JSON_OPTIONAL, &match, err)) ||
        (rc = json_get_array(a, path, "faults", JSON_OPTIONAL, &faults, err)) ||
        (rc = json_get_object(a, path, "reply", JSON_REQUIRED, &reply, err)))
        return rc;
    if (match) {
        const char *s = NULL;
        snprintf(sub, sizeof sub, "%s.match", path);
        if ((rc = json_get_string(match, sub, "contains", JSON_OPTIONAL, &s, err)))
            return rc;
        alt->contains = s ? xstrdup(s) : NULL;
        s = NULL;
        if ((rc = json_get_string(match, sub, "regex", JSON_OPTIONAL, &s, err)))
            return rc;
        if (s) {
            if (regcomp(&alt->regex, s, REG_EXTENDED | REG_NOSUB) != 0)
                return err_set(err, TERN_EINVALID, "%s.regex: invalid", sub);
            alt->has_regex = true;
            alt->regex_src = xstrdup(s);
        }
    }
    if (faults) {
        size_t n = (size_t)cJSON_GetArraySize(faults);
        alt->faults = n ? xcalloc(n, sizeof *alt->faults) : NULL;
        for (const cJSON *f = faults->child; f; f = f->next) {
            snprintf(sub, sizeof sub, "%s.faults[%zu]", path, alt->nfaults);
            if ((rc = parse_fault(f, sub, &alt->faults[alt->nfaults], err)))
                return rc;
            alt->nfaults++;
        }
    }
    alt->reply = json_dup(reply);
    return 0;
}

int script_parse(const char *text, size_t len, struct script *ret, struct tern_err *err)
{
    cJSON *root = NULL;
    const cJSON *steps = NULL;
    struct script s = {0};
    int rc = json_parse(text, len, &root, err);
    if (rc)
        return rc;
    if (!cJSON_IsObject(root)) {
        rc = err_set(err, TERN_EINVALID, "script: must be an object");
        goto out;
    }
    if ((rc = json_get_array(root, "", "steps", JSON_REQUIRED, &steps, err)))
        goto out;
    s.model = opt_str(root, "model");
    size_t n = (size_t)cJSON_GetArraySize(steps);
    s.steps = n ? xcalloc(n, sizeof *s.steps) : NULL;
    for (const cJSON *st = steps->child; st; st = st->next) {
        struct script_step *step = &s.steps[s.nsteps++];
        char path[64];
        snprintf(path, sizeof path, "steps[%zu]", s.nsteps - 1);
        const cJSON *alts = json_get(st, "alternatives");
        if (cJSON_IsArray(alts)) {
            size_t na = (size_t)cJSON_GetArraySize(alts);
            if (na == 0) {
                rc = err_set(err, TERN_EINVALID, "%s.alternatives: empty", path);
                goto out;
            }
            step->alts = xcalloc(na, sizeof *step->alts);
            for (const cJSON *a = alts->child; a; a = a->next) {
                char apath[96];
                snprintf(apath, sizeof apath, "%s.alternatives[%zu]", path, step->nalts);
                step->nalts++;
                if ((rc = parse_alt(a, apath, &step->alts[step->nalts - 1], err)))
                    goto out;
            }
        } else {
            step->alts = xcalloc(1, sizeof *step->alts);
            step->nalts = 1;
            if ((rc = parse_alt(st, path, &step->alts[0], err)))
                goto out;
        }
    }
    *ret = s;
    s = (struct script){0};
out:
    script_done(&s);
    cJSON_Delete(root);
    return rc;
}

void script_done(struct script *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nsteps; i++) {
        struct script_step *st = &s->steps[i];
        for (size_t j = 0; j < st->nalts; j++) {
            struct script_alt *a = &st->alts[j];
            free(a->contains);
            free(a->regex_src);
            if (a->has_regex)
                regfree(&a->regex);
            for (size_t k = 0; k < a->nfaults; k++)
                fault_done(&a->faults[k]);
            free(a->faults);
            cJSON_Delete(a->reply);
        }
        free(st->alts);
    }
    free(s->steps);
    free(s->model);
    memset(s, 0, sizeof *s);
}

static const char *role_of(const cJSON *m)
{
    const cJSON *r = json_get(m, "role");
    return cJSON_IsString(r) ? r->valuestring : "";
}

size_t script_assistant_turns(const cJSON *request)
{
    size_t n = 0;
    const cJSON *msgs = json_get(request, "messages");
    if (!cJSON_IsArray(msgs))
        return 0;
    for (const cJSON *m = msgs->child; m; m = m->next)
        if (strcmp(role_of(m), "assistant") == 0)
            n++;
    return n;
}

char *script_latest_input(const cJSON *request)
{
    const cJSON *msgs = json_get(request, "messages"), *last = NULL;
    if (cJSON_IsArray(msgs))
        for (const cJSON *m = msgs->child; m; m = m->next)
            if (strcmp(role_of(m), "user") == 0 || strcmp(role_of(m), "tool") == 0)
                last = m;
    const cJSON *c = json_get(last, "content");
    if (cJSON_IsString(c))
        return xstrdup(c->valuestring);
    /* content parts: concatenate the text of each */
    char *out = xstrdup("");
    if (cJSON_IsArray(c))
        for (const cJSON *p = c->child; p; p = p->next) {
            const cJSON *t = json_get(p, "text");
            if (cJSON_IsString(t)) {
                char *n = xasprintf("%s%s", out, t->valuestring);
                free(out);
                out = n;
            }
        }
    return out;
}

int script_select(const struct script *s, const cJSON *request, size_t *ret_step,
                  size_t *ret_alt)
{
    size_t step = script_assistant_turns(request);
    if (step >= s->nsteps)
        return -ENOENT;
    char *input = script_latest_input(request);
    const struct script_step *st = &s->steps[step];
    int rc = -ESRCH;
    for (size_t i = 0; i < st->nalts; i++) {
        const struct script_alt *a = &st->alts[i];
        if (a->contains && !strstr(input, a->contains))
            continue;
        if (a->has_regex && regexec(&a->regex, input, 0, NULL, 0) != 0)
            continue;
        *ret_step = step;
        *ret_alt = i;
        rc = 0;
        break;
    }
    free(input);
    return rc;
}
