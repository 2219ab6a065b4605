/* What the register-tile and double-buffer tests share (test_rules_register_tile.c,
 * test_rules_double_buffer.c): the golden cases of one transform, compiling results with nvcc,
 * listing sites and expecting "not applicable" reasons. Header-only: each test is one executable. */
#ifndef KL_TEST_RULES_TILE_H
#define KL_TEST_RULES_TILE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/rewrite.h"
#include "rewrite/rules/rules.h"
#include "util/util.h"
#include "rules_golden.h"

static inline const char *tile_nvcc(void)
{
    if (kl_file_exists("/usr/local/cuda/bin/nvcc")) return "/usr/local/cuda/bin/nvcc";
    return system("command -v nvcc >/dev/null 2>&1") == 0 ? "nvcc" : NULL;
}

/* Compile the files with nvcc -arch=sm_90 -c, two at a time; fail naming the first rejected. */
static inline void tile_compile_all(char *const *paths, unsigned n)
{
    const char *nvcc = tile_nvcc();
    if (!nvcc) {
        fprintf(stderr, "note: nvcc is absent: the compile checks are skipped\n");
        return;
    }
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("rules-tile", &dir, &err), KL_OK);
    for (unsigned i = 0; i < n; i += 2) {
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

/* Every golden case of the transform: the result equals the .after.cu, the reverse gives back
 * the .before.cu exactly (these two transforms invert their own forms), every .after.cu
 * compiles. At least 5 cases with a round trip. */
static inline void tile_golden(const char *transform)
{
    const char *data = getenv("KL_TEST_DATA");
    assert_non_null(data);
    char dirpath[1024];
    kl_snprintf(dirpath, sizeof dirpath, "%s/rules/%s", data, transform);
    unsigned nn = 0, trips = 0;
    char **names = golden_names(dirpath, &nn);
    char **afters = calloc(nn ? nn : 1, sizeof *afters);
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
        if (has_back) {
            trips++;
            char *again = rewrite_op(after, got, &back, &err);
            if (!again)
                fail_msg("%s: the reverse (%s %s@%s) failed: %s", after, back.remove ? "remove" : "apply", back.name,
                         back.site, err.message);
            if (strcmp(again, btext)) fail_msg("%s: the round trip does not give back the original:\n%s", before, again);
            free(again);
        }
        free(got);
        free(btext);
    }
    if (nn < 5) fail_msg("%s: %u golden cases, at least 5 wanted", transform, nn);
    if (trips < 5) fail_msg("%s: %u golden cases with a round trip, at least 5 wanted", transform, trips);
    tile_compile_all(afters, nn);
    for (unsigned i = 0; i < nn; i++) free(names[i]), free(afters[i]);
    free(names);
    free(afters);
}

static inline char *tile_read_task(const char *task, const char *file)
{
    const char *root = getenv("KL_SOURCE_DIR");
    assert_non_null(root);
    char p[1024];
    kl_snprintf(p, sizeof p, "%s/tasks/%s/%s", root, task, file);
    char *t = NULL;
    size_t n;
    kl_error err = {0};
    if (kl_file_read(p, 0, &t, &n, &err) != KL_OK) fail_msg("%s: %s", p, err.message);
    return t;
}

/* The sites of one transform in text, as a JSON array (owned). */
static inline json_t *tile_sites(const char *text, const char *transform)
{
    char *json = NULL;
    kl_error err = {0};
    if (kl_rules_list("t.cu", text, strlen(text), NULL, transform, &json, &err) != KL_OK) fail_msg("%s", err.message);
    json_t *a = json_loads(json, 0, NULL);
    free(json);
    assert_non_null(a);
    return a;
}

/* The first site id in the given direction ("present" / "applicable"), NULL when none; its
 * features' why_not into *why (NULL when none). */
static inline const char *tile_site(json_t *sites, const char *dir, const char **why)
{
    size_t i;
    json_t *s;
    json_array_foreach(sites, i, s) {
        if (strcmp(json_string_value(json_object_get(s, "direction")), dir)) continue;
        if (why) *why = json_string_value(json_object_get(json_object_get(s, "features"), "why_not"));
        return json_string_value(json_object_get(s, "site"));
    }
    return NULL;
}

/* Run an operation on text; the result (owned) or NULL with err set. */
static inline char *tile_rewrite(const char *text, const char *transform, const char *site, bool remove,
                                 const char *params, kl_error *err)
{
    char *out = NULL, *note = NULL;
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, transform, site, remove, params, &out, &note, err);
    free(note);
    return st == KL_OK ? out : NULL;
}

/* The transform's first site in the direction must fail as not applicable with `want` in the reason. */
static inline void tile_expect_not_applicable(const char *text, const char *transform, bool remove, const char *params,
                                              const char *want)
{
    json_t *sites = tile_sites(text, transform);
    const char *id = tile_site(sites, remove ? "present" : "applicable", NULL);
    if (!id) fail_msg("%s: no %s site in:\n%s", transform, remove ? "present" : "applicable", text);
    kl_error err = {0};
    char *out = tile_rewrite(text, transform, id, remove, params, &err);
    if (out || err.status != KL_ERR_NOT_APPLICABLE)
        fail_msg("%s@%s: expected not applicable, got status %d (%s)", transform, id, err.status, err.message);
    if (!strstr(err.message, want)) fail_msg("%s@%s: the reason '%s' does not say '%s'", transform, id, err.message, want);
    json_decref(sites);
}

static inline char *tile_write_temp(const char *dir, const char *name, const char *text)
{
    char *p = kl_path_join(dir, name);
    kl_error err = {0};
    assert_int_equal(kl_file_write(p, text, strlen(text), &err), KL_OK);
    return p;
}

#endif
