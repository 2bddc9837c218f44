/* egpu/cli.h - what every Elastic GPU binary's command line needs: whole
 * flag values parsed strictly, and one way to report a bad one.
 *
 * A flag value is accepted only whole ("12x", " 12" and "" are refused), so a
 * typo never silently becomes a default. Bad usage exits with status 2 after
 * one line naming the flag and the allowed values, and a hint to --help.
 */
#ifndef EGPU_CLI_H
#define EGPU_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
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

/* The value of one of the HTTP server flags every server binary takes:
 * connections (--max-connections, --max-per-client: 1..65536) when seconds
 * is false, else seconds (--idle-timeout, --request-timeout: 1..3600), into
 * *out (struct egpu_http_config's units). who names the flag or variable.
 * Returns 0, or egpu_cli_usage_error's 2 after a message for prog naming who
 * and the allowed values; *out written only on success. */
int egpu_cli_http_limit(const char *prog, const char *who, const char *v, bool seconds,
                        unsigned *out);

/* An environment variable that sets the same thing as a flag. */
struct egpu_cli_env {
    const char *var; /* e.g. "EGPU_PORT" */
    int opt;         /* the flag's getopt_long value */
};

/* Apply one setting; who names its source ("--port" or "EGPU_PORT") for
 * messages. Returns 0, or the exit status of egpu_cli_usage_error. */
typedef int (*egpu_cli_apply_cb)(void *ctx, int opt, const char *value, const char *who);

/* The command-line driver every binary shares: apply the set (non-empty)
 * variables of env, then the flags of argv (so a flag wins over its
 * variable); answer -h/--help with usage on stdout and the option whose
 * value is version_opt with "<prog> <version>". longopts is getopt_long's
 * table, ending with a zero entry. Returns -1 to run, 0 when help or the
 * version was printed, or 2 after an unknown option, a missing value, an
 * extra argument or a value apply refused (the message is on stderr). */
int egpu_cli_parse(int argc, char **argv, const struct option *longopts, int version_opt,
                   const struct egpu_cli_env *env, size_t nenv, const char *prog,
                   const char *version, const char *usage, egpu_cli_apply_cb apply, void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* EGPU_CLI_H */
