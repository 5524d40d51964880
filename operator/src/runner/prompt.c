/* prompt.c - system prompt building (pure). */
#include "runner/prompt.h"

#include "base/buf.h"
#include "base/limits.h"

#include <stdint.h>
#include <string.h>

char *prompt_system(const struct prompt_input *in)
{
    struct buf b;
    buf_init(&b, SIZE_MAX / 2);
    buf_puts(&b,
             "You are a coding agent working in a sandboxed workspace. You act only through "
             "the tools you are given; every call is recorded.\n\n"
             "Workspace layout (paths are relative to /workspace):\n"
             "- input/      read-only: context files for the task\n"
             "- working/    writable: scratch space\n"
             "- output/     writable: your deliverables (artifacts)\n"
             "- task.md     read-only: the objective, context and references as first given "
             "(follow-up messages come in this conversation, not in task.md)\n"
             "- simple.md   read-only: memory (notes from the team)\n"
             "- skills/     read-only: skill descriptions in markdown\n");
    if (in->nwritable) {
        buf_puts(&b, "Writable paths: ");
        for (size_t i = 0; i < in->nwritable; i++)
            buf_printf(&b, "%s%s", i ? ", " : "", in->writable[i]);
        buf_puts(&b, ". Writes elsewhere are refused.\n");
    }
    if (in->ntools) {
        buf_puts(&b, "Tools: ");
        for (size_t i = 0; i < in->ntools; i++)
            buf_printf(&b, "%s%s", i ? ", " : "", in->tools[i]);
        buf_puts(&b, ". Some calls need a human's approval; if one is denied, continue "
                     "without it.\n");
    }
    if (in->trusted && *in->trusted)
        buf_puts(&b, in->trusted);
    if (in->result_schema && *in->result_schema)
        buf_printf(&b,
                   "When the objective is met, give your final answer (no tool call) as exactly "
                   "one JSON value that matches this JSON Schema, and nothing else: no prose, "
                   "no Markdown. It is checked; if it does not match you are told what is wrong "
                   "and may answer again, a limited number of times.\n"
                   "Result schema: %s\n",
                   in->result_schema);
    else
        buf_puts(&b, "When the objective is met, answer with a short summary of what you did "
                     "and where the results are (no tool call).\n");
    if (in->memory && *in->memory) {
        size_t n = strlen(in->memory);
        buf_puts(&b, "\n## Memory (simple.md)\n");
        if (n > TERN_RUNNER_MAX_MEMORY) {
            buf_append(&b, in->memory, TERN_RUNNER_MAX_MEMORY);
            buf_printf(&b, "\n(truncated: %zu of %zu bytes shown; read simple.md for the rest)\n",
                       (size_t)TERN_RUNNER_MAX_MEMORY, n);
        } else {
            buf_puts(&b, in->memory);
            if (in->memory[n - 1] != '\n')
                buf_putc(&b, '\n');
        }
    }
    if (in->memory_missing && !(in->memory && *in->memory))
        buf_puts(&b, "\n## Memory (simple.md)\nThis session has no simple.md.\n");
    if (in->skills_missing && !in->nskills)
        buf_puts(&b, "\n## Skills\nThis session has no skills/.\n");
    if (in->nskills) {
        buf_puts(&b, "\n## Skills (read the file before using a skill)\n");
        size_t n = in->nskills < TERN_RUNNER_MAX_SKILLS ? in->nskills : TERN_RUNNER_MAX_SKILLS;
        for (size_t i = 0; i < n; i++)
            buf_printf(&b, "- skills/%s\n", in->skills[i]);
        if (n < in->nskills)
            buf_printf(&b, "(truncated: %zu more; list skills/ to see them)\n", in->nskills - n);
    }
    if (in->context_text && *in->context_text)
        buf_printf(&b, "\n## Context\n%s\n", in->context_text);
    if (in->nreferences) {
        buf_puts(&b, "\n## References\n");
        for (size_t i = 0; i < in->nreferences; i++)
            buf_printf(&b, "- %s\n", in->references[i]);
    }
    return buf_steal(&b);
}

char *prompt_first_user(const struct prompt_input *in)
{
    struct buf b;
    buf_init(&b, SIZE_MAX / 2);
    buf_puts(&b, in->objective ? in->objective : "");
    return buf_steal(&b);
}
