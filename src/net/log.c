/* net/log.c - klog-format log lines (see egpu/log.h).
 *
 * DESIGN: the one place a line is made, so every binary (and the
 * interposer) writes the same header, and the one place --v and
 * --log-level become a level, so a verbosity means the same everywhere.
 * A line is formatted on the stack (no allocation: the interposer logs
 * from inside CUDA calls) and written with one fwrite. The message is
 * formatted first and then copied after the header with its control
 * characters escaped, so whatever a pod owner put in a name or an
 * annotation cannot start a forged line. A message too long for the line
 * is cut, never in the middle of an escape.
 */
#define _GNU_SOURCE /* syscall(SYS_gettid) */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "egpu/log.h"

#define LOG_MSG_MAX  2048 /* bytes of one formatted message, before escaping */
#define LOG_LINE_MAX 3072 /* bytes of one line: header, escaped message, newline */

int egpu_log_level = EGPU_LOG_INFO;

static char component[64] = "egpu";
static FILE *stream;

void egpu_log_set_component(const char *name)
{
    snprintf(component, sizeof(component), "%s", name);
}

void egpu_log_set_stream(FILE *f)
{
    stream = f;
}

int egpu_log_parse_level(const char *s, int *out)
{
    static const struct {
        const char *name;
        int level;
    } names[] = {{"error", EGPU_LOG_ERROR},
                 {"warn", EGPU_LOG_WARN},
                 {"info", EGPU_LOG_INFO},
                 {"debug", EGPU_LOG_DEBUG}};

    for (size_t i = 0; s != NULL && i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(s, names[i].name) == 0) {
            *out = names[i].level;
            return 0;
        }
    }
    return -EINVAL;
}

int egpu_log_parse_v(const char *s, int *out)
{
    unsigned long v;
    char *end;

    if (s == NULL || *s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || *end != '\0' || v > EGPU_LOG_V_MAX)
        return -EINVAL;
    *out = (int)v;
    return 0;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');

    return slash ? slash + 1 : path;
}

/* Copy msg to dst (cap bytes, cap > 0), each control character as \n, \r,
 * \t or \xHH; stops before an escape that would not fit. Returns the bytes
 * written, without a terminator. */
static size_t escape_into(char *dst, size_t cap, const char *msg)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;

    for (const unsigned char *p = (const unsigned char *)msg; *p != '\0'; p++) {
        char esc[4];
        size_t k = 0;

        if (*p == '\n' || *p == '\r' || *p == '\t') {
            esc[k++] = '\\';
            esc[k++] = *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't';
        } else if (*p < 0x20 || *p == 0x7f) {
            esc[k++] = '\\';
            esc[k++] = 'x';
            esc[k++] = hex[*p >> 4];
            esc[k++] = hex[*p & 0xf];
        } else {
            esc[k++] = (char)*p;
        }
        if (n + k > cap)
            break;
        memcpy(dst + n, esc, k);
        n += k;
    }
    return n;
}

/* klog's severity letter: there is no letter for verbosity, so every level
 * from EGPU_LOG_NOTICE up is I. */
static char severity(int lvl)
{
    return lvl <= EGPU_LOG_ERROR ? 'E' : lvl == EGPU_LOG_WARN ? 'W' : 'I';
}

void egpu__log_write(int lvl, const char *file, int line, const char *fmt, ...)
{
    char msg[LOG_MSG_MAX];
    char buf[LOG_LINE_MAX];
    struct timeval tv;
    struct tm tm;
    va_list ap;
    int n;

    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    n = snprintf(buf, sizeof(buf),
                 "%c%02d%02d %02d:%02d:%02d.%06ld %7ld %s:%d] %s: ", severity(lvl), tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long)tv.tv_usec,
                 (long)syscall(SYS_gettid), base_name(file), line, component);
    if (n < 0 || (size_t)n >= sizeof(buf) / 2)
        n = 0;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    n += (int)escape_into(buf + n, sizeof(buf) - (size_t)n - 1, msg);
    buf[n++] = '\n';
    fwrite(buf, 1, (size_t)n, stream ? stream : stderr);
    fflush(stream ? stream : stderr);
}
