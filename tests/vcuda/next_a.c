/* tests/vcuda/next_a.c - libvcuda_next_a.so, for the RTLD_NEXT check of the
 * interposer's dlsym wrapper (vcuda_probe "rtldnext").
 *
 * Loaded after the preloaded interposer and before libvcuda_next_b.so; both
 * define egpu_next_probe. dlsym(RTLD_NEXT, ...) called from here must find
 * the next definition after this library, b's (2), not this one (1): the
 * answer glibc gives only when it sees this library as the caller, which is
 * what the wrapper's tail call preserves. Test code, never shipped.
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>

int egpu_next_probe(void);
int egpu_next_call(void);

int egpu_next_probe(void)
{
    return 1;
}

int egpu_next_call(void)
{
    int (*f)(void);

    *(void **)&f = dlsym(RTLD_NEXT, "egpu_next_probe");
    return f ? f() : -1;
}
