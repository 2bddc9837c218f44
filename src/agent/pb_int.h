/* agent/pb_int.h - the protobuf-c glue (pb.c), private to src/agent: the
 * kubelet's messages (proto/: the device plugin's and PodResources') are
 * unpacked and packed with an allocator on egpu_malloc/egpu_free, so the
 * unit tests count their memory like every other allocation.
 */
#ifndef EGPU_AGENT_PB_INT_H
#define EGPU_AGENT_PB_INT_H

#include <protobuf-c/protobuf-c.h>

#include "egpu/core.h"
#include "egpu/grpc.h"

/* protobuf-c's allocator on egpu_malloc/egpu_free, for every unpack. */
extern ProtobufCAllocator egpu__pb_allocator;

/* Pack m at the end of b. Returns 0, -EMSGSIZE or -ENOMEM. */
int egpu__pb_pack(const ProtobufCMessage *m, struct egpu_buf *b) EGPU_MUST_CHECK;

/* The request's message unpacked as d, or NULL (malformed, or out of
 * memory). Free with egpu__pb_unpacked_free. */
ProtobufCMessage *egpu__pb_unpack(const ProtobufCMessageDescriptor *d,
                                  const struct egpu_grpc_request *req);

/* Free an unpacked message. NULL is a no-op. */
void egpu__pb_unpacked_free(ProtobufCMessage *m);

#endif /* EGPU_AGENT_PB_INT_H */
