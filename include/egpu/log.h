/* egpu/log.h - one line per event, in the klog format Kubernetes components use.
 *
 *   I1122 03:15:04.123456      77 filter.c:88] egpu-scheduler: rejected node=gpu-3 reason="..."
 *
 * klog's header - severity letter (E, W or I), month and day, wall-clock
 * time (UTC) with microseconds, thread id, source file and line - then the
 * component name and the message, which should be key=value pairs after a
 * short phrase. A message never spans lines: a control character in it (a
 * newline in a pod owner's text, say) is written escaped, \n, \r, \t or
 * \xHH. The level is tested before any argument is evaluated. Lines go to
 * stderr (or to the stream set with egpu_log_set_stream), written whole with
 * one call so threads never interleave within a line.
 *
 * Levels are klog verbosities, the same in every binary: a message of level
 * L is written when L <= egpu_log_level, and --v N sets egpu_log_level to N
 * (egpu_log_parse_v). Errors and warnings are below 0, so no --v hides them;
 * what each verbosity shows follows Kubernetes' logging conventions.
 */
#ifndef EGPU_LOG_H
#define EGPU_LOG_H

#include <stdio.h>

#include "egpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

enum egpu_log_level {
    EGPU_LOG_ERROR = -2, /* E: something failed that an operator must look at */
    EGPU_LOG_WARN = -1,  /* W: something is wrong and was worked around */
    EGPU_LOG_NOTICE = 0, /* I, --v 0: what an operator always wants: start and stop, the
                            addresses served, leadership, certificates, a card's health */
    EGPU_LOG_INFO = 2,   /* I, --v 2: also one line per steady-state event: a pod bound, a
                            container allocated, a request denied, an object written */
    EGPU_LOG_DEBUG = 4,  /* I, --v 4: also detail for debugging: each request served, each
                            list, each retried conflict */
};

#define EGPU_LOG_V_MAX 10 /* the largest --v, as klog's documented range */

/* Current level, -2..EGPU_LOG_V_MAX: messages above it are dropped.
 * Default EGPU_LOG_INFO (--v 2). */
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
/* A level by name, as --log-level and EGPU_VCUDA_LOG_LEVEL take it:
 * "error" (errors only), "warn" (and warnings), "info" (EGPU_LOG_INFO, as
 * --v 2) or "debug" (EGPU_LOG_DEBUG, as --v 4). Returns 0 or -EINVAL; *out
 * written only on success. */
int egpu_log_parse_level(const char *s, int *out) EGPU_MUST_CHECK;
/* A klog verbosity, as --v takes it: a whole decimal number 0..EGPU_LOG_V_MAX,
 * which is the level itself (0 = EGPU_LOG_NOTICE, 2 = EGPU_LOG_INFO, 4 =
 * EGPU_LOG_DEBUG; the numbers between show what the one below shows).
 * Returns 0 or -EINVAL; *out written only on success. */
int egpu_log_parse_v(const char *s, int *out) EGPU_MUST_CHECK;

#ifdef __cplusplus
}
#endif

#endif /* EGPU_LOG_H */
