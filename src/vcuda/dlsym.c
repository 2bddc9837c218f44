/* vcuda/dlsym.c - the dlsym wrapper: a hooked name gives the wrapper.
 *
 * Programs and runtimes that dlopen libcuda.so.1 (or libnvidia-ml.so.1) and
 * look functions up with dlsym get the wrapper for every name in
 * hook_table.h, whatever the handle, as long as the real lookup finds the
 * name at all (so probing for a function the driver lacks still gives
 * NULL). Any other name goes to the real dlsym unchanged.
 *
 * DESIGN: glibc's dlsym identifies its caller by its return address (that
 * is what RTLD_NEXT is relative to). The pass-through path therefore ends
 * in a tail call, so the real dlsym sees the application's return address,
 * not ours; this file is always compiled with -O2 -foptimize-sibling-calls
 * for it (CMakeLists.txt), and tests/vcuda checks RTLD_NEXT from a library
 * loaded after the interposer. The real dlsym comes from
 * dlvsym(RTLD_NEXT, "dlsym", <glibc version>): GLIBC_2.34 (libc proper) or
 * the older GLIBC_2.2.5 (x86-64) / GLIBC_2.17 (aarch64) of libdl. Nothing
 * here reads the configuration or loads a library, so dlsym never recurses
 * into the interposer's initialisation.
 */
#define _GNU_SOURCE /* dlvsym, RTLD_NEXT */
#include <dlfcn.h>
#include <stddef.h>

#include "hooks.h"

typedef void *(*dlsym_fn)(void *, const char *);

static dlsym_fn real_dlsym_fn(void)
{
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    static dlsym_fn cached;
    dlsym_fn f = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);

    for (size_t i = 0; f == NULL && i < sizeof(versions) / sizeof(versions[0]); i++)
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    if (f != NULL)
        __atomic_store_n(&cached, f, __ATOMIC_RELEASE);
    return f;
}

void *egpu__vcuda_real_dlsym(void *handle, const char *name)
{
    dlsym_fn f = real_dlsym_fn();

    return f ? f(handle, name) : NULL;
}

EGPU_VCUDA_EXPORT void *dlsym(void *handle, const char *name)
{
    dlsym_fn f = real_dlsym_fn();
    const struct egpu__vcuda_hook *h;

    if (f == NULL)
        return NULL;
    if ((h = egpu__vcuda_hook_find(name)) != NULL)
        return f(handle, name) != NULL ? h->wrapper : NULL;
    return f(handle, name); /* a tail call: see DESIGN above */
}
