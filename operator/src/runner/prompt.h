/* prompt.h - the system prompt and first user message of a session (pure).
 *
 * The system prompt describes the agent's situation: the workspace layout
 * (what is read-only, what is writable), the offered tools, the memory file
 * simple.md (inlined when given) and the skills index (one line per skill
 * file), spec.context.text and the references. The objective is the first
 * user message: Chat Completions needs one, and models follow a user turn
 * more reliably than instructions buried in the system prompt. The operator
 * journals it as the first user_message{source: "objective"}; the runner
 * adds it itself only when the journal has no such event (standalone).
 * Follow-up spec.messages arrive as user_message events.
 */
#ifndef TERN_RUNNER_PROMPT_H
#define TERN_RUNNER_PROMPT_H

#include <stdbool.h>
#include <stddef.h>

struct prompt_input {
    const char *objective;         /* required */
    const char *context_text;      /* spec.context.text, or NULL */
    const char *const *references; /* spec.context.references */
    size_t nreferences;
    const char *memory;            /* contents of simple.md, or NULL */
    const char *const *skills;     /* skill file paths under skills/ */
    size_t nskills;
    const char *const *writable;   /* writablePaths globs */
    size_t nwritable;
    const char *const *tools;      /* offered tool names */
    size_t ntools;
    /* sandboxd answered 404 for simple.md / skills/: the prompt says there
     * is none (an unreadable one is not a missing one: the runner retries) */
    bool memory_missing;
    bool skills_missing;
    const char *trusted;           /* about the trusted tools (runner/trusted), or NULL */
    const char *result_schema;     /* spec.result.schema as compact JSON, or NULL: the
                                    * final answer is then one JSON value matching it */
};

/* The system prompt (newly allocated). The memory text is cut to
 * TERN_RUNNER_MAX_MEMORY bytes and the skills list to TERN_RUNNER_MAX_SKILLS
 * entries, each with an explicit "(truncated)" marker. */
char *prompt_system(const struct prompt_input *in);

/* The first user message: the objective (newly allocated). */
char *prompt_first_user(const struct prompt_input *in);

#endif
