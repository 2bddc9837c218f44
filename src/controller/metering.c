/* controller/metering.c - one metering step of a GPUBudget (see
 * egpu__controller_meter_step in budget_int.h): pure, so the controller, its restarts
 * and the tests with a clock of their own all count the same seconds. */
#include <string.h>

#include "budget_int.h"

/* Make b's period the one containing t. */
static int set_period(struct egpu_api_budget *b, int64_t t, struct egpu_error *err)
{
    int64_t start, end;
    int rc = egpu__controller_budget_period(b, t, &start, &end, err);

    if (rc)
        return rc;
    b->has_period = true;
    b->period_start_s = start;
    b->period_end_s = end;
    return 0;
}

int egpu__controller_meter_step(struct egpu_api_budget *b, const struct egpu_api_meter_pod *pods,
                                size_t n, const struct egpu_api_meter_hold *holds, size_t nholds,
                                int64_t now_s, struct egpu__controller_meter_step *out,
                                struct egpu_error *err)
{
    struct egpu_api_budget next = *b;
    enum egpu_api_budget_state state;
    int64_t t, start, end;
    int rc;

    memset(out, 0, sizeof(*out));
    if (!next.has_metering) {
        rc = set_period(&next, now_s, err);
        if (rc)
            return rc;
        next.has_metering = true;
        next.metered_until_s = now_s;
        next.core_pct_s = 0;
        next.mem_mib_s = 0;
        out->started = true;
    } else {
        t = next.metered_until_s;
        rc = egpu__controller_budget_period(&next, t, &start, &end, err);
        if (rc)
            return rc;
        if (!next.has_period || start != next.period_start_s || end != next.period_end_s) {
            next.has_period = true;
            next.period_start_s = start;
            next.period_end_s = end;
            out->period_replaced = true;
        }
        while (t < now_s) {
            int64_t seg = now_s < next.period_end_s ? now_s : next.period_end_s;

            for (size_t i = 0; i < n; i++)
                egpu_api_meter_add(&pods[i], t, seg, &next.core_pct_s, &next.mem_mib_s);
            rc = egpu_api_meter_holds_add(holds, nholds, t, seg, &next.core_pct_s, &next.mem_mib_s);
            if (rc)
                return rc;
            t = seg;
            if (t == next.period_end_s) {
                out->ended_start_s = next.period_start_s;
                out->ended_used_milli = egpu_api_budget_used_milli(&next);
                rc = set_period(&next, t, err);
                if (rc)
                    return rc;
                next.core_pct_s = 0;
                next.mem_mib_s = 0;
                out->rollovers++;
            }
        }
        if (t > next.metered_until_s)
            next.metered_until_s = t;
    }
    state = egpu_api_budget_state_of(&next);
    out->state_changed = !next.has_state || next.state != state;
    next.has_state = true;
    next.state = state;
    *b = next;
    return 0;
}
