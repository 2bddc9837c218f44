/* agent/health_int.h - the health watcher (health.c), private to
 * src/agent: GPU health and use followed on a thread of its own.
 */
#ifndef EGPU_AGENT_HEALTH_INT_H
#define EGPU_AGENT_HEALTH_INT_H

#include "egpu/agent.h"
#include "egpu/kube.h"
#include "plugin_int.h"

/* The watcher's state; all pointers borrowed (they outlive the thread). */
struct egpu__health {
    struct egpu_gpus *gpus;     /* the backend */
    struct egpu_plugin *plugin; /* told of every card-list change (device-plugin mode) */
    /* DRA mode instead of plugin (dra_mode.c): when set, each probe calls
     * refresh(refresh_data, &changed, err), which lists the cards and sets
     * changed when the list differs; 0 or a negative code with err. */
    int (*refresh)(void *data, bool *changed, struct egpu_error *err);
    void *refresh_data;
    struct egpu_kube *kube;          /* NULL (--no-api): nothing is published */
    const char *node;                /* this node */
    const char *fake_health;         /* --fake-health-file, or NULL */
    struct egpu_inventory_used used; /* status.used last written (zeroed at start) */
};

/* Publish this node's GPU objects (egpu_inventory_sync); a failure is
 * logged (the next change or probe publishes again). No-op without kube. */
void egpu__health_publish(struct egpu__health *h);

/* The watcher's thread (a pthread start routine; data is a struct
 * egpu__health, h->plugin or h->refresh set): runs until egpu_service_stopping(), then
 * returns NULL. */
void *egpu__health_main(void *data);

#endif /* EGPU_AGENT_HEALTH_INT_H */
