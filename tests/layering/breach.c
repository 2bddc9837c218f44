/* tests/layering/breach.c - a scheduler-side object that calls a function
 * only the agent's library defines (egpu_inventory_publish), as code in
 * src/scheduler that included egpu/agent.h would. The test `layering`
 * (check.cmake) links it the way egpu-scheduler and the scheduler's tests are
 * linked and passes when the linker refuses it; linked with the agent's
 * library as well (egpu_layer_breach_control), it must link, so the refusal
 * is the layering and nothing else. Never run. */
#include <stddef.h>

#include "egpu/agent.h"
#include "egpu/scheduler.h"

int main(int argc, char **argv)
{
    struct egpu_sched_cache *cache = egpu_sched_cache_new();
    struct egpu_error err = {0};
    int rc = 0;

    (void)argv;
    if (argc > 99)
        rc = egpu_inventory_publish(NULL, "node-a", NULL, 0, NULL, &err);
    egpu_sched_cache_free(cache);
    return rc;
}
