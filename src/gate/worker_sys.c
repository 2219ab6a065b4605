/* The worker's system side: the runtime's symbols, kernel objects, and the checks that a
 * candidate object neither starts threads nor interposes the harness's symbols. */
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gate/worker.h"

/* ---- the runtime ---------------------------------------------------------------------------- */

#define RT_SYM(field)                                                                              \
    do {                                                                                           \
        void *p_ = dlsym(api->handle, "kl_rt_" #field);                                            \
        if (!p_) {                                                                                 \
            st = kl_error_set(err, KL_ERR_INVALID, "device runtime %s: symbol kl_rt_" #field       \
                              " is missing (a runtime built from another klineage?)", path);       \
            goto cleanup;                                                                          \
        }                                                                                          \
        api->field = (__typeof__(api->field))p_;                                                   \
    } while (0)

kl_status kl_rt_api_load(const char *path, kl_rt_api *api, kl_error *err)
{
    kl_status st = KL_OK;
    memset(api, 0, sizeof *api);
    api->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!api->handle) {
        const char *why = dlerror();
        return kl_error_set(err, KL_ERR_NOT_FOUND, "device runtime %s could not be loaded: %s", path,
                            why ? why : "unknown reason");
    }
    RT_SYM(abi);
    RT_SYM(init);
    RT_SYM(fini);
    RT_SYM(error);
    RT_SYM(error_name);
    RT_SYM(device_info);
    RT_SYM(malloc);
    RT_SYM(free);
    RT_SYM(memset);
    RT_SYM(h2d);
    RT_SYM(d2h);
    RT_SYM(d2d);
    RT_SYM(digest);
    RT_SYM(host_alloc);
    RT_SYM(host_free);
    RT_SYM(stream_create);
    RT_SYM(stream_destroy);
    RT_SYM(stream_sync);
    RT_SYM(stream_idle);
    RT_SYM(device_sync);
    RT_SYM(device_idle);
    RT_SYM(check);
    RT_SYM(timer_init);
    RT_SYM(timer_begin);
    RT_SYM(timer_end);
    RT_SYM(batch_begin);
    RT_SYM(batch_open);
    RT_SYM(batch_close);
    RT_SYM(batch_end);
    RT_SYM(mark);
    RT_SYM(now_ns);
    RT_SYM(l2_flush);
    RT_SYM(smem_poison);
    RT_SYM(ceilings_measure);
    RT_SYM(cublas_available);
    RT_SYM(cublas_sgemm);
    RT_SYM(cublas_bf16gemm);
    if (api->abi() != KL_RT_ABI) {
        st = kl_error_set(err, KL_ERR_INVALID, "device runtime %s: ABI %d, expected %d (rebuild it)", path,
                          api->abi(), KL_RT_ABI);
        goto cleanup;
    }
cleanup:
    if (st != KL_OK) {
        dlclose(api->handle);
        memset(api, 0, sizeof *api);
    }
    return st;
}

void kl_rt_api_unload(kl_rt_api *api)
{
    if (!api || !api->handle) return;
    /* The CUDA runtime keeps threads and atexit handlers; unloading it under them is not
     * safe, so the object stays mapped until the process ends. */
    memset(api, 0, sizeof *api);
}

/* ---- kernel objects --------------------------------------------------------------------------- */

kl_status kl_shim_object_load(const char *path, kl_shim_object *obj, kl_error *err)
{
    memset(obj, 0, sizeof *obj);
    obj->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!obj->handle) {
        const char *why = dlerror();
        return kl_error_set(err, KL_ERR_INVALID, "kernel object %s could not be loaded: %s", path,
                            why ? why : "unknown reason");
    }
    kl_status st = KL_OK;
    void *abi = dlsym(obj->handle, "kl_shim_abi");
    void *launch = dlsym(obj->handle, "kl_shim_launch");
    if (!abi || !launch) {
        st = kl_error_set(err, KL_ERR_INVALID, "kernel object %s: no %s (not built with the klineage shim)", path,
                          !abi ? "kl_shim_abi" : "kl_shim_launch");
        goto cleanup;
    }
    const char *(*abi_fn)(void) = (const char *(*)(void))abi;
    const char *got = abi_fn();
    if (!got || strcmp(got, "klineage-shim-1") != 0) {
        st = kl_error_set(err, KL_ERR_INVALID, "kernel object %s: shim ABI \"%s\", expected \"klineage-shim-1\"", path,
                          got ? got : "(null)");
        goto cleanup;
    }
    Dl_info info;
    if (!dladdr(launch, &info)) {
        st = kl_error_set(err, KL_ERR_INVALID, "kernel object %s: kl_shim_launch has no load address", path);
        goto cleanup;
    }
    obj->base = info.dli_fbase;
    obj->launch = (kl_shim_launch_fn)launch;
    obj->path = kl_strdup(path);
    if (!obj->path) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
cleanup:
    if (st != KL_OK) {
        dlclose(obj->handle);
        free(obj->path);
        memset(obj, 0, sizeof *obj);
    }
    return st;
}

void kl_shim_object_unload(kl_shim_object *obj)
{
    if (!obj) return;
    /* like the runtime, a kernel object stays mapped: its module may still be registered
     * with the CUDA runtime, which unregisters at exit */
    free(obj->path);
    memset(obj, 0, sizeof *obj);
}

/* ---- threads ---------------------------------------------------------------------------------- */

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

kl_status kl_threads_list(kl_thread_set *out, kl_error *err)
{
    memset(out, 0, sizeof *out);
    DIR *d = opendir("/proc/self/task");
    if (!d) return kl_error_set(err, KL_ERR_IO, "/proc/self/task: cannot list the process's threads");
    unsigned cap = 0;
    struct dirent *e;
    kl_status st = KL_OK;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        if (out->n == cap) {
            cap = cap ? 2 * cap : 32;
            int *t = realloc(out->tids, cap * sizeof *t);
            if (!t) {
                st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
                break;
            }
            out->tids = t;
        }
        out->tids[out->n++] = atoi(e->d_name);
    }
    closedir(d);
    if (st != KL_OK) {
        kl_threads_free(out);
        return st;
    }
    qsort(out->tids, out->n, sizeof *out->tids, cmp_int);
    out->names = calloc(out->n ? out->n : 1, sizeof *out->names);
    if (!out->names) {
        kl_threads_free(out);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    for (unsigned i = 0; i < out->n; i++) {
        char path[64];
        kl_snprintf(path, sizeof path, "/proc/self/task/%d/comm", out->tids[i]);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* the thread ended meanwhile */
        if (fgets(out->names[i], sizeof out->names[i], f)) out->names[i][strcspn(out->names[i], "\n")] = '\0';
        fclose(f);
    }
    return KL_OK;
}

void kl_threads_free(kl_thread_set *s)
{
    if (!s) return;
    free(s->tids);
    free(s->names);
    memset(s, 0, sizeof *s);
}

bool kl_thread_is_driver(const char *name) { return !strncmp(name, "cuda", 4) || !strncmp(name, "cupti", 5); }

unsigned kl_threads_new(const kl_thread_set *before, const kl_thread_set *now, bool skip_driver, kl_strbuf *sb)
{
    unsigned n = 0;
    for (unsigned i = 0; i < now->n; i++) {
        if (before->n && bsearch(&now->tids[i], before->tids, before->n, sizeof *before->tids, cmp_int)) continue;
        if (skip_driver && kl_thread_is_driver(now->names[i])) continue;
        kl_strbuf_addf(sb, "%s%d (%s)", n ? ", " : "", now->tids[i], now->names[i][0] ? now->names[i] : "?");
        n++;
    }
    return n;
}

/* ---- symbols ---------------------------------------------------------------------------------- */

/* libc functions the harness relies on to copy, compare, allocate, time and synchronize,
 * with the worker's own binding of each (read through its GOT). */
typedef struct libc_sym {
    const char *name;
    const void *bound;
} libc_sym;

static const void *fn_addr(void (*f)(void))
{
    const void *p;
    memcpy(&p, &f, sizeof p);
    return p;
}

#define LIBC(fn) {#fn, NULL}
static libc_sym libc_syms[] = {
    LIBC(malloc), LIBC(calloc), LIBC(realloc), LIBC(free), LIBC(memcpy), LIBC(memmove), LIBC(memcmp),
    LIBC(memset), LIBC(strcmp), LIBC(clock_gettime), LIBC(pthread_create), LIBC(dlopen), LIBC(dlsym),
    LIBC(nanosleep),
};
#undef LIBC

static void libc_bind(void)
{
    libc_syms[0].bound = fn_addr((void (*)(void))malloc);
    libc_syms[1].bound = fn_addr((void (*)(void))calloc);
    libc_syms[2].bound = fn_addr((void (*)(void))realloc);
    libc_syms[3].bound = fn_addr((void (*)(void))free);
    libc_syms[4].bound = fn_addr((void (*)(void))memcpy);
    libc_syms[5].bound = fn_addr((void (*)(void))memmove);
    libc_syms[6].bound = fn_addr((void (*)(void))memcmp);
    libc_syms[7].bound = fn_addr((void (*)(void))memset);
    libc_syms[8].bound = fn_addr((void (*)(void))strcmp);
    libc_syms[9].bound = fn_addr((void (*)(void))clock_gettime);
    libc_syms[10].bound = fn_addr((void (*)(void))pthread_create);
    libc_syms[11].bound = fn_addr((void (*)(void))dlopen);
    libc_syms[12].bound = fn_addr((void (*)(void))dlsym);
    libc_syms[13].bound = fn_addr((void (*)(void))nanosleep);
}

static const char *const rt_names[] = {
    "kl_rt_init", "kl_rt_malloc", "kl_rt_free", "kl_rt_memset", "kl_rt_h2d", "kl_rt_d2h", "kl_rt_d2d", "kl_rt_digest",
    "kl_rt_stream_sync", "kl_rt_device_sync", "kl_rt_device_idle", "kl_rt_check", "kl_rt_timer_begin",
    "kl_rt_timer_end", "kl_rt_batch_begin", "kl_rt_batch_open", "kl_rt_batch_close", "kl_rt_batch_end",
    "kl_rt_now_ns", "kl_rt_l2_flush", "kl_rt_cublas_sgemm", "kl_rt_cublas_bf16gemm",
};

/* CUDA runtime entry points the harness's measurements go through. */
static const char *const cuda_names[] = {
    "cudaEventRecord", "cudaEventElapsedTime", "cudaEventQuery", "cudaStreamSynchronize", "cudaDeviceSynchronize",
    "cudaMemcpy", "cudaMemcpyAsync", "cudaStreamQuery", "cudaGetLastError", "cuptiActivityFlushAll",
    "cuptiGetTimestamp",
};

void kl_symbols_snapshot(const kl_rt_api *api, kl_symbol_snapshot *snap)
{
    memset(snap, 0, sizeof *snap);
    libc_bind();
    for (unsigned i = 0; i < sizeof libc_syms / sizeof libc_syms[0] && snap->n < 64; i++) {
        snap->names[snap->n] = libc_syms[i].name;
        snap->addr[snap->n] = dlsym(RTLD_DEFAULT, libc_syms[i].name);
        snap->bound[snap->n] = libc_syms[i].bound;
        snap->n++;
    }
    for (unsigned i = 0; i < sizeof rt_names / sizeof rt_names[0] && snap->n < 64; i++) {
        snap->names[snap->n] = rt_names[i];
        snap->addr[snap->n] = api && api->handle ? dlsym(api->handle, rt_names[i]) : NULL;
        snap->n++;
    }
    for (unsigned i = 0; i < sizeof cuda_names / sizeof cuda_names[0] && snap->n < 64; i++) {
        snap->names[snap->n] = cuda_names[i];
        snap->addr[snap->n] = api && api->handle ? dlsym(api->handle, cuda_names[i]) : NULL;
        snap->n++;
    }
}

bool kl_symbols_check(const kl_rt_api *api, const kl_symbol_snapshot *before, const kl_shim_object *obj,
                      kl_strbuf *sb)
{
    kl_symbol_snapshot now;
    kl_symbols_snapshot(api, &now);
    bool ok = true;
    for (unsigned i = 0; i < before->n && i < now.n; i++) {
        const char *name = before->names[i];
        if (now.addr[i] != before->addr[i] || now.bound[i] != before->bound[i]) {
            kl_strbuf_addf(sb, "%s%s resolves elsewhere than before the candidate was loaded", ok ? "" : "; ", name);
            ok = false;
            continue;
        }
        if (obj && obj->handle) {
            /* does the object itself define it? (found in its dependencies is fine) */
            void *p = dlsym(obj->handle, name);
            Dl_info info;
            if (p && dladdr(p, &info) && info.dli_fbase == obj->base) {
                kl_strbuf_addf(sb, "%sthe object defines %s, a symbol of the harness", ok ? "" : "; ", name);
                ok = false;
            }
        }
    }
    return ok;
}
