/* chat.h - OpenAI-compatible Chat Completions: request building and response
 * parsing, as pure functions over plain structs (no I/O).
 *
 * A struct chat_conv is the conversation the runner rebuilt from the journal:
 * system prompt, user messages, assistant messages (text and/or tool calls)
 * and tool results. chat_build_request turns it, the offered tool
 * definitions and the options into the JSON body of POST /chat/completions.
 * chat_parse_response validates a 2xx body and returns a typed result in
 * which every defect of the model's output (invalid tool-call JSON, an
 * unknown tool, a missing field, a refusal) is explicit, never a crash.
 *
 * Ownership: a chat_conv owns copies of every string given to it; a
 * chat_response owns all its strings. Free with chat_conv_done /
 * chat_response_done (both accept zeroed structs).
 */
#ifndef TERN_MODEL_CHAT_H
#define TERN_MODEL_CHAT_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum chat_role { CHAT_SYSTEM = 0, CHAT_USER, CHAT_ASSISTANT, CHAT_TOOL };

struct chat_tool_call {
    char *id;        /* "call_..." as the model sent it */
    char *name;      /* function name */
    char *arguments; /* JSON text exactly as the model sent it (may be invalid) */
};

struct chat_msg {
    enum chat_role role;
    char *content;               /* NULL only for an assistant message with tool calls */
    struct chat_tool_call *calls; /* assistant only */
    size_t ncalls;
    char *tool_call_id;          /* tool only */
};

struct chat_conv {
    struct chat_msg *msgs;
    size_t n, cap;
};

void chat_conv_init(struct chat_conv *c);
void chat_conv_done(struct chat_conv *c);
/* Append messages (strings are copied). content must be non-NULL except for
 * an assistant message with ncalls > 0. */
void chat_conv_add(struct chat_conv *c, enum chat_role role, const char *content);
void chat_conv_add_assistant(struct chat_conv *c, const char *content,
                             const struct chat_tool_call *calls, size_t ncalls);
void chat_conv_add_tool(struct chat_conv *c, const char *tool_call_id, const char *content);

/* A function tool offered to the model. parameters is a JSON Schema (text). */
struct chat_tool_def {
    const char *name;
    const char *description;
    const char *parameters; /* JSON object text */
    bool strict;
};

struct chat_options {
    const char *model;             /* required */
    int64_t max_completion_tokens; /* 0 = omit */
    const char *tool_choice;       /* "auto" | "none" | "required" | NULL (= omit) */
    bool parallel_tool_calls;      /* sent only when tools are offered; we send false */
};

/* Builds the request body. Returns 0 and *ret_body (caller frees), or
 * TERN_EINVALID when the input cannot form a valid request (no model, no
 * messages, a tool definition whose parameters are not a JSON object, an
 * assistant message with neither content nor calls, a tool message without
 * tool_call_id) or TERN_ETOOLARGE when the body would exceed
 * TERN_MODEL_MAX_REQUEST. Deterministic: the same input gives the same bytes. */
int chat_build_request(const struct chat_conv *conv, const struct chat_tool_def *tools,
                       size_t ntools, const struct chat_options *opts, char **ret_body,
                       struct tern_err *err);

enum chat_finish {
    CHAT_FINISH_STOP = 0,
    CHAT_FINISH_LENGTH,
    CHAT_FINISH_TOOL_CALLS,
    CHAT_FINISH_CONTENT_FILTER,
    CHAT_FINISH_FUNCTION_CALL,
    CHAT_FINISH_OTHER, /* absent or unknown value (kept in finish_raw) */
};

/* What the runner must do with one tool call the model made. */
enum chat_call_status {
    CHAT_CALL_OK = 0,         /* known tool, arguments are a JSON object */
    CHAT_CALL_BAD_JSON,       /* arguments are not valid JSON */
    CHAT_CALL_NOT_OBJECT,     /* arguments are valid JSON but not an object */
    CHAT_CALL_UNKNOWN_TOOL,   /* name is not among the offered tools */
    CHAT_CALL_MISSING_FIELD,  /* id, function, name or arguments missing / mistyped */
};

struct chat_resp_call {
    char *id;        /* never NULL: "call_missing_<index>" when the model omitted it */
    char *name;      /* never NULL ("" when missing) */
    char *arguments; /* never NULL ("" when missing) */
    enum chat_call_status status;
    char *problem;   /* human-readable reason when status != OK, else NULL */
};

struct chat_usage {
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t total_tokens;
    int64_t cached_tokens;    /* prompt_tokens_details.cached_tokens */
    int64_t reasoning_tokens; /* completion_tokens_details.reasoning_tokens */
};

enum chat_kind {
    CHAT_RESP_OK = 0,   /* message with content and/or tool calls */
    CHAT_RESP_REFUSAL,  /* message.refusal set (content may be NULL) */
    CHAT_RESP_EMPTY,    /* neither content nor tool calls nor refusal */
    CHAT_RESP_MALFORMED /* not a chat completion (problem says why) */
};

struct chat_response {
    enum chat_kind kind;
    char *problem;     /* for MALFORMED (and EMPTY): why */
    char *id;          /* response id, or NULL */
    char *model;       /* or NULL */
    char *content;     /* or NULL */
    char *refusal;     /* or NULL */
    struct chat_resp_call *calls;
    size_t ncalls;
    size_t nbad;       /* calls with status != OK */
    enum chat_finish finish;
    char *finish_raw;  /* or NULL */
    bool has_usage;
    struct chat_usage usage;
};

/* Parses and validates a response body. known[0..nknown) are the offered
 * tool names (a call to another name is CHAT_CALL_UNKNOWN_TOOL). Always fills
 * *ret (a malformed body gives kind CHAT_RESP_MALFORMED with a reason) and
 * returns 0; returns TERN_ETOOLARGE only when len > TERN_MODEL_MAX_RESPONSE
 * (then *ret is untouched). */
int chat_parse_response(const char *body, size_t len, const char *const *known, size_t nknown,
                        struct chat_response *ret);
void chat_response_done(struct chat_response *r);

/* The error object of a non-2xx answer: {"error":{message,type,param,code}}. */
struct chat_api_error {
    char *message; /* never NULL after a successful parse ("" if absent) */
    char *type;    /* or NULL */
    char *param;   /* or NULL */
    char *code;    /* or NULL (a numeric code is kept as its digits) */
};

/* Parses an error body. Returns 0 and *ret, or TERN_EPARSE when the body is
 * not of that shape (then *ret is untouched). */
int chat_parse_error(const char *body, size_t len, struct chat_api_error *ret);
void chat_api_error_done(struct chat_api_error *e);
/* True when the error means the conversation no longer fits the context
 * window (code "context_length_exceeded"). */
bool chat_error_is_context_length(const struct chat_api_error *e);

const char *chat_finish_str(enum chat_finish f);
const char *chat_call_status_str(enum chat_call_status s);
const char *chat_kind_str(enum chat_kind k);

#endif
