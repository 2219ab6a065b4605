/* What the register-tile and double-buffer tests share (test_rules_register_tile.c,
 * test_rules_double_buffer.c): the golden cases of one transform (rules_golden.h's runner, with
 * exact round trips), listing sites and expecting "not applicable" reasons; results are compiled
 * with golden_nvcc_compile_all. Header-only: each test is one executable. */
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

/* Every golden case of the transform: the result equals the .after.cu, the reverse gives back
 * the .before.cu exactly (these transforms invert their own forms), every .after.cu compiles. At
 * least 5 cases with a round trip. */
static inline void tile_golden(const char *transform)
{
    const golden_opts o = {.trip = GOLDEN_TRIP_EXACT, .min_cases = 5, .min_trips = 5};
    golden_run_opts(transform, &o);
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

/* The first site id found in the given direction ("present" / "applicable"), rewriting or
 * refused ("refused" with "refused": "remove" / "apply"), NULL when none; the reason it is
 * refused (or its features' why_not) into *why (NULL when none). */
static inline const char *tile_site(json_t *sites, const char *dir, const char **why)
{
    size_t i;
    json_t *s;
    const char *refusal = !strcmp(dir, "present") ? "remove" : "apply";
    json_array_foreach(sites, i, s) {
        const char *d = json_string_value(json_object_get(s, "direction"));
        bool refused = !strcmp(d, "refused") && !strcmp(json_string_value(json_object_get(s, "refused")), refusal);
        if (strcmp(d, dir) && !refused) continue;
        if (why) {
            *why = json_string_value(json_object_get(json_object_get(s, "features"), "why_not"));
            if (!*why && refused) *why = json_string_value(json_object_get(s, "reason"));
        }
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
