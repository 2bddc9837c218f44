/* tests/mock/cuda_mock.h - what the mock CUDA driver (cuda_mock.c,
 * libcuda.so.1) exports beside the CUDA driver API, for the tests and
 * benchmarks that load it. Test code, never shipped.
 *
 * Every entry point of the driver API the mock exports counts its calls in
 * the calling process (from its start, kept across fork), and may spend a
 * modelled host latency (EGPU_MOCK_CUDA_CALL_NS, cuda_mock.c) before it does
 * anything else. A program that loads the mock with dlopen finds these with
 * dlsym; with the interposer preloaded, its dlsym passes the names through.
 */
#ifndef EGPU_CUDA_MOCK_H
#define EGPU_CUDA_MOCK_H

#include <stdint.h>

/* Calls this process made to the entry point named exactly name (an
 * exported symbol, "cuEventRecord_ptsz"); name NULL: to every entry point
 * together. 0 for a name never called. Never fails, never blocks. */
uint64_t egpu_mock_calls(const char *name);

/* The i-th entry point called so far (0, 1, ... in the order of their first
 * calls) and, in *calls when calls is not NULL, its calls; NULL past the
 * last. The string is static. */
const char *egpu_mock_calls_at(unsigned i, uint64_t *calls);

#endif /* EGPU_CUDA_MOCK_H */
