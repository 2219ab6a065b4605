/* The compile check of what a transform wrote (rewrite.h, docs/rules.md "What the catalog
 * guarantees"): nvcc's front end over the whole file, the device code and ptxas (`nvcc -cubin`),
 * several files at once, each text that compiled once remembered by its content hash so that it is
 * not compiled again.
 *
 * Batches: texts with the same #include lines and target are compiled together, one translation
 * unit per batch (most of a small file's nvcc time is the CUDA headers): each text inside a
 * namespace of its own, its `launch` renamed, every macro it defines undefined after it, the
 * headers they all include first (so a text gets no header it does not include itself). A batch
 * that fails is compiled again one text at a time, which names the text and its errors. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "klineage/rewrite.h"
#include "util/util.h"

#define BATCH_MAX 24 /* texts in one translation unit */

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

/* A line of text starting with a preprocessor directive `word` (after blanks): the rest, else NULL. */
static const char *directive(const char *line, const char *word)
{
    while (*line == ' ' || *line == '\t') line++;
    if (*line != '#') return NULL;
    line++;
    while (*line == ' ' || *line == '\t') line++;
    size_t n = strlen(word);
    return strncmp(line, word, n) ? NULL : line + n;
}

/* The text's #include lines, trimmed and sorted, one a line (new string); NULL when the text
 * cannot share a batch (a quoted include: it is looked up beside the file). */
static char *include_set(const char *text)
{
    char *lines[256];
    unsigned n = 0;
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char *l = kl_strndup(p, len);
        const char *rest = l ? directive(l, "include") : NULL;
        if (rest) {
            while (*rest == ' ' || *rest == '\t') rest++;
            if (*rest != '<' || n >= 256) {
                free(l);
                for (unsigned i = 0; i < n; i++) free(lines[i]);
                return NULL;
            }
            size_t k = strlen(rest);
            while (k && isspace((unsigned char)rest[k - 1])) k--;
            lines[n++] = kl_strndup(rest, k);
        }
        free(l);
        p += len + (e != NULL);
    }
    for (unsigned i = 1; i < n; i++)
        for (unsigned k = i; k > 0 && strcmp(lines[k - 1], lines[k]) > 0; k--) {
            char *t = lines[k];
            lines[k] = lines[k - 1];
            lines[k - 1] = t;
        }
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_adds(&sb, ""); /* an empty set is "" */
    for (unsigned i = 0; i < n; i++)
        if (!i || strcmp(lines[i], lines[i - 1])) kl_strbuf_addf(&sb, "#include %s\n", lines[i]);
    for (unsigned i = 0; i < n; i++) free(lines[i]);
    return kl_strbuf_detach(&sb, NULL);
}

/* One text in a batch: in a namespace of its own, launch renamed, its macros undefined after it. */
static void add_to_batch(kl_strbuf *sb, unsigned k, const char *name, const char *text)
{
    kl_strbuf_addf(sb, "#define launch kl_batch_launch_%u\nnamespace kl_batch_%u {\n#line 1 \"", k, k);
    for (const char *p = name ? name : "text"; *p; p++)
        if (*p != '"' && *p != '\\' && *p != '\n') kl_strbuf_addc(sb, *p);
    kl_strbuf_addf(sb, "\"\n%s\n}\n#undef launch\n", text);
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char *l = kl_strndup(p, len);
        const char *rest = l ? directive(l, "define") : NULL;
        if (rest && (*rest == ' ' || *rest == '\t')) {
            while (*rest == ' ' || *rest == '\t') rest++;
            size_t m = 0;
            while (isalnum((unsigned char)rest[m]) || rest[m] == '_') m++;
            if (m) kl_strbuf_addf(sb, "#undef %.*s\n", (int)m, rest);
        }
        free(l);
        p += len + (e != NULL);
    }
}

/* A unit of compilation: one text, or several of the same include set and target. */
typedef struct unit {
    unsigned *items;
    unsigned n;
} unit;

/* Compile units[0..nu) in tmp (u<k>.cu, u<k>.sh, u<k>.rc, u<k>.log), `jobs` at a time, each within
 * timeout_s. The units form one queue, the largest (in bytes of text: most of a batch's time is
 * the optimizer on its kernels) first, and `jobs` lanes each take the next unit as soon as
 * theirs is done (a unit is claimed by creating u<k>.claim): one slow batch (a few large gemm
 * kernels take 20 s) no longer holds the other lanes idle until it ends. */
static kl_status run_units(const char *nvcc, const char *tmp, const char *include_dir, const unit *units, unsigned nu,
                           const char *const *names, const char *const *texts, unsigned jobs, double timeout_s,
                           bool *unit_ok, kl_error *err)
{
    if (!nu) return KL_OK;
    double limit = timeout_s > 0 ? timeout_s : 300;
    unsigned *order = calloc(nu, sizeof *order);
    size_t *weight = calloc(nu, sizeof *weight);
    kl_strbuf cmd = KL_STRBUF_INIT;
    kl_status st = KL_OK;
    if (!order || !weight) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (unsigned u = 0; u < nu; u++) {
        kl_strbuf src = KL_STRBUF_INIT, sh = KL_STRBUF_INIT;
        const char *first = texts[units[u].items[0]];
        if (units[u].n == 1) {
            kl_strbuf_adds(&src, first);
        } else {
            char *inc = include_set(first);
            kl_strbuf_adds(&src, inc ? inc : "");
            free(inc);
            for (unsigned i = 0; i < units[u].n; i++) {
                unsigned k = units[u].items[i];
                add_to_batch(&src, k, names ? names[k] : NULL, texts[k]);
            }
        }
        weight[u] = src.len;
        /* the unit's command: nvcc under its own time limit (timeout: 124, or 137 when killed) */
        kl_strbuf_addf(&sh, "timeout -k 5 %.0f ", limit);
        add_quoted(&sh, nvcc);
        kl_strbuf_addf(&sh, " %s -cubin -x cu ", arch_flag(first));
        if (include_dir) {
            kl_strbuf_adds(&sh, "-I ");
            add_quoted(&sh, include_dir);
        }
        kl_strbuf_addf(&sh, " u%u.cu -o u%u.cubin > u%u.log 2>&1\necho $? > u%u.rc\n", u, u, u, u);
        char file[64];
        kl_snprintf(file, sizeof file, "u%u.cu", u);
        char *p = kl_path_join(tmp, file);
        st = src.failed || sh.failed || !p ? kl_error_set(err, KL_ERR_NOMEM, "out of memory")
                                           : kl_file_write(p, kl_strbuf_str(&src), src.len, err);
        free(p);
        if (st == KL_OK) {
            kl_snprintf(file, sizeof file, "u%u.sh", u);
            p = kl_path_join(tmp, file);
            st = !p ? kl_error_set(err, KL_ERR_NOMEM, "out of memory") : kl_file_write(p, kl_strbuf_str(&sh), sh.len, err);
            free(p);
        }
        kl_strbuf_release(&src);
        kl_strbuf_release(&sh);
        if (st != KL_OK) goto cleanup;
        order[u] = u;
    }
    /* the queue: heaviest first (ties in unit order) */
    for (unsigned i = 1; i < nu; i++)
        for (unsigned k = i; k > 0 && weight[order[k - 1]] < weight[order[k]]; k--) {
            unsigned t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
    if (jobs > nu) jobs = nu;
    for (unsigned j = 0; j < jobs; j++) {
        kl_strbuf_adds(&cmd, "( for u in");
        for (unsigned i = 0; i < nu; i++) kl_strbuf_addf(&cmd, " %u", order[i]);
        kl_strbuf_adds(&cmd, "; do mkdir u$u.claim 2>/dev/null && sh u$u.sh; done ) & ");
    }
    kl_strbuf_adds(&cmd, "wait");
    const char *argv[] = {"/bin/sh", "-c", kl_strbuf_str(&cmd), NULL};
    kl_child c;
    kl_child_init(&c);
    c.argv = argv;
    c.dir = tmp;
    /* the lanes' whole time: as many limits as units per lane, and a margin */
    c.timeout_s = limit * ((nu + jobs - 1) / jobs) + 30;
    c.merge_stderr = true;
    st = cmd.failed ? kl_error_set(err, KL_ERR_NOMEM, "out of memory") : kl_child_run(&c, err);
    bool timed_out = c.timed_out;
    kl_child_release(&c);
    if (st != KL_OK) goto cleanup;
    for (unsigned i = 0; i < nu; i++) {
        unsigned u = order[i];
        char f[64], *rc = NULL;
        size_t len;
        kl_snprintf(f, sizeof f, "u%u.rc", u);
        char *p = kl_path_join(tmp, f);
        bool have = p && kl_file_read(p, 0, &rc, &len, NULL) == KL_OK;
        int code = have ? atoi(rc) : -1;
        free(rc);
        free(p);
        unit_ok[u] = code == 0;
        if (code == 124 || code == 137 || !have) {
            const char *what = names ? names[units[u].items[0]] : "a rewritten file";
            st = have || timed_out ? kl_error_set(err, KL_ERR_TIMEOUT, "nvcc took more than %.0f s on %s", limit, what)
                      : kl_error_set(err, KL_ERR_CHILD, "nvcc did not run on %s (no exit status in %s)", what, tmp);
            goto cleanup;
        }
    }
cleanup:
    kl_strbuf_release(&cmd);
    free(order);
    free(weight);
    return st;
}

/* nvcc's errors of unit u, the scratch name replaced by the text's name (new string). */
static char *unit_errors(const char *tmp, unsigned u, const char *name)
{
    char f[64], *log = NULL;
    size_t len;
    kl_snprintf(f, sizeof f, "u%u.log", u);
    char *p = kl_path_join(tmp, f);
    bool read = p && kl_file_read(p, 0, &log, &len, NULL) == KL_OK;
    free(p);
    if (!read) return kl_strdup("nvcc did not run");
    char *e = first_errors(log);
    free(log);
    char scratch[64];
    kl_snprintf(scratch, sizeof scratch, "u%u.cu", u);
    kl_strbuf sb = KL_STRBUF_INIT;
    for (const char *q = e; *q;) {
        const char *hit = strstr(q, scratch);
        if (!hit || !name) {
            kl_strbuf_adds(&sb, q);
            break;
        }
        kl_strbuf_add(&sb, q, (size_t)(hit - q));
        kl_strbuf_adds(&sb, name);
        q = hit + strlen(scratch);
    }
    free(e);
    return kl_strbuf_detach(&sb, NULL);
}

static void mark_ok(const char *okdir, const char *key)
{
    char mark[KL_HASH_HEX + 8];
    kl_snprintf(mark, sizeof mark, "%s.ok", key);
    char *mp = kl_path_join(okdir, mark);
    if (mp) kl_file_write(mp, "", 0, NULL);
    free(mp);
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
    char **sets = calloc(n ? n : 1, sizeof *sets);
    unsigned *todo = calloc(n ? n : 1, sizeof *todo), *slots = calloc(n ? n : 1, sizeof *slots);
    unit *units = calloc(n ? n : 1, sizeof *units);
    bool *unit_ok = calloc(n ? n : 1, sizeof *unit_ok), *placed = calloc(n ? n : 1, sizeof *placed);
    unsigned ntodo = 0, nu = 0;
    if (!cache || !keys || !sets || !todo || !slots || !units || !unit_ok || !placed ||
        !(okdir = kl_path_join(cache, "compile-check"))) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    kl_mkdirs(okdir, NULL); /* no cache folder: every text is compiled */
    for (unsigned i = 0; i < n; i++) {
        compile_key(nvcc, texts[i], keys[i]);
        char mark[KL_HASH_HEX + 8];
        kl_snprintf(mark, sizeof mark, "%s.ok", keys[i]);
        char *mp = kl_path_join(okdir, mark);
        ok[i] = mp && kl_file_exists(mp);
        free(mp);
        /* the same text twice: compiled once */
        for (unsigned k = 0; !ok[i] && k < ntodo; k++)
            if (!strcmp(keys[todo[k]], keys[i])) placed[i] = true;
        if (!ok[i] && !placed[i]) todo[ntodo++] = i;
    }
    if (!ntodo) goto copy;
    KL_TRY(kl_tempdir("compile-check", &tmp, err));
    /* batches: the same include set and target, at most BATCH_MAX each */
    for (unsigned t = 0; t < ntodo; t++) sets[todo[t]] = include_set(texts[todo[t]]);
    memset(placed, 0, n * sizeof *placed);
    unsigned used = 0;
    for (unsigned t = 0; t < ntodo; t++) {
        unsigned i = todo[t];
        if (placed[i]) continue;
        unit *u = &units[nu++];
        u->items = slots + used;
        u->items[u->n++] = i;
        placed[i] = true;
        for (unsigned t2 = t + 1; sets[i] && t2 < ntodo && u->n < BATCH_MAX; t2++) {
            unsigned k = todo[t2];
            if (!placed[k] && sets[k] && !strcmp(sets[k], sets[i]) && !strcmp(arch_flag(texts[k]), arch_flag(texts[i]))) {
                u->items[u->n++] = k;
                placed[k] = true;
            }
        }
        used += u->n;
    }
    KL_TRY(run_units(nvcc, tmp, include_dir, units, nu, names, texts, jobs, timeout_s, unit_ok, err));
    /* a failed batch: each of its texts alone */
    unsigned ns = 0;
    unsigned *single_items = calloc(n, sizeof *single_items);
    if (!single_items) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (unsigned u = 0; u < nu; u++) {
        for (unsigned i = 0; i < units[u].n; i++) {
            unsigned k = units[u].items[i];
            if (unit_ok[u]) {
                ok[k] = true;
                mark_ok(okdir, keys[k]);
            } else if (units[u].n == 1) {
                if (why) why[k] = unit_errors(tmp, u, names ? names[k] : NULL);
            } else {
                single_items[ns] = k;
                ns++;
            }
        }
    }
    if (ns) {
        unit *su = calloc(ns, sizeof *su);
        bool *sok = calloc(ns, sizeof *sok);
        if (!su || !sok) {
            free(su);
            free(sok);
            free(single_items);
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        for (unsigned i = 0; i < ns; i++) su[i] = (unit){&single_items[i], 1};
        /* in a folder of their own: their files do not clash with the batches' */
        char *stmp = NULL;
        st = kl_tempdir("compile-check-single", &stmp, err);
        if (st == KL_OK) st = run_units(nvcc, stmp, include_dir, su, ns, names, texts, jobs, timeout_s, sok, err);
        for (unsigned i = 0; st == KL_OK && i < ns; i++) {
            unsigned k = single_items[i];
            if (sok[i]) {
                ok[k] = true;
                mark_ok(okdir, keys[k]);
            } else if (why) {
                why[k] = unit_errors(stmp, i, names ? names[k] : NULL);
            }
        }
        if (stmp) kl_remove_tree(stmp, NULL);
        free(stmp);
        free(su);
        free(sok);
    }
    free(single_items);
    if (st != KL_OK) goto cleanup;
copy:
    /* a text given twice has the verdict of its first copy */
    for (unsigned i = 0; i < n; i++) {
        if (ok[i] || (why && why[i])) continue;
        for (unsigned k = 0; k < i; k++)
            if (!strcmp(keys[k], keys[i])) {
                ok[i] = ok[k];
                if (why && why[k]) why[i] = kl_strdup(why[k]);
                break;
            }
    }
cleanup:
    if (tmp) kl_remove_tree(tmp, NULL);
    free(tmp);
    free(okdir);
    free(cache);
    free(keys);
    for (unsigned i = 0; sets && i < n; i++) free(sets[i]);
    free(sets);
    free(todo);
    free(slots);
    free(units);
    free(unit_ok);
    free(placed);
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
