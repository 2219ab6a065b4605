/* The golden-file tests of the rules catalog share this: an operation line
 * ("apply vectorize@k:9 width=2", "remove unroll@k:12") and running it through
 * kl_rules_rewrite. Header-only: each test is one executable. */
#ifndef KL_TEST_RULES_GOLDEN_H
#define KL_TEST_RULES_GOLDEN_H

#include <dirent.h>
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

#endif
