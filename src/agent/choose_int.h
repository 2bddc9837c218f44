/* agent/choose_int.h - the card choice of GetPreferredAllocation through the
 * placement core (choose.c), private to src/agent.
 */
#ifndef EGPU_AGENT_CHOOSE_INT_H
#define EGPU_AGENT_CHOOSE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "egpu/agent.h"
#include "egpu/core.h"

#define EGPU_CHOOSE_IDS_PER_CARD 100 /* device IDs per card: one ID = 1 % (plugin_int.h) */

/* The card policy GetPreferredAllocation gives the core: egpu-scheduler's
 * default --card-policy. */
#define EGPU_CHOOSE_CARD_POLICY EGPU_POLICY_BINPACK

/* Which size device IDs "<uuid>-<nn>" to prefer for one container, chosen by
 * the placement core (egpu_placer_can_host with card policy policy: the rule
 * egpu-scheduler's bind picks cards with) on this node's cards as the agent
 * knows them:
 *   - cards (ncards): the card list; a card without UUID is left out, an
 *     unhealthy one takes nothing;
 *   - each card's free compute: its IDs among avail (n) and must (nmust), the
 *     kubelet's free and must-include IDs (1 ID = 1 %); the rest is held;
 *   - mem_used_mib (may be NULL; indexed like cards): memory MiB the agent's
 *     record gives the containers on each card (the core's tie-break: less
 *     memory left first).
 * size is the container's gpu-core: 1..99 a share of one card, 100 * k k
 * whole free cards. out (room for size; pointers borrowed from avail and
 * must) gets the must IDs first, then free IDs of the core's card(s) in its
 * order, each card's in slot order, its share's worth; *got their count.
 * Returns 0; EGPU_ENOFIT with err saying why (the core's reason: no card has
 * the room, no whole card is free) or EGPU_ERANGE (size is no gpu-core),
 * *got 0 then; -EINVAL (a policy the core cannot run here: fgd) or -ENOMEM.
 * Unknown, malformed or repeated IDs are passed over. */
int egpu__choose_ids(enum egpu_policy_kind policy, const struct egpu_gpu_info *cards, size_t ncards,
                     const uint64_t *mem_used_mib, char *const *avail, size_t n, char *const *must,
                     size_t nmust, size_t size, char **out, size_t *got,
                     struct egpu_error *err) EGPU_MUST_CHECK;

#endif /* EGPU_AGENT_CHOOSE_INT_H */
