/* The golden-file tests of the rules catalog share this: an operation line
 * ("apply vectorize@k:9 width=2", "remove unroll@k:12") and running it through
 * kl_rules_rewrite. Header-only: each test is one executable. */
#ifndef KL_TEST_RULES_GOLDEN_H
#define KL_TEST_RULES_GOLDEN_H

#include <dirent.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/rewrite.h"
#include "rewrite/rules/rules.h"
#include "util/util.h"

typedef struct op {
    bool remove;
    char name[64], site[128], params[256];
} op;

/* "apply restrict@k:9 ldg=1": an operation and its parameters (as a JSON object of strings) */
static inline bool parse_op(const char *s, op *o)
{
    memset(o, 0, sizeof *o);
    while (*s == ' ') s++;
    if (kl_str_starts(s, "apply ")) s += 6;
    else if (kl_str_starts(s, "remove ")) s += 7, o->remove = true;
    else return false;
    const char *at = strchr(s, '@');
    if (!at || (size_t)(at - s) >= sizeof o->name) return false;
    memcpy(o->name, s, (size_t)(at - s));
    s = at + 1;
    size_t n = strcspn(s, " |\n");
    if (n >= sizeof o->site) return false;
    memcpy(o->site, s, n);
    s += n;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addc(&sb, '{');
    while (*s == ' ') {
        while (*s == ' ') s++;
        if (!*s || *s == '|' || *s == '\n') break;
        size_t m = strcspn(s, " |\n");
        const char *eq = memchr(s, '=', m);
        if (!eq) break;
        kl_strbuf_addf(&sb, "%s\"%.*s\":\"%.*s\"", sb.len > 1 ? "," : "", (int)(eq - s), s,
                       (int)(m - (size_t)(eq - s) - 1), eq + 1);
        s += m;
    }
    kl_strbuf_addc(&sb, '}');
    kl_snprintf(o->params, sizeof o->params, "%s", kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    return true;
}

static inline char *rewrite_op(const char *name, const char *text, const op *o, kl_error *err)
{
    char *out = NULL, *note = NULL;
    kl_status st = kl_rules_rewrite(name, text, strlen(text), NULL, o->name, o->site, o->remove,
                                    o->remove ? NULL : o->params, &out, &note, err);
    free(note);
    return st == KL_OK ? out : NULL;
}

static int golden_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The golden cases in dir: every NAME.before.cu, sorted. Free each name and the array. */
static inline char **golden_names(const char *dir, unsigned *n)
{
    DIR *d = opendir(dir);
    if (!d) fail_msg("%s: cannot open the golden folder", dir);
    char **names = NULL;
    struct dirent *e;
    *n = 0;
    while ((e = readdir(d))) {
        if (!kl_str_ends(e->d_name, ".before.cu")) continue;
        names = realloc(names, (*n + 1) * sizeof *names);
        names[(*n)++] = kl_strdup(e->d_name);
    }
    closedir(d);
    qsort(names, *n, sizeof *names, golden_cmp);
    return names;
}

/* The rewrite of `before` gave `got`: write it as the golden `after` (KL_UPDATE_GOLDEN=1), or
 * fail unless it is byte for byte the golden. */
static inline void golden_expect(const char *before, const char *after, const char *got)
{
    kl_error err = {0};
    if (getenv("KL_UPDATE_GOLDEN") && !strcmp(getenv("KL_UPDATE_GOLDEN"), "1")) {
        assert_int_equal(kl_file_write(after, got, strlen(got), &err), KL_OK);
        return;
    }
    char *want = NULL;
    size_t wlen;
    if (kl_file_read(after, 0, &want, &wlen, &err) != KL_OK) fail_msg("%s: %s", after, err.message);
    if (strcmp(want, got)) fail_msg("%s: the result differs from %s:\n%s", before, after, got);
    free(want);
}

static inline const char *golden_nvcc_path(void)
{
    if (kl_file_exists("/usr/local/cuda/bin/nvcc")) return "/usr/local/cuda/bin/nvcc";
    return system("command -v nvcc >/dev/null 2>&1") == 0 ? "nvcc" : NULL;
}

/* Compile the files with nvcc -arch=sm_90 -c, two at a time; fail naming the first rejected. */
static inline void golden_nvcc_compile_all(char *const *paths, unsigned n)
{
    const char *nvcc = golden_nvcc_path();
    if (!nvcc) {
        fprintf(stderr, "note: nvcc is absent: the compile checks are skipped\n");
        return;
    }
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("rules-golden", &dir, &err), KL_OK);
    for (unsigned i = 0; i < n; i += 2) {
        /* two at a time: the second runs in the background of a shell, both waited for */
        kl_strbuf cmd = KL_STRBUF_INIT;
        for (unsigned k = i; k < n && k < i + 2; k++)
            kl_strbuf_addf(&cmd, "( '%s' -arch=sm_90 -c -x cu '%s' -o '%s/k%u.o' > '%s/log%u' 2>&1; echo $? > '%s/rc%u' ) & ",
                           nvcc, paths[k], dir, k, dir, k, dir, k);
        kl_strbuf_adds(&cmd, "wait");
        const char *argv[] = {"/bin/sh", "-c", kl_strbuf_str(&cmd), NULL};
        kl_child c;
        kl_child_init(&c);
        c.argv = argv;
        c.timeout_s = 240;
        c.merge_stderr = true;
        assert_int_equal(kl_child_run(&c, &err), KL_OK);
        kl_child_release(&c);
        kl_strbuf_release(&cmd);
        for (unsigned k = i; k < n && k < i + 2; k++) {
            char p[1200];
            char *rc = NULL, *log = NULL;
            size_t len;
            kl_snprintf(p, sizeof p, "%s/rc%u", dir, k);
            assert_int_equal(kl_file_read(p, 0, &rc, &len, &err), KL_OK);
            if (atoi(rc) != 0) {
                kl_snprintf(p, sizeof p, "%s/log%u", dir, k);
                kl_file_read(p, 0, &log, &len, &err);
                fail_msg("nvcc rejected %s:\n%s", paths[k], log ? log : "");
            }
            free(rc);
        }
    }
    kl_remove_tree(dir, NULL);
    free(dir);
}

/* Every golden case of tests/data/rules/<transform>/: the rewrite named by its `// test: `
 * line gives the .after.cu file; with a reverse after '|', the round trip gives back the
 * original (or at least the site the other way); at least 5 cases and 5 round trips; every
 * result compiles with nvcc (where it is installed). */
static inline void golden_run(const char *transform)
{
    const char *data = getenv("KL_TEST_DATA");
    assert_non_null(data);
    char dirpath[1024];
    kl_snprintf(dirpath, sizeof dirpath, "%s/rules/%s", data, transform);
    unsigned nn = 0, trips = 0;
    char **names = golden_names(dirpath, &nn), **afters = NULL;
    afters = calloc(nn ? nn : 1, sizeof *afters);
    for (unsigned ci = 0; ci < nn; ci++) {
        char before[1200], after[1200];
        kl_snprintf(before, sizeof before, "%s/%s", dirpath, names[ci]);
        kl_snprintf(after, sizeof after, "%.*s.after.cu", (int)(strlen(before) - strlen(".before.cu")), before);
        afters[ci] = kl_strdup(after);
        char *btext = NULL;
        size_t blen;
        kl_error err = {0};
        assert_int_equal(kl_file_read(before, 0, &btext, &blen, &err), KL_OK);
        const char *hdr = strstr(btext, "// test: ");
        if (!hdr) fail_msg("%s: no '// test: ' line", before);
        op fwd, back;
        if (!parse_op(hdr + 9, &fwd)) fail_msg("%s: bad test line", before);
        if (strcmp(fwd.name, transform)) fail_msg("%s: the test line names %s, not %s", before, fwd.name, transform);
        const char *bar = strchr(hdr, '|');
        bool has_back = bar && bar < strchr(hdr, '\n') && parse_op(bar + 1, &back);
        char *got = rewrite_op(before, btext, &fwd, &err);
        if (!got) fail_msg("%s: %s", before, err.message);
        golden_expect(before, after, got);
        /* the round trip: the reverse gives back the original, or at least the site the other way */
        if (!has_back) {
            free(got);
            free(btext);
            continue;
        }
        trips++;
        char *again = rewrite_op(after, got, &back, &err);
        if (!again)
            fail_msg("%s: the reverse (%s %s@%s) failed: %s", after, back.remove ? "remove" : "apply", back.name,
                     back.site, err.message);
        if (strcmp(again, btext)) {
            char *json = NULL;
            assert_int_equal(kl_rules_list(before, again, strlen(again), NULL, fwd.name, &json, &err), KL_OK);
            char want_dir[64];
            kl_snprintf(want_dir, sizeof want_dir, "\"direction\": \"%s\"", fwd.remove ? "present" : "applicable");
            if (!strstr(json, want_dir))
                fail_msg("%s: the round trip neither restores the text nor the %s site:\n%s", before,
                         fwd.remove ? "present" : "applicable", again);
            free(json);
        }
        free(again);
        free(got);
        free(btext);
    }
    if (nn < 5) fail_msg("%s: %u golden cases, at least 5 wanted", transform, nn);
    if (trips < 5) fail_msg("%s: %u golden cases with a round trip, at least 5 wanted", transform, trips);
    golden_nvcc_compile_all(afters, nn);
    for (unsigned i = 0; i < nn; i++) free(names[i]), free(afters[i]);
    free(names);
    free(afters);
}

#endif
