/* Shared libraries opened on first use (util.h, kl_dl_open). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* Try each file name, then resolve every symbol; on failure lib->why says what went wrong. */
static void dl_open_locked(kl_dl_lib *lib)
{
    kl_strbuf why = KL_STRBUF_INIT;
    for (const char *const *n = lib->sonames; *n && !lib->handle; n++) {
        lib->handle = dlopen(*n, RTLD_NOW | RTLD_LOCAL);
        if (!lib->handle) {
            const char *e = dlerror();
            kl_strbuf_addf(&why, "%s%s", why.len ? "; " : "", e ? e : *n);
        }
    }
    if (!lib->handle) {
        kl_strbuf_addf(&why, " (install the package %s)", lib->package);
        lib->why = kl_strbuf_detach(&why, NULL);
        return;
    }
    kl_strbuf_release(&why);
    for (size_t i = 0; i < lib->count; i++) {
        dlerror();
        void *p = dlsym(lib->handle, lib->symbols[i].name);
        if (!p) {
            kl_strbuf_addf(&why, "the loaded %s has no %s (too old? the package %s has it)", lib->what,
                           lib->symbols[i].name, lib->package);
            lib->why = kl_strbuf_detach(&why, NULL);
            dlclose(lib->handle);
            lib->handle = NULL;
            return;
        }
        /* POSIX: a function pointer and void * have one representation (dlsym's contract) */
        memcpy(lib->symbols[i].slot, &p, sizeof p);
    }
}

kl_status kl_dl_open(kl_dl_lib *lib, kl_error *err)
{
    pthread_mutex_lock(&lib->lock);
    if (!lib->tried) {
        lib->tried = true;
        dl_open_locked(lib);
    }
    bool ok = lib->handle != NULL;
    pthread_mutex_unlock(&lib->lock);
    if (ok) return KL_OK;
    return kl_error_set(err, KL_ERR_UNSUPPORTED, "%s cannot be loaded: %s", lib->what,
                        lib->why ? lib->why : "out of memory");
}
