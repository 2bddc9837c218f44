/* api/podphase.c - whether a pod has finished, for every reader of pods. */
#include <string.h>

#include "egpu/api.h"

bool egpu_api_pod_finished(const json_t *pod)
{
    const char *phase = egpu_api_str(json_object_get(json_object_get(pod, "status"), "phase"));

    return phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
}
