/* Build the device runtime (runtime.cu, embedded at build time) into the cache, once per
 * (runtime text, nvcc version, arch). Declared in gate_int.h. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gate/gate_int.h"

/* cmake/embed.cmake, from src/gate/runtime.cu and runtime.h */
extern const char kl_runtime_cu_text[];
extern const size_t kl_runtime_cu_text_len;
extern const char kl_runtime_h_text[];
extern const size_t kl_runtime_h_text_len;

#define RUNTIME_SO "libklineage-rt.so"

/* nvcc's full path: as given when it has a slash, else looked up in PATH. New string. */
static char *resolve_nvcc(const char *nvcc)
{
    if (strchr(nvcc, '/')) return realpath(nvcc, NULL);
    const char *path = getenv("PATH");
    if (!path) return NULL;
    char *copy = kl_strdup(path), *save = NULL, *found = NULL;
    if (!copy) return NULL;
    for (char *dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
        char *cand = kl_path_join(*dir ? dir : ".", nvcc);
        if (cand && access(cand, X_OK) == 0) found = realpath(cand, NULL);
        free(cand);
    }
    free(copy);
    return found;
}

/* The toolkit's library folders beside nvcc (bin/..): lib64, targets/…/lib, CUPTI's. */
static unsigned toolkit_libdirs(const char *nvcc_path, char **dirs, unsigned max)
{
    unsigned n = 0;
    char *bin = kl_path_dirname(nvcc_path);
    char *root = bin ? kl_path_dirname(bin) : NULL;
    static const char *const subs[] = {"lib64", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib",
                                       "extras/CUPTI/lib64"};
    for (unsigned i = 0; root && i < sizeof subs / sizeof subs[0] && n < max; i++) {
        char *d = kl_path_join(root, subs[i]);
        if (d && kl_dir_exists(d)) dirs[n++] = d;
        else free(d);
    }
    free(bin);
    free(root);
    return n;
}

kl_status kl_runtime_build(const char *nvcc, const char *arch, const char *cache_dir, char **so_path, kl_error *err)
{
    kl_status st = KL_OK;
    *so_path = NULL;
    char *nvcc_path = NULL, *final_dir = NULL, *final_so = NULL, *tmp_dir = NULL, *base = NULL;
    char *libdirs[4] = {NULL, NULL, NULL, NULL};
    unsigned nlib = 0;
    kl_child ver, cc;
    kl_child_init(&ver);
    kl_child_init(&cc);
    if (!nvcc || !*nvcc || !arch || !*arch || !cache_dir)
        KL_TRY(kl_error_set(err, KL_ERR_INVALID, "runtime build: nvcc, arch and cache folder are all required"));
    for (const char *p = arch; *p; p++)
        if (!(*p == '_' || *p == '-' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z')))
            KL_TRY(kl_error_set(err, KL_ERR_INVALID, "runtime build: arch \"%s\" is not like sm_90", arch));
    nvcc_path = resolve_nvcc(nvcc);
    if (!nvcc_path) KL_TRY(kl_error_set(err, KL_ERR_NOT_FOUND, "runtime build: nvcc \"%s\" not found", nvcc));

    /* the key: runtime text, the toolchain's own words about itself, the arch */
    const char *vargv[] = {nvcc_path, "--version", NULL};
    ver.argv = vargv;
    ver.timeout_s = 60;
    ver.merge_stderr = true;
    KL_TRY(kl_child_run(&ver, err));
    if (ver.exit_code != 0)
        KL_TRY(kl_error_set(err, KL_ERR_CHILD, "runtime build: %s --version failed: %s", nvcc_path, kl_strbuf_str(&ver.out)));
    kl_hasher *h = kl_hasher_new();
    if (!h) KL_TRY(kl_error_set(err, KL_ERR_NOMEM, "out of memory"));
    kl_hasher_parts(h, "klineage-runtime-1");
    kl_hasher_part(h, kl_runtime_cu_text, kl_runtime_cu_text_len);
    kl_hasher_part(h, kl_runtime_h_text, kl_runtime_h_text_len);
    kl_hasher_parts(h, kl_strbuf_str(&ver.out));
    kl_hasher_parts(h, arch);
    char hex[KL_HASH_HEX];
    kl_hasher_finish(h, hex);

    base = kl_path_join(cache_dir, "runtime");
    char name[96];
    kl_snprintf(name, sizeof name, "rt-%.16s-%s", hex, arch);
    final_dir = base ? kl_path_join(base, name) : NULL;
    final_so = final_dir ? kl_path_join(final_dir, RUNTIME_SO) : NULL;
    if (!final_so) KL_TRY(kl_error_set(err, KL_ERR_NOMEM, "out of memory"));
    if (kl_file_exists(final_so)) {
        *so_path = final_so;
        final_so = NULL;
        goto cleanup;
    }

    /* build in a private folder, then rename it into place (another process may race us) */
    KL_TRY(kl_mkdirs(base, err));
    {
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "%s/.tmp-%s-%ld-XXXXXX", base, name, (long)getpid());
        tmp_dir = kl_strbuf_detach(&sb, NULL);
    }
    if (!tmp_dir || !mkdtemp(tmp_dir))
        KL_TRY(kl_error_set(err, KL_ERR_IO, "runtime build: cannot create a folder in %s: %s", base, strerror(errno)));
    char *cu = kl_path_join(tmp_dir, "runtime.cu"), *hh = kl_path_join(tmp_dir, "runtime.h");
    char *so = kl_path_join(tmp_dir, RUNTIME_SO);
    if (!cu || !hh || !so) {
        free(cu);
        free(hh);
        free(so);
        KL_TRY(kl_error_set(err, KL_ERR_NOMEM, "out of memory"));
    }
    st = kl_file_write(cu, kl_runtime_cu_text, kl_runtime_cu_text_len, err);
    if (st == KL_OK) st = kl_file_write(hh, kl_runtime_h_text, kl_runtime_h_text_len, err);
    nlib = toolkit_libdirs(nvcc_path, libdirs, 4);
    char archf[64], incf[PATH_MAX + 8], libdef[PATH_MAX + 64], rpath[4 * PATH_MAX + 32];
    kl_snprintf(archf, sizeof archf, "-arch=%s", arch);
    kl_snprintf(incf, sizeof incf, "-I%s", tmp_dir);
    kl_snprintf(libdef, sizeof libdef, "-DKL_RT_CUDA_LIB64=\"%s\"", nlib ? libdirs[0] : "/usr/local/cuda/lib64");
    kl_strbuf rp = KL_STRBUF_INIT;
    /* one linker option without commas (nvcc splits -Xlinker values at commas) */
    kl_strbuf_adds(&rp, "-rpath=");
    for (unsigned i = 0; i < nlib; i++) kl_strbuf_addf(&rp, "%s%s", i ? ":" : "", libdirs[i]);
    kl_snprintf(rpath, sizeof rpath, "%s", kl_strbuf_str(&rp));
    kl_strbuf_release(&rp);
    const char *argv[32];
    unsigned n = 0;
    char lflags[4][PATH_MAX + 4];
    argv[n++] = nvcc_path;
    argv[n++] = "-O2";
    argv[n++] = "-shared";
    argv[n++] = "-Xcompiler";
    argv[n++] = "-fPIC";
    argv[n++] = "-cudart";
    argv[n++] = "shared";
    argv[n++] = archf;
    argv[n++] = incf;
    argv[n++] = libdef;
    argv[n++] = cu;
    argv[n++] = "-o";
    argv[n++] = so;
    for (unsigned i = 0; i < nlib; i++) {
        kl_snprintf(lflags[i], sizeof lflags[i], "-L%s", libdirs[i]);
        argv[n++] = lflags[i];
    }
    argv[n++] = "-lcupti";
    argv[n++] = "-ldl";
    if (nlib) {
        argv[n++] = "-Xlinker";
        argv[n++] = rpath;
    }
    argv[n] = NULL;
    if (st == KL_OK) {
        cc.argv = argv;
        cc.timeout_s = 600;
        cc.merge_stderr = true;
        cc.out_max = 256 * 1024;
        st = kl_child_run(&cc, err);
    }
    if (st == KL_OK && (cc.exit_code != 0 || !kl_file_exists(so))) {
        char how[128];
        kl_child_describe(&cc, how, sizeof how);
        st = kl_error_set(err, KL_ERR_COMPILE, "runtime build: nvcc -arch=%s failed (%s): %.700s", arch, how,
                          kl_strbuf_str(&cc.out));
    }
    free(cu);
    free(hh);
    free(so);
    if (st != KL_OK) goto cleanup;
    if (rename(tmp_dir, final_dir) != 0 && !kl_file_exists(final_so))
        KL_TRY(kl_error_set(err, KL_ERR_IO, "runtime build: cannot move %s to %s: %s", tmp_dir, final_dir, strerror(errno)));
    *so_path = final_so;
    final_so = NULL;

cleanup:
    if (tmp_dir && kl_dir_exists(tmp_dir)) kl_remove_tree(tmp_dir, NULL);
    for (unsigned i = 0; i < 4; i++) free(libdirs[i]);
    kl_child_release(&ver);
    kl_child_release(&cc);
    free(nvcc_path);
    free(final_dir);
    free(final_so);
    free(tmp_dir);
    free(base);
    return st;
}
