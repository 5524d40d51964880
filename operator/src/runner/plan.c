/* plan.c - the next action of a turn from the replayed state (pure). */
#include "runner/plan.h"

#include "base/limits.h"
#include "base/mem.h"
#include "json/jschema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void plan_done(struct plan *p)
{
    if (!p)
        return;
    if (p->has_args)
        policy_args_done(&p->args);
    free(p->status);
    free(p->output);
    free(p->summary);
    free(p->reason);
    free(p->message);
    cJSON_Delete(p->result);
    memset(p, 0, sizeof *p);
}

char *plan_bounded(const char *v, size_t max)
{
    size_t n = strlen(v);
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)v[n] & 0xC0) == 0x80)
            n--;
    }
    return xstrndup(v, n);
}

/* "maxTokens: used 1686 of 1500" (timeoutSeconds in seconds, cost in micro-USD). */
char *plan_limit_message(const char *limit, int64_t used, int64_t max)
{
    if (limit && strcmp(limit, "timeoutSeconds") == 0)
        return xasprintf("timeoutSeconds: %lld s elapsed of %lld s", (long long)(used / 1000),
                         (long long)(max / 1000));
    if (limit && strcmp(limit, "maxCostMicroUSD") == 0)
        return xasprintf("maxCostMicroUSD: used %lld of %lld micro-USD", (long long)used,
                         (long long)max);
    return xasprintf("%s: used %lld of %lld", limit ? limit : "a limit", (long long)used,
                     (long long)max);
}

/* Takes ownership of output. */
static void refuse(struct plan *p, const char *status, char *output)
{
    p->action = PLAN_TOOL_REFUSE;
    p->status = xstrdup(status);
    p->output = output;
}

static struct policy_usage usage_of(const struct replay_state *s, const struct plan_input *in)
{
    int64_t start = in->session_start_ms ? in->session_start_ms : s->first_time_ms;
    struct policy_usage u = {
        .model_turns = s->model_turns,
        .tool_calls = s->tool_calls,
        .tokens = s->prompt_tokens + s->completion_tokens,
        .cost_micro_usd = s->cost_micro_usd,
        .elapsed_ms = start && in->now_ms > start ? in->now_ms - start : 0,
    };
    return u;
}

static void limit(struct plan *p, const struct policy_limits *l, const struct policy_usage *u,
                  enum policy_limit which)
{
    p->action = PLAN_LIMIT;
    p->limit = which;
    p->outcome = PLAN_OUTCOME_LIMIT;
    switch (which) {
    case POLICY_LIMIT_MODEL_TURNS: p->limit_used = u->model_turns; p->limit_max = l->max_model_turns; break;
    case POLICY_LIMIT_TOOL_CALLS: p->limit_used = u->tool_calls; p->limit_max = l->max_tool_calls; break;
    case POLICY_LIMIT_TOKENS: p->limit_used = u->tokens; p->limit_max = l->max_tokens; break;
    case POLICY_LIMIT_COST: p->limit_used = u->cost_micro_usd; p->limit_max = l->max_cost_micro_usd; break;
    case POLICY_LIMIT_TIME: p->limit_used = u->elapsed_ms; p->limit_max = l->timeout_ms; break;
    case POLICY_LIMIT_NONE: break;
    }
}

/* A tool call may not outlive the session's timeoutSeconds: it gets at most
 * the time left (at least a second), so the limit is reached and reported
 * as timeoutSeconds rather than the turn Job being killed at its deadline. */
static void cap_timeout(const struct plan_input *in, const struct policy_usage *u, struct plan *p)
{
    int64_t total = in->policy->limits.timeout_ms;
    if (total <= 0 || p->decision.timeout_ms <= 0)
        return;
    int64_t left = total - u->elapsed_ms;
    if (left < 1000)
        left = 1000;
    if (p->decision.timeout_ms > left)
        p->decision.timeout_ms = left;
}

static void plan_call(const struct replay_state *s, const struct plan_input *in,
                      const struct replay_call *c, struct plan *p)
{
    struct tern_err e = {0};
    p->call = c;
    if (strcmp(c->status, "ok") != 0) {
        refuse(p, "invalid",
               xasprintf("error: %s. Call one of the offered tools by name with a JSON object "
                         "as arguments.",
                         c->problem ? c->problem : c->status));
        return;
    }
    int prc = policy_parse_call(in->policy, c->name, c->arguments, &p->args, &e);
    if (prc == TERN_ENOTFOUND) {
        refuse(p, "invalid",
               c->started ? xasprintf("error: tool \"%s\" is no longer offered; whether the "
                                      "call started before took effect is unknown",
                                      c->name)
                          : xasprintf("error: unknown tool \"%s\"", c->name));
        return;
    }
    if (prc != 0) {
        refuse(p, "invalid", xasprintf("error: invalid arguments: %s", e.msg));
        return;
    }
    p->tool = p->args.tool;
    p->has_args = true;
    policy_decide(in->policy, &p->args, &p->decision);
    if (p->decision.verdict == POLICY_DENY) {
        refuse(p, "denied", xasprintf("denied by policy: %s", p->decision.reason));
        return;
    }
    if (p->decision.verdict == POLICY_NEEDS_APPROVAL && !c->started) {
        if (c->decision == REPLAY_DENIED) {
            if (c->decision_reason)
                refuse(p, "denied",
                       xasprintf("denied: the user did not approve this call; it was not run. "
                                 "Their reason: %s\nContinue without it or explain what you "
                                 "need.",
                                 c->decision_reason));
            else
                refuse(p, "denied",
                       xstrdup("denied: the user did not approve this call; it was not run. "
                               "Continue without it or explain what you need."));
            return;
        }
        if (c->decision != REPLAY_APPROVED) {
            /* the id the journal asked with (a fork asks with its parent's) */
            if (c->approval_id)
                snprintf(p->approval_id, sizeof p->approval_id, "%s", c->approval_id);
            else
                replay_approval_id(in->uid, c->id, p->approval_id);
            p->outcome = PLAN_OUTCOME_APPROVAL;
            if (c->approval_id) {
                p->action = PLAN_WAIT_APPROVAL;
            } else {
                p->action = PLAN_REQUEST_APPROVAL;
                char *sum = policy_summary(&p->args);
                p->summary = plan_bounded(*sum ? sum : c->name, 500);
                free(sum);
            }
            return;
        }
    }
    if (c->started) {
        /* journaled before a crash: finish it (sandboxd dedups by key) */
        struct policy_usage u0 = usage_of(s, in);
        cap_timeout(in, &u0, p);
        p->action = PLAN_TOOL_EXECUTE;
        return;
    }
    struct policy_usage u = usage_of(s, in);
    enum policy_limit l = policy_check_limits(&in->policy->limits, &u, POLICY_BEFORE_TOOL);
    if (l != POLICY_LIMIT_NONE) {
        limit(p, &in->policy->limits, &u, l);
        return;
    }
    cap_timeout(in, &u, p);
    p->action = PLAN_TOOL_START;
}

/* The final answer against spec.result.schema: FINISH(completed) with the
 * value, or RESULT_INVALID telling the model exactly what is wrong. */
static void plan_result(const struct replay_state *s, const struct plan_input *in, int64_t max,
                        struct plan *p)
{
    const char *text = s->final_text ? s->final_text : "";
    struct tern_err e = {0};
    cJSON *v = NULL;
    char *problem = NULL, *told = NULL;
    int64_t attempt = s->result_failures + 1;
    if (jschema_parse_answer(text, strlen(text), &v, &e) != 0) {
        problem = xasprintf("is not valid JSON: %s", e.msg);
        told = xasprintf("Your final answer (attempt %lld of %lld) is not valid JSON: %s\n"
                         "Answer again with exactly one JSON value that matches the result "
                         "schema, and nothing else: no prose, no Markdown.",
                         (long long)attempt, (long long)max, e.msg);
    } else {
        struct jschema_report rep = {0};
        if (jschema_validate(in->result_schema, v, &rep) != 0) {
            /* cannot happen: the spec's schema was checked */
            problem = xstrdup("the result schema is not one the runner can check");
            told = xstrdup(problem);
        } else if (rep.nerrors) {
            problem = xasprintf("does not match the schema: %s", rep.text);
            told = xasprintf("Your final answer (attempt %lld of %lld) does not match the result "
                             "schema (%zu error%s):\n%s\nAnswer again with exactly one JSON "
                             "value that matches the result schema, and nothing else.",
                             (long long)attempt, (long long)max, rep.nerrors,
                             rep.nerrors == 1 ? "" : "s", rep.text);
        }
        jschema_report_done(&rep);
    }
    if (!problem) {
        p->action = PLAN_FINISH;
        p->outcome = PLAN_OUTCOME_COMPLETED;
        p->result = v;
        return;
    }
    cJSON_Delete(v);
    p->action = PLAN_RESULT_INVALID;
    p->attempt = attempt;
    p->reason = problem;
    p->output = told;
}

void plan_next(const struct replay_state *s, const struct plan_input *in, struct plan *ret)
{
    struct plan p = {0};
    int max_bad = in->max_bad_responses > 0 ? in->max_bad_responses : 3;

    if (s->turn > in->turn || (s->turn == in->turn && s->turn_finished)) {
        p.action = PLAN_DONE;
        goto out;
    }
    if (!s->turn_started || s->turn < in->turn) {
        p.action = PLAN_START_TURN;
        goto out;
    }
    if (s->limit_reported) {
        p.action = PLAN_FINISH;
        p.outcome = PLAN_OUTCOME_LIMIT;
        if (s->limit_name) {
            p.reason = xstrdup(s->limit_name);
            p.message = plan_limit_message(s->limit_name, s->limit_used, s->limit_max);
            if (strcmp(s->limit_name, PLAN_LIMIT_RESULT_ATTEMPTS) == 0 && s->result_problem) {
                /* the last answer's errors, for the status and the Event */
                char *why = plan_bounded(s->result_problem, TERN_JOURNAL_MAX_REASON - 64);
                char *m = xasprintf("%s; the last answer %s", p.message, why);
                free(why);
                free(p.message);
                p.message = m;
            }
            p.limit_used = s->limit_used;
            p.limit_max = s->limit_max;
        }
        goto out;
    }
    const struct replay_call *c = replay_next_pending(s);
    if (c) {
        plan_call(s, in, c, &p);
        goto out;
    }
    if (s->consecutive_bad >= max_bad) {
        p.action = PLAN_FINISH;
        p.outcome = PLAN_OUTCOME_ERROR;
        p.reason = xstrdup("malformed_output");
        p.message = xasprintf("the model's output was malformed %lld times in a row (last: %s)",
                              (long long)s->consecutive_bad,
                              s->last_problem ? s->last_problem : "unknown");
        goto out;
    }
    int64_t max_results = in->max_result_attempts > 0 ? in->max_result_attempts : 3;
    if (s->last_final && in->result_schema && !s->last_refusal) {
        plan_result(s, in, max_results, &p);
        goto out;
    }
    if (in->result_schema && s->result_failures >= max_results) {
        p.action = PLAN_LIMIT;
        p.limit_name = PLAN_LIMIT_RESULT_ATTEMPTS;
        p.outcome = PLAN_OUTCOME_LIMIT;
        p.limit_used = s->result_failures;
        p.limit_max = max_results;
        goto out;
    }
    if (s->last_final) {
        p.action = PLAN_FINISH;
        p.outcome = s->last_refusal ? PLAN_OUTCOME_REFUSED : PLAN_OUTCOME_COMPLETED;
        if (s->last_refusal) {
            char *text = plan_bounded(s->final_text ? s->final_text : "", TERN_RUNNER_MAX_DETAIL);
            p.reason = xstrdup("refusal");
            p.message = xasprintf("the model refused: %s", text);
            free(text);
        }
        goto out;
    }
    struct policy_usage u = usage_of(s, in);
    enum policy_limit l = policy_check_limits(&in->policy->limits, &u, POLICY_BEFORE_MODEL);
    if (l != POLICY_LIMIT_NONE) {
        limit(&p, &in->policy->limits, &u, l);
        goto out;
    }
    p.action = s->request_open ? PLAN_MODEL_CALL : PLAN_MODEL_REQUEST;
out:
    *ret = p;
}

const char *plan_action_str(enum plan_action a)
{
    switch (a) {
    case PLAN_DONE: return "done";
    case PLAN_START_TURN: return "start_turn";
    case PLAN_TOOL_REFUSE: return "tool_refuse";
    case PLAN_REQUEST_APPROVAL: return "request_approval";
    case PLAN_WAIT_APPROVAL: return "wait_approval";
    case PLAN_TOOL_START: return "tool_start";
    case PLAN_TOOL_EXECUTE: return "tool_execute";
    case PLAN_LIMIT: return "limit";
    case PLAN_MODEL_REQUEST: return "model_request";
    case PLAN_MODEL_CALL: return "model_call";
    case PLAN_FINISH: return "finish";
    case PLAN_RESULT_INVALID: return "result_invalid";
    }
    return "?";
}
