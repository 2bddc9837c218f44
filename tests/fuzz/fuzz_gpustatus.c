/* tests/fuzz/fuzz_gpustatus.c - a pod's entries for GPU status.allocated
 * (src/controller/gpustatus.c), read from a pod whose annotations its owner
 * writes (all but elasticgpu.io/assigned, which admission keeps to the
 * scheduler; the controller checks that one too).
 *
 * Input: a pod's JSON. Invariants: an entry list comes back on success and
 * on a refusal (which has a message and no entries); every entry has the
 * pod's namespace and name, a container, core 1..100, memory >= 0, and a
 * card key "<node>/<uuid>" with the pod's node; the index given the pod
 * and then its deletion touches the same cards both times and holds
 * nothing after; sorting what it held is stable; nothing leaks
 * (LeakSanitizer, and the project's own block count).
 */
#include <errno.h>

#include "fuzz.h"
#include "egpu/controller.h"

static void check_entries(const json_t *pod, const json_t *out)
{
    const json_t *md = json_object_get(pod, "metadata"), *list, *e;
    const char *node = egpu_api_str(json_object_get(json_object_get(pod, "spec"), "nodeName"));
    const char *key;
    size_t i;

    json_object_foreach((json_t *)out, key, list)
    {
        FUZZ_CHECK(node != NULL && strncmp(key, node, strlen(node)) == 0 &&
                   key[strlen(node)] == '/' && key[strlen(node) + 1] != '\0');
        FUZZ_CHECK(json_array_size(list) > 0);
        json_array_foreach(list, i, e)
        {
            json_int_t core = json_integer_value(json_object_get(e, "core"));

            FUZZ_CHECK(
                json_equal(json_object_get(e, "namespace"), json_object_get(md, "namespace")));
            FUZZ_CHECK(json_equal(json_object_get(e, "pod"), json_object_get(md, "name")));
            FUZZ_CHECK(json_is_string(json_object_get(e, "container")));
            FUZZ_CHECK(core >= 1 && core <= 100);
            FUZZ_CHECK(json_integer_value(json_object_get(e, "memory")) >= 0);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    long live = egpu_alloc_live();
    json_t *pod = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
    const char *ns = egpu_api_str(json_object_get(json_object_get(pod, "metadata"), "namespace"));
    const char *name = egpu_api_str(json_object_get(json_object_get(pod, "metadata"), "name"));
    struct egpu_error err = {0};
    json_t *out = NULL, *added = NULL, *gone = NULL, *k, *alloc;
    struct egpu_controller_gpu_index *ix;
    size_t i;
    int rc;

    rc = egpu_controller_pod_gpu_entries(pod, &out, &err);
    FUZZ_CHECK(json_is_object(out));
    if (rc == 0)
        check_entries(pod, out);
    else
        FUZZ_CHECK(err.msg[0] != '\0' && json_object_size(out) == 0);
    ix = egpu_controller_gpu_index_new();
    FUZZ_CHECK(ix != NULL);
    rc = egpu_controller_gpu_index_pod(ix, ns, name, pod, &added, &err);
    if (ns != NULL && name != NULL && rc != -EINVAL) {
        FUZZ_CHECK(json_array_size(added) == json_object_size(out));
        json_array_foreach(added, i, k)
        {
            alloc = egpu_controller_gpu_index_allocated(ix, json_string_value(k));
            FUZZ_CHECK(alloc != NULL && egpu_controller_gpu_allocated_sort(alloc) == 0);
            FUZZ_CHECK(json_array_size(alloc) ==
                       json_array_size(json_object_get(out, json_string_value(k))));
            json_decref(alloc);
        }
        FUZZ_CHECK(egpu_controller_gpu_index_pod(ix, ns, name, NULL, &gone, &err) == 0);
        FUZZ_CHECK(json_array_size(gone) == json_array_size(added));
        json_array_foreach(gone, i, k)
        {
            alloc = egpu_controller_gpu_index_allocated(ix, json_string_value(k));
            FUZZ_CHECK(alloc != NULL && json_array_size(alloc) == 0);
            json_decref(alloc);
        }
    }
    json_decref(added);
    json_decref(gone);
    egpu_controller_gpu_index_free(ix);
    json_decref(out);
    json_decref(pod);
    FUZZ_CHECK(egpu_alloc_live() == live);
    free(text);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}
