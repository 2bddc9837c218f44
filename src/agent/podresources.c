/* agent/podresources.c - the kubelet's PodResources List (v1, on
 * --pod-resources-socket): every container's device IDs, the kubelet's own
 * record of what Allocate gave, the one source the agent believes for who
 * owns an ID. The kubelet limits the service (100 calls a second, 10 at
 * once) and answers RESOURCE_EXHAUSTED beyond: such a call is tried again,
 * PODRES_TRIES in all, PODRES_RETRY_MS apart. Units: milliseconds.
 */
#include <errno.h>
#include <stdint.h>
#include <time.h>

#include "egpu/grpc.h"
#include "pb_int.h"
#include "podresources_int.h"

#define PODRES_TIMEOUT_MS 5000 /* one PodResources List */
#define PODRES_TRIES      3    /* RESOURCE_EXHAUSTED (rate limit) is retried */
#define PODRES_RETRY_MS   200  /* between tries */

int egpu__podres_list(const char *socket, V1__ListPodResourcesResponse **out,
                      struct egpu_error *err)
{
    struct egpu_buf reply;
    V1__ListPodResourcesResponse *r = NULL;
    int rc = 0;

    egpu_buf_init(&reply, EGPU_GRPC_MSG_MAX);
    for (int t = 0; t < PODRES_TRIES; t++) {
        struct timespec ts = {.tv_nsec = PODRES_RETRY_MS * 1000L * 1000L};

        egpu_buf_reset(&reply);
        rc = egpu_grpc_call(socket, "/v1.PodResourcesLister/List", NULL, 0, PODRES_TIMEOUT_MS,
                            &reply, err);
        if (rc != -EBUSY)
            break;
        nanosleep(&ts, NULL);
    }
    if (rc == 0)
        r = v1__list_pod_resources_response__unpack(&egpu__pb_allocator, reply.len,
                                                    reply.len > 0 ? (const uint8_t *)reply.data
                                                                  : (const uint8_t *)"");
    egpu_buf_free(&reply);
    if (rc)
        return rc;
    if (r == NULL)
        return egpu_error_set(err, -EPROTO, "PodResources List on %s: reply is malformed", socket);
    *out = r;
    return 0;
}
