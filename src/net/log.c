/* net/log.c - klog-format log lines (see egpu/log.h). */
#define _GNU_SOURCE /* syscall(SYS_gettid) */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "egpu/log.h"

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
    static const char *const names[] = {"error", "warn", "info", "debug"};

    for (int i = 0; i < 4; i++) {
        if (strcmp(s, names[i]) == 0 || (s[0] == '0' + i && s[1] == '\0')) {
            *out = i;
            return 0;
        }
    }
    return -EINVAL;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');

    return slash ? slash + 1 : path;
}

void egpu__log_write(int lvl, const char *file, int line, const char *fmt, ...)
{
    static const char letters[] = "EWID";
    char buf[2048];
    struct timeval tv;
    struct tm tm;
    va_list ap;
    int n;

    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    n = snprintf(buf, sizeof(buf), "%c%02d%02d %02d:%02d:%02d.%06ld %7ld %s:%d] %s: ",
                 letters[lvl < 0   ? 0
                         : lvl > 3 ? 3
                                   : lvl],
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long)tv.tv_usec,
                 (long)syscall(SYS_gettid), base_name(file), line, component);
    if (n < 0 || (size_t)n >= sizeof(buf))
        n = 0;
    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    n = (int)strlen(buf);
    buf[n++] = '\n';
    fwrite(buf, 1, (size_t)n, stream ? stream : stderr);
    fflush(stream ? stream : stderr);
}
