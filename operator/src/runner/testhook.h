/* testhook.h - named crash points of the runner, for crash tests and the
 * chaos campaign (tests/chaos/). Compiled into every build and inert
 * unless the environment variable TERN_TEST_HOOK is set.
 *
 * TERN_TEST_HOOK is a comma-separated list of POINT or POINT:ACTION.
 * ACTION is "kill" (the default: the runner SIGKILLs itself there) or
 * "stop" (it SIGSTOPs itself: the test then kills it, or something else,
 * and continues or kills it). The points are the narrow moments between an
 * effect and its record:
 *
 *   upload          in the middle of a write_file upload: half of the body
 *                   handed to the connection, sandboxd holds the started
 *                   record
 *   tool_call       tool_call journaled, sandboxd not called yet
 *   tool_result     sandboxd answered, tool_result not journaled yet
 *   model_response  the model answered, model_response not journaled yet
 *   result_invalid  an answer that failed spec.result.schema journaled
 *                   (result_invalid), the next model_request not yet
 *
 * (TERN_TEST_CRASH_AFTER_APPENDS=N, in runner/config.h, is the other hook:
 * a SIGKILL right after the Nth committed append.)
 */
#ifndef TERN_RUNNER_TESTHOOK_H
#define TERN_RUNNER_TESTHOOK_H

#include <stdbool.h>

enum testhook_action { TESTHOOK_NONE = 0, TESTHOOK_KILL, TESTHOOK_STOP };

/* What spec (a TERN_TEST_HOOK value, may be NULL) asks for at point.
 * Unknown actions are TESTHOOK_NONE. Pure. */
enum testhook_action testhook_match(const char *spec, const char *point);

/* True when TERN_TEST_HOOK names point. */
bool testhook_armed(const char *point);

/* Acts at point as TERN_TEST_HOOK says (nothing when it is not set). A
 * stopped runner carries on from here when it receives SIGCONT. */
void testhook_at(const char *point);

#endif
