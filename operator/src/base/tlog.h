/* tlog.h - structured logging for the binaries' top levels (JSON lines).
 *
 * Library modules never log: they return errors with context, and the mains
 * decide what to log. One line per record on stderr:
 *   {"ts":"2026-11-30T00:00:00.123Z","level":"info","comp":"operator","msg":"...","k":"v"}
 * The level is checked before anything is formatted.
 */
#ifndef TERN_TLOG_H
#define TERN_TLOG_H

enum tlog_level { TLOG_DEBUG = 0, TLOG_INFO, TLOG_WARN, TLOG_ERROR };

/* The logger's configuration: the one mutable global besides parsed config. */
extern enum tlog_level tlog_min_level;

/* Sets the component name (static string) and minimum level. */
void tlog_init(const char *component, enum tlog_level min);
/* Parses "debug|info|warn|error"; returns 0 or -EINVAL. */
int tlog_parse_level(const char *s, enum tlog_level *ret);

/* Writes one record; the variadic part is key, value string pairs ended by
 * NULL. Values are JSON-escaped strings, except under a key written with a
 * leading '#' ("#steps", "12"): the '#' is dropped and a value that is a
 * JSON number is written as a number (anything else still as a string), so
 * log processors can compare and sum it. Use the macros, which skip
 * formatting when the level is off. */
void tlog_write(enum tlog_level level, const char *msg, ...) __attribute__((sentinel));

#define tlog_debug(...)                                                                            \
    do {                                                                                           \
        if (tlog_min_level <= TLOG_DEBUG)                                                          \
            tlog_write(TLOG_DEBUG, __VA_ARGS__, (char *)0);                                        \
    } while (0)
#define tlog_info(...)                                                                             \
    do {                                                                                           \
        if (tlog_min_level <= TLOG_INFO)                                                           \
            tlog_write(TLOG_INFO, __VA_ARGS__, (char *)0);                                         \
    } while (0)
#define tlog_warn(...)                                                                             \
    do {                                                                                           \
        if (tlog_min_level <= TLOG_WARN)                                                           \
            tlog_write(TLOG_WARN, __VA_ARGS__, (char *)0);                                         \
    } while (0)
#define tlog_error(...)                                                                            \
    do {                                                                                           \
        if (tlog_min_level <= TLOG_ERROR)                                                          \
            tlog_write(TLOG_ERROR, __VA_ARGS__, (char *)0);                                        \
    } while (0)

#endif
