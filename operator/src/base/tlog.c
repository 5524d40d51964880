/* tlog.c - JSON-lines logger. See tlog.h. */
#include "tlog.h"

#include "buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum tlog_level tlog_min_level = TLOG_INFO;
static const char *tlog_component = "tern";

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void tlog_init(const char *component, enum tlog_level min)
{
    tlog_component = component;
    tlog_min_level = min;
}

int tlog_parse_level(const char *s, enum tlog_level *ret)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *ret = (enum tlog_level)i;
            return 0;
        }
    }
    return -EINVAL;
}

/* A JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool json_number(const char *s)
{
    const char *p = s;
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (*p >= '0' && *p <= '9')
            p++;
    else
        return false;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return false;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (*p < '0' || *p > '9')
            return false;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    return *p == 0 && p - s < 64;
}

void tlog_write(enum tlog_level level, const char *msg, ...)
{
    struct buf b;
    buf_init(&b, 64 * 1024);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    buf_printf(&b, "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"comp\":", when, ts.tv_nsec / 1000000,
               level_names[level]);
    buf_put_json_string(&b, tlog_component);
    buf_puts(&b, ",\"msg\":");
    buf_put_json_string(&b, msg);
    va_list ap;
    va_start(ap, msg);
    for (;;) {
        const char *k = va_arg(ap, const char *);
        if (!k)
            break;
        const char *v = va_arg(ap, const char *);
        bool num = k[0] == '#';
        buf_putc(&b, ',');
        buf_put_json_string(&b, num ? k + 1 : k);
        buf_putc(&b, ':');
        if (num && v && json_number(v))
            buf_puts(&b, v);
        else
            buf_put_json_string(&b, v ? v : "");
    }
    va_end(ap);
    buf_puts(&b, "}\n");
    /* one write(2) per record keeps lines whole across threads */
    ssize_t w = write(STDERR_FILENO, b.data, b.len);
    (void)w;
    buf_done(&b);
}
