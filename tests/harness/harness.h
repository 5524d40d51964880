/* harness.h - Tern's in-tree test harness.
 *
 * A test file defines tests with TEST(name) { ... } (timeout 30 s) or
 * TEST_T(name, seconds) { ... }. Tests register themselves at load time; the
 * harness's main() runs each in its own forked process (own process group),
 * kills the group on timeout, and prints one line per test and the closing
 * line "N passed, N failed". Arguments select tests by substring.
 *
 * Assertions print both sides and end the test (the child) on failure.
 * TH_SKIP(reason) ends a test as skipped (counted, reported, not a pass).
 * th_tmpdir() returns a fresh directory removed after the test.
 */
#ifndef TERN_TEST_HARNESS_H
#define TERN_TEST_HARNESS_H

#include <stdint.h>
#include <stdbool.h>
#include <string.h>

typedef void (*th_fn)(void);

void th_register(const char *name, th_fn fn, unsigned timeout_s, const char *file);
_Noreturn void th_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
_Noreturn void th_skip(const char *reason);
/* A per-test scratch directory (created on first call, removed after). */
const char *th_tmpdir(void);

#define TH_CAT2(a, b) a##b
#define TH_CAT(a, b) TH_CAT2(a, b)

#define TEST_T(name, secs)                                                                         \
    static void name(void);                                                                        \
    __attribute__((constructor)) static void TH_CAT(th_reg_, name)(void)                          \
    {                                                                                              \
        th_register(#name, name, (secs), __FILE__);                                                \
    }                                                                                              \
    static void name(void)
#define TEST(name) TEST_T(name, 30)

#define TH_SKIP(reason) th_skip(reason)

#define ASSERT_TRUE(c)                                                                             \
    do {                                                                                           \
        if (!(c))                                                                                  \
            th_fail(__FILE__, __LINE__, "expected true: %s", #c);                                  \
    } while (0)
#define ASSERT_FALSE(c)                                                                            \
    do {                                                                                           \
        if (c)                                                                                     \
            th_fail(__FILE__, __LINE__, "expected false: %s", #c);                                 \
    } while (0)
#define ASSERT_EQ_INT(a, b)                                                                        \
    do {                                                                                           \
        long long th_a_ = (long long)(a), th_b_ = (long long)(b);                                  \
        if (th_a_ != th_b_)                                                                        \
            th_fail(__FILE__, __LINE__, "%s == %s: got %lld, expected %lld", #a, #b, th_a_,       \
                    th_b_);                                                                        \
    } while (0)
#define ASSERT_NE_INT(a, b)                                                                        \
    do {                                                                                           \
        long long th_a_ = (long long)(a), th_b_ = (long long)(b);                                  \
        if (th_a_ == th_b_)                                                                        \
            th_fail(__FILE__, __LINE__, "%s != %s: both are %lld", #a, #b, th_a_);                 \
    } while (0)
#define ASSERT_CMP_INT(a, op, b)                                                                   \
    do {                                                                                           \
        long long th_a_ = (long long)(a), th_b_ = (long long)(b);                                  \
        if (!(th_a_ op th_b_))                                                                     \
            th_fail(__FILE__, __LINE__, "%s %s %s: got %lld vs %lld", #a, #op, #b, th_a_, th_b_); \
    } while (0)
#define ASSERT_EQ_STR(a, b)                                                                        \
    do {                                                                                           \
        const char *th_a_ = (a), *th_b_ = (b);                                                     \
        if (!th_a_ || !th_b_ || strcmp(th_a_, th_b_) != 0)                                         \
            th_fail(__FILE__, __LINE__, "%s == %s: got \"%s\", expected \"%s\"", #a, #b,          \
                    th_a_ ? th_a_ : "(null)", th_b_ ? th_b_ : "(null)");                           \
    } while (0)
#define ASSERT_CONTAINS(hay, needle)                                                               \
    do {                                                                                           \
        const char *th_h_ = (hay), *th_n_ = (needle);                                              \
        if (!th_h_ || !strstr(th_h_, th_n_))                                                       \
            th_fail(__FILE__, __LINE__, "%s contains \"%s\": got \"%s\"", #hay, th_n_,            \
                    th_h_ ? th_h_ : "(null)");                                                     \
    } while (0)
#define ASSERT_NULL(p)                                                                             \
    do {                                                                                           \
        const void *th_p_ = (p);                                                                   \
        if (th_p_)                                                                                 \
            th_fail(__FILE__, __LINE__, "expected NULL: %s = %p", #p, th_p_);                     \
    } while (0)
#define ASSERT_NOT_NULL(p)                                                                         \
    do {                                                                                           \
        if (!(p))                                                                                  \
            th_fail(__FILE__, __LINE__, "expected non-NULL: %s", #p);                              \
    } while (0)
/* ASSERT_OK(expr): expr returns 0 on success or a negative code. */
#define ASSERT_OK(e)                                                                               \
    do {                                                                                           \
        long long th_r_ = (long long)(e);                                                          \
        if (th_r_ != 0)                                                                            \
            th_fail(__FILE__, __LINE__, "%s: got %lld, expected 0", #e, th_r_);                    \
    } while (0)
#define ASSERT_MEM_EQ(a, b, n)                                                                     \
    do {                                                                                           \
        if (memcmp((a), (b), (n)) != 0)                                                            \
            th_fail(__FILE__, __LINE__, "%s and %s differ in their first %zu bytes", #a, #b,      \
                    (size_t)(n));                                                                  \
    } while (0)

#endif
