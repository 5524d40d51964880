/* script.h - tern-fakellm's script: parsing and step selection (pure).
 *
 * The format is documented in docs/fakellm.md. A script is a list of steps;
 * the step for a request is chosen by the number of assistant messages the
 * request already contains (so a retried or replayed request gets the same
 * step), and within a step by the first alternative whose match accepts the
 * latest user or tool message.
 */
#ifndef TERN_FAKELLM_SCRIPT_H
#define TERN_FAKELLM_SCRIPT_H

#include "base/err.h"

#include <cJSON.h>
#include <regex.h>
#include <stdbool.h>
#include <stddef.h>

enum script_fault_kind {
    FAULT_429 = 0,     /* 429 with retry-after / retry-after-ms */
    FAULT_500,         /* 500 with an error body */
    FAULT_SLOW,        /* wait ms, then the reply */
    FAULT_DROP,        /* close the connection without a response */
    FAULT_BAD_TOOL_JSON, /* the reply with the first tool call's arguments cut short */
    FAULT_ERROR,       /* any status with an OpenAI error body (e.g. context_length_exceeded) */
};

struct script_fault {
    enum script_fault_kind kind;
    char *retry_after;     /* 429: retry-after header value, or NULL */
    char *retry_after_ms;  /* 429: retry-after-ms header value, or NULL */
    char *should_retry;    /* any: x-should-retry header value, or NULL */
    long ms;               /* slow */
    int status;            /* error */
    char *code;            /* error: error.code, or NULL */
    char *message;         /* error / 429 / 500 message */
};

struct script_alt {
    char *contains;        /* match: substring, or NULL */
    char *regex_src;       /* match: POSIX extended regex source, or NULL */
    regex_t regex;
    bool has_regex;
    struct script_fault *faults; /* applied to the 1st, 2nd, ... request of this step */
    size_t nfaults;
    cJSON *reply;          /* the "reply" object (owned) */
};

struct script_step {
    struct script_alt *alts;
    size_t nalts;
};

struct script {
    struct script_step *steps;
    size_t nsteps;
    char *model;           /* "model" echoed in replies, or NULL (= the request's) */
};

/* Parses a script file's text. Returns 0 and *ret, or TERN_EPARSE /
 * TERN_EINVALID with the field path in err. */
int script_parse(const char *text, size_t len, struct script *ret, struct tern_err *err);
void script_done(struct script *s);

/* The number of assistant messages in a request body's "messages". */
size_t script_assistant_turns(const cJSON *request);

/* The text of the latest message with role user or tool ("" if none);
 * owned by the caller. */
char *script_latest_input(const cJSON *request);

/* Picks the step (by assistant turns) and alternative for a request.
 * Returns 0 with *ret_step and *ret_alt, -ENOENT when the script has no
 * such step (exhausted), or -ESRCH when no alternative matches. */
int script_select(const struct script *s, const cJSON *request, size_t *ret_step,
                  size_t *ret_alt);

#endif
