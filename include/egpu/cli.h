/* egpu/cli.h - what every Elastic GPU binary's command line needs: whole
 * flag values parsed strictly, and one way to report a bad one.
 *
 * A flag value is accepted only whole ("12x", " 12" and "" are refused), so a
 * typo never silently becomes a default. Bad usage exits with status 2 after
 * one line naming the flag and the allowed values, and a hint to --help.
 */
#ifndef EGPU_CLI_H
#define EGPU_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "egpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Print "<prog>: <message>\nTry '<prog> --help'.\n" on stderr. Returns 2,
 * the exit status for bad usage, so `return egpu_cli_usage_error(...)`. */
int egpu_cli_usage_error(const char *prog, const char *fmt, ...) EGPU_PRINTF(2, 3);

/* s as a decimal integer in [lo, hi]. Returns 0 or -EINVAL (not a whole
 * number of digits, or out of range); *out written only on success. */
int egpu_cli_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) EGPU_MUST_CHECK;

/* s as a number (strtod syntax) in [lo, hi]. Returns 0 or -EINVAL. */
int egpu_cli_parse_double(const char *s, double lo, double hi, double *out) EGPU_MUST_CHECK;

/* "true"/"1" or "false"/"0". Returns 0 or -EINVAL. */
int egpu_cli_parse_bool(const char *s, bool *out) EGPU_MUST_CHECK;

#ifdef __cplusplus
}
#endif

#endif /* EGPU_CLI_H */
