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
#include <unistd.h>

#include "klineage/rewrite.h"
#include "rewrite/rules/rules.h"
#include "util/util.h"

/* tests/data/<rel> (KL_TEST_DATA), a new string: the inputs kept when a built-in expert moved on (the
 * mma.sync hgemm expert and the shared-tile blur expert of 2026-11-30 are golden cases' inputs). */
static inline char *read_data_file(const char *rel)
{
    const char *root = getenv("KL_TEST_DATA");
    assert_non_null(root);
    char p[1024];
    kl_snprintf(p, sizeof p, "%s/%s", root, rel);
    char *t = NULL;
    size_t n;
    kl_error err = {0};
    if (kl_file_read(p, 0, &t, &n, &err) != KL_OK) fail_msg("%s: %s", p, err.message);
    return t;
}

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

/* A case's NAME.test may take its input from a file of the repository instead of a copy:
 * `// input: corpus/sumsq/expert.cu` (relative to $KL_SOURCE_DIR). The path into buf, or false. */
static inline bool golden_input_of(const char *test_text, char *buf, size_t size)
{
    const char *in = test_text ? strstr(test_text, "// input: ") : NULL;
    if (!in) return false;
    in += strlen("// input: ");
    size_t len = strcspn(in, "\r\n");
    const char *root = getenv("KL_SOURCE_DIR");
    if (!root) fail_msg("a golden case reads '// input: %.*s' but KL_SOURCE_DIR is not set", (int)len, in);
    kl_snprintf(buf, size, "%s/%.*s", root, (int)len, in);
    return true;
}

/* The golden cases in dir: every NAME.before.cu, and every NAME.test with an `// input:` line (named
 * NAME.before.cu here too), sorted. Free each name and the array. */
static inline char **golden_names(const char *dir, unsigned *n)
{
    DIR *d = opendir(dir);
    if (!d) fail_msg("%s: cannot open the golden folder", dir);
    char **names = NULL;
    struct dirent *e;
    *n = 0;
    while ((e = readdir(d))) {
        char name[600];
        if (kl_str_ends(e->d_name, ".before.cu")) {
            kl_snprintf(name, sizeof name, "%s", e->d_name);
        } else if (kl_str_ends(e->d_name, ".test")) {
            char tp[1200], bp[1200], in[1200];
            size_t stem = strlen(e->d_name) - strlen(".test"), len;
            kl_snprintf(tp, sizeof tp, "%s/%s", dir, e->d_name);
            kl_snprintf(bp, sizeof bp, "%s/%.*s.before.cu", dir, (int)stem, e->d_name);
            char *t = NULL;
            kl_error err = {0};
            bool input = access(bp, F_OK) != 0 && kl_file_read(tp, 0, &t, &len, &err) == KL_OK &&
                         golden_input_of(t, in, sizeof in);
            free(t);
            if (!input) continue;
            kl_snprintf(name, sizeof name, "%.*s.before.cu", (int)stem, e->d_name);
        } else {
            continue;
        }
        names = realloc(names, (*n + 1) * sizeof *names);
        names[(*n)++] = kl_strdup(name);
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

/* Compile the files with nvcc (kl_rules_compile_texts: `nvcc -cubin`, the front end over the whole
 * file and the device code through ptxas), as many at once as $KL_TEST_JOBS says (default 2); a
 * text that compiled once is remembered by its content hash in $KLINEAGE_CACHE (the build's
 * test-cache) and not compiled again. Fail naming the first file rejected. */
static inline void golden_nvcc_compile_all(char *const *paths, unsigned n)
{
    if (!kl_rules_nvcc()) {
        fprintf(stderr, "note: nvcc is absent: the compile checks are skipped\n");
        return;
    }
    if (!n) return;
    char **texts = calloc(n, sizeof *texts), **why = calloc(n, sizeof *why);
    bool *ok = calloc(n, sizeof *ok);
    assert_non_null(texts);
    assert_non_null(why);
    assert_non_null(ok);
    kl_error err = {0};
    for (unsigned i = 0; i < n; i++) {
        size_t len;
        if (kl_file_read(paths[i], 0, &texts[i], &len, &err) != KL_OK) fail_msg("%s: %s", paths[i], err.message);
    }
    const char *j = getenv("KL_TEST_JOBS");
    unsigned jobs = j && atoi(j) > 0 ? (unsigned)atoi(j) : 2;
    if (kl_rules_compile_texts(n, (const char *const *)paths, (const char *const *)texts, NULL, jobs, 600, ok, why,
                               &err) != KL_OK)
        fail_msg("compiling %u files: %s", n, err.message);
    for (unsigned i = 0; i < n; i++)
        if (!ok[i]) fail_msg("nvcc rejected %s:\n%s", paths[i], why[i] ? why[i] : "");
    for (unsigned i = 0; i < n; i++) {
        free(texts[i]);
        free(why[i]);
    }
    free(texts);
    free(why);
    free(ok);
}

/* Compiled files gathered across the tests of one binary, compiled together at its end by
 * golden_batch_compile (two at a time, as golden_nvcc_compile_all does): golden files by path,
 * rewritten texts that are no golden file written to a scratch folder first. */
typedef struct golden_batch {
    char **paths;
    unsigned n, cap;
    char *scratch; /* the folder of the texts (NULL until the first) */
} golden_batch;

/* Queue a file to compile (once: a path already queued is not queued again). */
static inline void golden_batch_add(golden_batch *b, const char *path)
{
    for (unsigned i = 0; i < b->n; i++)
        if (!strcmp(b->paths[i], path)) return;
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 32;
        b->paths = realloc(b->paths, b->cap * sizeof *b->paths);
        assert_non_null(b->paths);
    }
    b->paths[b->n++] = kl_strdup(path);
}

/* Queue a text to compile: written to the scratch folder as <n>-<tag>.cu (the tag's odd characters
 * made '_'), so that a rejection names where the text came from. */
static inline void golden_batch_text(golden_batch *b, const char *tag, const char *text)
{
    kl_error err = {0};
    if (!b->scratch) assert_int_equal(kl_tempdir("rules-golden-text", &b->scratch, &err), KL_OK);
    char name[96];
    int at = snprintf(name, sizeof name, "%u-", b->n);
    const char *base = strrchr(tag, '/') ? strrchr(tag, '/') + 1 : tag;
    for (const char *p = base; *p && at < (int)sizeof name - 4; p++)
        name[at++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                                    *p == '-' || *p == '_' || *p == '.'
                                ? *p
                                : '_');
    kl_snprintf(name + at, sizeof name - (size_t)at, ".cu");
    char *p = kl_path_join(b->scratch, name);
    assert_int_equal(kl_file_write(p, text, strlen(text), &err), KL_OK);
    golden_batch_add(b, p);
    free(p);
}

/* Forget the queue and remove the scratch folder (also what a group teardown calls). */
static inline void golden_batch_release(golden_batch *b)
{
    for (unsigned i = 0; i < b->n; i++) free(b->paths[i]);
    free(b->paths);
    if (b->scratch) kl_remove_tree(b->scratch, NULL);
    free(b->scratch);
    memset(b, 0, sizeof *b);
}

/* Compile everything queued (fail naming the first file nvcc rejects), then release the queue. */
static inline void golden_batch_compile(golden_batch *b)
{
    golden_nvcc_compile_all(b->paths, b->n);
    golden_batch_release(b);
}

/* What a round trip (the reverse after '|') must give when it is not the original text. */
typedef enum golden_trip {
    GOLDEN_TRIP_SITE,      /* a site of the first direction is back (any site of the transform) */
    GOLDEN_TRIP_SAME_SITE, /* the very site of the test line is back the other way */
    GOLDEN_TRIP_FREE_SITE, /* the transform's first site that way is back, with no why_not */
    GOLDEN_TRIP_EXACT,     /* nothing: the original text, byte for byte (self-inverse forms) */
} golden_trip;

/* The checks of a golden run beyond "the rewrite gives the .after.cu byte for byte". Every field is
 * meant: a zero is a zero (no case wanted, no round trip wanted ...). */
typedef struct golden_opts {
    const char *sub;     /* the folder under rules/ (NULL: the transform's name), e.g. "grid-stride/multi" */
    golden_trip trip;    /* the round trip's rule */
    unsigned min_cases;  /* at least this many cases */
    unsigned min_trips;  /* at least this many with a reverse */
    unsigned min_exact;  /* at least this many round trips give back the text exactly */
    bool every_trip;     /* every case must have a reverse after '|' */
    bool must_change;    /* the rewrite must change the text */
    bool compile_trips;  /* a round trip's text, when not the original, is compiled too */
    golden_batch *batch; /* queue the compiles there (the caller compiles the batch at the end); NULL:
                            compile the .after.cu files at the end of this run */
} golden_opts;

/* Does the transform's site list of text satisfy the round trip's rule `trip` for the forward op? */
static inline bool golden_trip_site_back(const char *name, const char *text, const op *fwd, golden_trip trip)
{
    char *json = NULL;
    kl_error err = {0};
    if (kl_rules_list(name, text, strlen(text), NULL, fwd->name, &json, &err) != KL_OK)
        fail_msg("%s: listing the %s sites of the round trip: %s", name, fwd->name, err.message);
    json_t *arr = json_loads(json, 0, NULL);
    free(json);
    assert_non_null(arr);
    const char *want = fwd->remove ? "present" : "applicable";
    bool ok = false, first = true;
    size_t i;
    json_t *s;
    json_array_foreach(arr, i, s) {
        if (strcmp(json_string_value(json_object_get(s, "direction")), want)) continue;
        if (trip == GOLDEN_TRIP_SITE) ok = true;
        else if (trip == GOLDEN_TRIP_SAME_SITE) ok = ok || !strcmp(json_string_value(json_object_get(s, "site")), fwd->site);
        else if (trip == GOLDEN_TRIP_FREE_SITE && first)
            ok = json_object_get(json_object_get(s, "features"), "why_not") == NULL;
        first = false;
    }
    json_decref(arr);
    return ok;
}

/* Every golden case of tests/data/rules/<opts->sub or transform>/: the rewrite named by its
 * `// test: ` line (which must name the transform) gives the .after.cu file; with a reverse after
 * '|', the round trip gives back the original or what opts->trip accepts; the counts of opts;
 * every result compiles with nvcc (where it is installed). */
static inline void golden_run_opts(const char *transform, const golden_opts *opts)
{
    const char *data = getenv("KL_TEST_DATA");
    assert_non_null(data);
    const char *sub = opts->sub ? opts->sub : transform;
    char dirpath[1024];
    kl_snprintf(dirpath, sizeof dirpath, "%s/rules/%s", data, sub);
    unsigned nn = 0, trips = 0, exact = 0;
    char **names = golden_names(dirpath, &nn), **afters = NULL;
    afters = calloc(nn ? nn : 1, sizeof *afters);
    for (unsigned ci = 0; ci < nn; ci++) {
        char before[1200], after[1200];
        kl_snprintf(before, sizeof before, "%s/%s", dirpath, names[ci]);
        kl_snprintf(after, sizeof after, "%.*s.after.cu", (int)(strlen(before) - strlen(".before.cu")), before);
        afters[ci] = kl_strdup(after);
        char *btext = NULL, *side = NULL;
        size_t blen;
        kl_error err = {0};
        /* a case whose input keeps no test line: NAME.test beside it holds it, and may name the
         * input itself (`// input: PATH`: a repository file taken as it is, not copied) */
        char sp[1200];
        kl_snprintf(sp, sizeof sp, "%.*s.test", (int)(strlen(before) - strlen(".before.cu")), before);
        if (kl_file_read(sp, 0, &side, &blen, &err) != KL_OK) side = NULL;
        golden_input_of(side, before, sizeof before); /* the input named there, else before.cu */
        assert_int_equal(kl_file_read(before, 0, &btext, &blen, &err), KL_OK);
        const char *hdr = strstr(btext, "// test: ");
        if (!hdr && side) hdr = strstr(side, "// test: ");
        if (!hdr) fail_msg("%s: no '// test: ' line (in the file or in NAME.test)", before);
        const char *eol = strchr(hdr, '\n');
        size_t hlen = eol ? (size_t)(eol - hdr) : strlen(hdr);
        /* a reverse ending in " exact" must give back the original text */
        bool want_exact = hlen > 6 && !strncmp(hdr + hlen - 6, " exact", 6);
        /* one ending in " parses" only has to succeed (and parse back: the catalog checks that) */
        bool parse_only = hlen > 7 && !strncmp(hdr + hlen - 7, " parses", 7);
        op fwd, back;
        if (!parse_op(hdr + 9, &fwd)) fail_msg("%s: bad test line", before);
        if (strcmp(fwd.name, transform)) fail_msg("%s: the test line names %s, not %s", before, fwd.name, transform);
        const char *bar = strchr(hdr, '|');
        bool has_back = bar && (size_t)(bar - hdr) < hlen && parse_op(bar + 1, &back);
        if (!has_back && opts->every_trip) fail_msg("%s: no reverse operation after '|'", before);
        char *got = rewrite_op(before, btext, &fwd, &err);
        if (!got) fail_msg("%s: %s", before, err.message);
        if (opts->must_change && !strcmp(got, btext)) fail_msg("%s: the rewrite changed nothing", before);
        golden_expect(before, after, got);
        if (opts->batch) golden_batch_add(opts->batch, after);
        if (!has_back) {
            free(got);
            free(btext);
            free(side);
            continue;
        }
        trips++;
        char *again = rewrite_op(after, got, &back, &err);
        if (!again)
            fail_msg("%s: the reverse (%s %s@%s) failed: %s", after, back.remove ? "remove" : "apply", back.name,
                     back.site, err.message);
        if (!strcmp(again, btext)) {
            exact++;
        } else if (parse_only) {
            /* the reverse ran and its result parsed back */
        } else if (opts->trip == GOLDEN_TRIP_EXACT || want_exact) {
            fail_msg("%s: the round trip does not give back the original:\n%s", before, again);
        } else {
            if (!golden_trip_site_back(before, again, &fwd, opts->trip))
                fail_msg("%s: the round trip neither restores the text nor brings the %s site%s%s back%s:\n%s", before,
                         fwd.remove ? "present" : "applicable", opts->trip == GOLDEN_TRIP_SAME_SITE ? " " : "",
                         opts->trip == GOLDEN_TRIP_SAME_SITE ? fwd.site : "",
                         opts->trip == GOLDEN_TRIP_FREE_SITE ? " without a why_not" : "", again);
            if (opts->compile_trips) {
                if (opts->batch) golden_batch_text(opts->batch, before, again);
                else fail_msg("%s: compile_trips wants a batch to compile the round trip in", transform);
            }
        }
        free(again);
        free(got);
        free(btext);
        free(side);
    }
    if (nn < opts->min_cases) fail_msg("%s: %u golden cases, at least %u wanted", sub, nn, opts->min_cases);
    if (trips < opts->min_trips)
        fail_msg("%s: %u golden cases with a round trip, at least %u wanted", sub, trips, opts->min_trips);
    if (exact < opts->min_exact)
        fail_msg("%s: %u round trips restore the text exactly, at least %u wanted", sub, exact, opts->min_exact);
    if (!opts->batch) golden_nvcc_compile_all(afters, nn);
    for (unsigned i = 0; i < nn; i++) free(names[i]), free(afters[i]);
    free(names);
    free(afters);
}

/* The common case: at least 5 cases and 5 round trips, a round trip gives back the original or at
 * least a site the first way; the .after.cu files compiled at the end. */
static inline void golden_run(const char *transform)
{
    const golden_opts o = {.trip = GOLDEN_TRIP_SITE, .min_cases = 5, .min_trips = 5};
    golden_run_opts(transform, &o);
}

#endif
