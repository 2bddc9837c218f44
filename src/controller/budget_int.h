/* controller/budget_int.h - GPUBudgets in egpu-controller: their periods
 * (period.c) and the metering step (metering.c). Private to
 * src/controller. */
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
int egpu__controller_budget_period(const struct egpu_api_budget *b, int64_t now_s, int64_t *start,
                                   int64_t *end, struct egpu_error *err);

/* What one metering step did. */
struct egpu__controller_meter_step {
    bool started;             /* b had no metering: it starts now, at 0 */
    uint32_t rollovers;       /* periods that ended within the step (usage reset at each) */
    int64_t ended_start_s;    /* rollovers > 0: the start of the last period that ended */
    int64_t ended_used_milli; /* and the GPU-hours (thousandths) used in it */
    bool state_changed;       /* status.state is new or differs */
    bool period_replaced;     /* the spec's period or zone changed: the period was recomputed */
};

/* Advance b's metering (status.periodStart/End, metering, state) to now_s
 * (Unix seconds) over pods[0..n), the namespace's pods as they are now
 * (egpu_api_meter_pod_read; a pod deleted since the last step must still be
 * among them: the webhook's metering finalizer keeps it until it is metered
 * to its end), and holds[0..nholds) what the namespace holds through its
 * claims (egpu_api_meter_pod_holds of those pods and egpu_api_meter_egpu_read
 * of the ElasticGPUs whose claimRef is in the namespace, charged per claim by
 * egpu_api_meter_holds_add). A budget never metered starts at now_s with nothing used (no
 * usage before it existed is charged). Else each pod is charged its overlap
 * with [metering.until, now_s), cut at every period boundary in between;
 * at each boundary the usage is reset and the next period begins, so a pod
 * running across it is charged to each period its share. A period that no
 * longer follows from the spec (the period or zone was changed) is
 * recomputed around metering.until, keeping what was counted. A now_s
 * before metering.until (the clock went back) counts nothing. Then
 * status.state is set from the usage. Integers only: the result is the same
 * however the span is cut into steps. Returns 0, or egpu__controller_budget_period's
 * EGPU_ERANGE or -ENOMEM (b is then unchanged). */
int egpu__controller_meter_step(struct egpu_api_budget *b, const struct egpu_api_meter_pod *pods,
                                size_t n, const struct egpu_api_meter_hold *holds, size_t nholds,
                                int64_t now_s, struct egpu__controller_meter_step *out,
                                struct egpu_error *err);

#endif /* EGPU_CONTROLLER_BUDGET_INT_H */
