/* egpu/log.h - one line per event, in the klog format Kubernetes components use.
 *
 *   I1122 03:15:04.123456      77 filter.c:88] egpu-scheduler: rejected node=gpu-3 reason="..."
 *
 * Level letter (E, W, I, D), month and day, wall-clock time with
 * microseconds, thread id, source file and line, then the component name and
 * the message, which should be key=value pairs after a short phrase. The
 * level is tested before any argument is evaluated. Lines go to stderr
 * (or to the stream set with egpu_log_set_stream), written whole with one
 * call so threads never interleave within a line.
 */
#ifndef EGPU_LOG_H
#define EGPU_LOG_H

#include <stdio.h>

#include "egpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

enum egpu_log_level {
    EGPU_LOG_ERROR = 0,
    EGPU_LOG_WARN = 1,
    EGPU_LOG_INFO = 2,
    EGPU_LOG_DEBUG = 3,
};

/* Current level: messages above it are dropped. Default EGPU_LOG_INFO. */
extern int egpu_log_level;

/* Level is tested before any argument is evaluated; safe inside if/else. */
#define egpu_log(lvl, ...)                                           \
    do {                                                             \
        if ((lvl) <= egpu_log_level)                                 \
            egpu__log_write((lvl), __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)

void egpu__log_write(int lvl, const char *file, int line, const char *fmt, ...) EGPU_PRINTF(4, 5);

/* Name printed after the header (e.g. "egpu-scheduler"); copied, at most 63 bytes. */
void egpu_log_set_component(const char *name);
/* Where lines go (default stderr); NULL restores stderr. */
void egpu_log_set_stream(FILE *f);
/* Parse "error", "warn", "info", "debug" or 0..3. Returns 0 or -EINVAL. */
int egpu_log_parse_level(const char *s, int *out) EGPU_MUST_CHECK;

#ifdef __cplusplus
}
#endif

#endif /* EGPU_LOG_H */
