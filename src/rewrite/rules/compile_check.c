/* The compile check of what a transform wrote (rewrite.h, docs/rules.md "Checks"): nvcc's front
 * end over the whole file, the device code and ptxas (`nvcc -cubin`), several files at once, each
 * text that compiled once remembered by its content hash so that it is not compiled again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "klineage/rewrite.h"
#include "util/util.h"

const char *kl_rules_nvcc(void)
{
    const char *e = getenv("KLINEAGE_NVCC");
    if (e && *e) return access(e, X_OK) == 0 ? e : NULL;
    static char found[4096];
    const char *path = getenv("PATH");
    while (path && *path) {
        size_t n = strcspn(path, ":");
        if (n && n < sizeof found - 6) {
            kl_snprintf(found, sizeof found, "%.*s/nvcc", (int)n, path);
            if (access(found, X_OK) == 0) return found;
        }
        path += n + (path[n] == ':');
    }
    return access("/usr/local/cuda/bin/nvcc", X_OK) == 0 ? "/usr/local/cuda/bin/nvcc" : NULL;
}

/* The arch a text needs: inline wgmma (or setmaxnreg) PTX assembles only for sm_90a. */
static const char *arch_flag(const char *text)
{
    return strstr(text, "wgmma.") || strstr(text, "setmaxnreg.") ? "-gencode=arch=compute_90a,code=sm_90a"
                                                                   : "-arch=sm_90";
}

/* The cache key of one compile: nvcc (its path, size and time), the flags and the text. */
static void compile_key(const char *nvcc, const char *text, char hex[KL_HASH_HEX])
{
    struct stat sb;
    char id[128] = "";
    if (stat(nvcc, &sb) == 0) kl_snprintf(id, sizeof id, "%lld:%lld", (long long)sb.st_size, (long long)sb.st_mtime);
    kl_hasher *h = kl_hasher_new();
    kl_hasher_parts(h, "rules-compile-check-1");
    kl_hasher_parts(h, nvcc);
    kl_hasher_parts(h, id);
    kl_hasher_parts(h, arch_flag(text));
    kl_hasher_parts(h, text);
    kl_hasher_finish(h, hex);
}

/* A shell word: s in single quotes. */
static void add_quoted(kl_strbuf *sb, const char *s)
{
    kl_strbuf_addc(sb, '\'');
    for (; *s; s++)
        if (*s == '\'')
            kl_strbuf_adds(sb, "'\\''");
        else
            kl_strbuf_addc(sb, *s);
    kl_strbuf_addc(sb, '\'');
}

/* The first lines of nvcc's output that say "error" (at most 6), or its last lines. */
static char *first_errors(const char *log)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    unsigned lines = 0;
    for (const char *p = log; *p && lines < 6;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (memmem(p, n, "error", 5)) {
            kl_strbuf_addf(&sb, "%s%.*s", sb.len ? "\n" : "", (int)n, p);
            lines++;
        }
        p += n + (e != NULL);
    }
    if (!sb.len) {
        size_t n = strlen(log);
        kl_strbuf_adds(&sb, n > 600 ? log + n - 600 : log);
    }
    char *r = kl_strbuf_detach(&sb, NULL);
    return r ? r : kl_strdup("");
}

kl_status kl_rules_compile_texts(unsigned n, const char *const *names, const char *const *texts,
                                 const char *include_dir, unsigned jobs, double timeout_s, bool *ok, char **why,
                                 kl_error *err)
{
    for (unsigned i = 0; i < n; i++) {
        ok[i] = false;
        if (why) why[i] = NULL;
    }
    const char *nvcc = kl_rules_nvcc();
    if (!nvcc) return kl_error_set(err, KL_ERR_NOT_FOUND, "nvcc not found ($KLINEAGE_NVCC, PATH, /usr/local/cuda)");
    if (jobs < 1) jobs = 1;
    kl_status st = KL_OK;
    char *cache = kl_cache_dir(), *okdir = NULL, *tmp = NULL;
    char (*keys)[KL_HASH_HEX] = calloc(n ? n : 1, sizeof *keys);
    if (!cache || !keys) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    okdir = kl_path_join(cache, "compile-check");
    if (!okdir) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    kl_mkdirs(okdir, NULL); /* no cache folder: every text is compiled */
    KL_TRY(kl_tempdir("compile-check", &tmp, err));
    unsigned todo[64];
    for (unsigned i = 0; i < n;) {
        /* the next batch: texts not known to compile, up to `jobs` */
        unsigned nb = 0;
        for (; i < n && nb < jobs && nb < 64; i++) {
            compile_key(nvcc, texts[i], keys[i]);
            char mark[KL_HASH_HEX + 8];
            kl_snprintf(mark, sizeof mark, "%s.ok", keys[i]);
            char *mp = kl_path_join(okdir, mark);
            bool known = mp && kl_file_exists(mp);
            free(mp);
            if (known) {
                ok[i] = true;
                continue;
            }
            todo[nb++] = i;
        }
        if (!nb) continue;
        kl_strbuf cmd = KL_STRBUF_INIT;
        for (unsigned b = 0; b < nb; b++) {
            unsigned k = todo[b];
            char file[64];
            kl_snprintf(file, sizeof file, "%u.cu", k);
            char *p = kl_path_join(tmp, file);
            if (!p || kl_file_write(p, texts[k], strlen(texts[k]), err) != KL_OK) {
                free(p);
                kl_strbuf_release(&cmd);
                st = err->status ? err->status : kl_error_set(err, KL_ERR_NOMEM, "out of memory");
                goto cleanup;
            }
            free(p);
            kl_strbuf_addf(&cmd, "( ");
            add_quoted(&cmd, nvcc);
            kl_strbuf_addf(&cmd, " %s -cubin -x cu ", arch_flag(texts[k]));
            if (include_dir) {
                kl_strbuf_adds(&cmd, "-I ");
                add_quoted(&cmd, include_dir);
            }
            kl_strbuf_addf(&cmd, " %u.cu -o %u.cubin > %u.log 2>&1; echo $? > %u.rc ) & ", k, k, k, k);
        }
        kl_strbuf_adds(&cmd, "wait");
        const char *argv[] = {"/bin/sh", "-c", kl_strbuf_str(&cmd), NULL};
        kl_child c;
        kl_child_init(&c);
        c.argv = argv;
        c.dir = tmp;
        c.timeout_s = timeout_s > 0 ? timeout_s : 300;
        c.merge_stderr = true;
        st = cmd.failed ? kl_error_set(err, KL_ERR_NOMEM, "out of memory") : kl_child_run(&c, err);
        bool timed_out = c.timed_out;
        kl_child_release(&c);
        kl_strbuf_release(&cmd);
        if (st != KL_OK) goto cleanup;
        if (timed_out) {
            st = kl_error_set(err, KL_ERR_TIMEOUT, "nvcc took more than %.0f s on %s", timeout_s > 0 ? timeout_s : 300,
                              names ? names[todo[0]] : "a rewritten file");
            goto cleanup;
        }
        for (unsigned b = 0; b < nb; b++) {
            unsigned k = todo[b];
            char f[64];
            char *rc = NULL, *log = NULL;
            size_t len;
            kl_snprintf(f, sizeof f, "%u.rc", k);
            char *p = kl_path_join(tmp, f);
            bool ran = p && kl_file_read(p, 0, &rc, &len, NULL) == KL_OK;
            free(p);
            ok[k] = ran && atoi(rc) == 0;
            free(rc);
            if (ok[k]) {
                char mark[KL_HASH_HEX + 8];
                kl_snprintf(mark, sizeof mark, "%s.ok", keys[k]);
                char *mp = kl_path_join(okdir, mark);
                if (mp) kl_file_write(mp, "", 0, NULL);
                free(mp);
            } else if (why) {
                kl_snprintf(f, sizeof f, "%u.log", k);
                p = kl_path_join(tmp, f);
                if (p && kl_file_read(p, 0, &log, &len, NULL) == KL_OK) {
                    /* nvcc names the file by its scratch name: name it as the caller does */
                    char *e = first_errors(log);
                    kl_strbuf sb = KL_STRBUF_INIT;
                    char scratch[64];
                    kl_snprintf(scratch, sizeof scratch, "%u.cu", k);
                    for (const char *q = e; *q;) {
                        const char *hit = strstr(q, scratch);
                        if (!hit || !names) {
                            kl_strbuf_adds(&sb, q);
                            break;
                        }
                        kl_strbuf_add(&sb, q, (size_t)(hit - q));
                        kl_strbuf_adds(&sb, names[k]);
                        q = hit + strlen(scratch);
                    }
                    why[k] = kl_strbuf_detach(&sb, NULL);
                    free(e);
                } else {
                    why[k] = kl_strdup(ran ? "nvcc failed without output" : "nvcc did not run");
                }
                free(p);
                free(log);
            }
        }
    }
cleanup:
    if (tmp) kl_remove_tree(tmp, NULL);
    free(tmp);
    free(okdir);
    free(cache);
    free(keys);
    if (st != KL_OK && why)
        for (unsigned i = 0; i < n; i++) {
            free(why[i]);
            why[i] = NULL;
        }
    return st;
}

kl_status kl_rules_compile_check(const char *name, const char *orig, const char *result, double timeout_s,
                                 bool *checked, kl_error *err)
{
    *checked = false;
    if (!kl_rules_nvcc()) return KL_OK;
    const char *texts[2] = {orig, result};
    const char *names[2] = {name, name};
    bool ok[2];
    char *why[2] = {NULL, NULL};
    char *dir = name ? kl_path_dirname(name) : NULL;
    kl_status st = kl_rules_compile_texts(2, names, texts, dir, 2, timeout_s, ok, why, err);
    if (st != KL_OK) goto cleanup;
    if (!ok[0]) goto cleanup; /* the original does not compile here: nothing can be said */
    *checked = true;
    if (!ok[1])
        st = kl_error_set(err, KL_ERR_COMPILE,
                          "%s: the rewritten file does not compile where the original does (nvcc -cubin):\n%s",
                          name ? name : "the source", why[1] ? why[1] : "");
cleanup:
    free(why[0]);
    free(why[1]);
    free(dir);
    return st;
}
