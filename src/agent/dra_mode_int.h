/* agent/dra_mode_int.h - egpu-agent --mode dra (dra_mode.c), private to
 * src/agent: the node agent as the kubelet's DRA plugin for
 * EGPU_API_DRA_DRIVER. main.c parses the flags and hands them over here;
 * dra_mode.c wires the inventory, the DRAPlugin service (dra_plugin.c), the
 * kubelet plugin registration (dra_registration.c) and the node's
 * ResourceSlice (dra_slice.c), and runs them until SIGTERM.
 */
#ifndef EGPU_AGENT_DRA_MODE_INT_H
#define EGPU_AGENT_DRA_MODE_INT_H

#include "egpu/api.h"
#include "egpu/cli.h"
#include "cdi_int.h"
#include "dra_registration_int.h"

/* Where the kubelet's plugins keep their sockets: the DRAPlugin socket's
 * default is <this>/<driver>/dra.sock (the upstream kubeletplugin helper's
 * layout; PluginInfo.endpoint names it). */
#define EGPU_DRA_MODE_PLUGINS_DIR  "/var/lib/kubelet/plugins"
#define EGPU_DRA_MODE_SOCKET       EGPU_DRA_MODE_PLUGINS_DIR "/" EGPU_API_DRA_DRIVER "/dra.sock"
#define EGPU_DRA_MODE_INTERVAL_S   30    /* default seconds between periodic publishes */
#define EGPU_DRA_MODE_INTERVAL_MAX 86400 /* the longest --slice-interval, seconds */

/* The settings of DRA mode; every string is borrowed and must outlive
 * egpu__dra_mode_main (argv and the environment do). */
struct egpu__dra_mode_config {
    const struct egpu_cli_server *srv; /* --listen, --port, limits, --kubeconfig, --context,
                                          the log level */
    const char *node;                  /* this node (required) */
    const char *fake;                  /* --fake-gpus spec, or NULL (NVML) */
    const char *fake_health;           /* --fake-health-file, or NULL */
    const char *nvml;                  /* --nvml-library, or NULL */
    const char *alloc_root;            /* the claims' dirs go below <alloc_root>/dra */
    const char *interposer;            /* host path of libegpu-vcuda.so (absolute) */
    const char *cdi_dir;               /* NULL: EGPU_CDI_DIR */
    const char *socket;                /* DRAPlugin socket; NULL: EGPU_DRA_MODE_SOCKET */
    const char *registry_dir;          /* NULL: EGPU_DRA_REGISTRY_DIR */
    unsigned slice_interval_s;         /* periodic publish, 1..EGPU_DRA_MODE_INTERVAL_MAX s */
    unsigned ctx_extra_mib;            /* vcuda.conf's EGPU_VCUDA_CONTEXT_EXTRA_MIB; 0: none */
};

/* Run DRA mode until SIGTERM or SIGINT (through egpu_service_main, so the
 * signals, /healthz, /readyz, /metrics and the teardown order are those of
 * every component). At start: open the GPU backend, the API client, serve
 * DRAPlugin on cfg->socket (its directory made if missing), serve the
 * registration on <registry dir>/<driver>-reg.sock, publish the
 * ResourceSlice. Then, on the main thread, every 200 ms: serve again a
 * socket that was removed (the kubelet may wipe its registry dir), publish
 * again when a card's health changed, when the slice was deleted (an
 * informer on this node's slices of the driver: the kubelet deletes them at
 * its start and 30 s after the plugin disconnects) and every
 * cfg->slice_interval_s seconds; a failed publish is retried after 1 s,
 * doubling up to the interval. At stop both sockets are removed (the
 * kubelet deregisters the plugin); the slice stays (an agent restarting
 * within the kubelet's 30 s keeps it). Returns the exit status: 0 after a
 * signal, 1 when start failed (logged as "start failed: <why>"). */
int egpu__dra_mode_main(const struct egpu__dra_mode_config *cfg);

#endif /* EGPU_AGENT_DRA_MODE_INT_H */
