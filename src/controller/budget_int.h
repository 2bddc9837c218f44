/* controller/budget_int.h - GPUBudgets in egpu-controller: their periods
 * (period.c). Private to src/controller. */
#ifndef EGPU_CONTROLLER_BUDGET_INT_H
#define EGPU_CONTROLLER_BUDGET_INT_H

#include <stdint.h>

#include "egpu/api.h"

/* The period of b (decoded by egpu_api_budget_decode) that now_s (Unix
 * seconds, >= 0) falls in, as [*start, *end) in Unix seconds: Daily,
 * Weekly (from Monday) and Monthly (from the 1st) from 00:00 in
 * b->time_zone; a duration from the Unix epoch on. Returns 0, or
 * EGPU_ERANGE when b->time_zone is not in the system's tz database
 * ("spec.timeZone is \"Mars/Olympus\"; allowed: a zone of the tz database,
 * e.g. UTC, Europe/Berlin or America/New_York") or the instant is out of
 * GLib's range (years 1..9999). */
int ctl_budget_period(const struct egpu_api_budget *b, int64_t now_s, int64_t *start,
                      int64_t *end, struct egpu_error *err);

#endif /* EGPU_CONTROLLER_BUDGET_INT_H */
