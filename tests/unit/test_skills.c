/* src/skills: the card model, predicates and matching, merge, the library in the store, the
 * renderings (goldens in tests/data/skills/golden; KL_UPDATE_GOLDEN=1 rewrites them). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/lineage.h"
#include "klineage/skills.h"
#include "klineage/store.h"
#include "util/util.h"

static char *data_path(const char *name)
{
    const char *dir = getenv("KL_TEST_DATA");
    assert_non_null(dir);
    char *skills = kl_path_join(dir, "skills");
    char *p = kl_path_join(skills, name);
    free(skills);
    return p;
}

static char *read_data(const char *name)
{
    char *p = data_path(name), *text = NULL;
    kl_error err = {0};
    if (kl_file_read(p, 0, &text, NULL, &err) != KL_OK) fail_msg("%s", err.message);
    free(p);
    return text;
}

static kl_skill *load_card(const char *name)
{
    char *text = read_data(name);
    kl_skill *card = NULL;
    kl_error err = {0};
    if (kl_skill_parse(text, name, &card, &err) != KL_OK) fail_msg("%s", err.message);
    free(text);
    return card;
}

/* Compare text with golden/<name>; with KL_UPDATE_GOLDEN=1, write it instead. */
static void golden(const char *name, const char *text)
{
    assert_non_null(text);
    char g[256];
    kl_snprintf(g, sizeof g, "golden/%s", name);
    char *path = data_path(g);
    kl_error err = {0};
    if (getenv("KL_UPDATE_GOLDEN") && !strcmp(getenv("KL_UPDATE_GOLDEN"), "1")) {
        assert_int_equal(kl_file_write(path, text, strlen(text), &err), KL_OK);
    } else {
        char *want = NULL;
        if (kl_file_read(path, 0, &want, NULL, &err) != KL_OK) fail_msg("%s (KL_UPDATE_GOLDEN=1 writes it)", err.message);
        if (strcmp(want, text) != 0) {
            /* the first differing line, to see what changed */
            const char *a = want, *b = text;
            unsigned line = 1;
            while (*a && *a == *b) {
                if (*a == '\n') line++;
                a++, b++;
            }
            fail_msg("%s differs at line %u:\n  want: %.80s\n  got:  %.80s", path, line, a, b);
        }
        free(want);
    }
    free(path);
}

/* ---- parse and validate ---------------------------------------------------------------------- */

static void expect_invalid(const char *json_text, kl_status want, const char *message)
{
    kl_skill *card = NULL;
    kl_error err = {0};
    kl_status st = kl_skill_parse(json_text, "card.json", &card, &err);
    if (st != want) fail_msg("status %d (want %d) for %s: %s", st, want, json_text, err.message);
    assert_null(card);
    if (!strstr(err.message, message)) fail_msg("message \"%s\" lacks \"%s\"", err.message, message);
}

static void parse_names_the_key_in_every_error(void **state)
{
    (void)state;
    expect_invalid("{\"id\": \"a-1\", ", KL_ERR_PARSE, "card.json:1:");
    expect_invalid("[1]", KL_ERR_INVALID, "card.json: expected a card (a JSON object), not an array");
    expect_invalid("{\"transform\": \"t\"}", KL_ERR_INVALID, "card.json: id: missing");
    expect_invalid("{\"id\": \"\", \"transform\": \"t\"}", KL_ERR_INVALID, "card.json: id: expected a non-empty string");
    expect_invalid("{\"id\": \"a-1\"}", KL_ERR_INVALID, "card.json: transform: missing");
    expect_invalid("{\"id\": \"../x\", \"transform\": \"t\"}", KL_ERR_INVALID, "card.json: id: \"../x\" cannot name a folder");
    expect_invalid("{\"id\": \"a/b\", \"transform\": \"t\"}", KL_ERR_INVALID, "cannot name a folder");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"colour\": 1}", KL_ERR_INVALID, "card.json: colour: unknown key");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"format\": 2}", KL_ERR_INVALID,
                   "format: 2 is not a card format this klineage reads (1)");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"preconditions\": [{\"predicate\": \"n > 1\", \"kind\": "
                   "\"static\"}, {\"predicate\": 4, \"kind\": \"probed\"}]}",
                   KL_ERR_INVALID, "card.json: preconditions[1].predicate: expected a string, not an integer");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"preconditions\": [{\"predicate\": \"cols % 4 = 0\", "
                   "\"kind\": \"probed\"}]}",
                   KL_ERR_INVALID,
                   "preconditions[0].predicate: \"cols % 4 = 0\": column 10: expected an operator (== != < <= > >=)");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"preconditions\": [{\"predicate\": null, \"kind\": "
                   "\"probed\"}]}",
                   KL_ERR_INVALID, "preconditions[0].predicate: expected a string (only an \"unexplained\" condition");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"preconditions\": [{\"predicate\": \"n > 1\", \"kind\": "
                   "\"guessed\"}]}",
                   KL_ERR_INVALID, "preconditions[0].kind: \"guessed\" is not one of static, probed, probed-perf, unexplained");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"preconditions\": [{\"predicate\": \"n > 1\"}]}",
                   KL_ERR_INVALID, "preconditions[0].kind: missing");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"preconditions\": [{\"predicate\": \"n > 1\", \"kind\": "
                   "\"static\", \"evidence\": [\"x\", 3]}]}",
                   KL_ERR_INVALID, "preconditions[0].evidence[1]: expected a string, not an integer");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"risks\": [{\"broke\": \"oops\"}]}", KL_ERR_INVALID,
                   "risks[0].broke: \"oops\" is not one of wrong, slower, crash, compile");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"risks\": [{\"broke\": \"wrong\", \"shape\": {\"n\": "
                   "\"big\"}}]}",
                   KL_ERR_INVALID, "risks[0].shape.n: expected an integer size, not a string");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"effect\": [{\"speedup\": 0}]}", KL_ERR_INVALID,
                   "effect[0].speedup: expected a number > 0");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"effect\": [{\"device\": \"x\"}]}", KL_ERR_INVALID,
                   "effect[0].speedup: missing");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"anchor\": {\"kernel\": \"k\", \"pattern\": {\"site\": 1}}}",
                   KL_ERR_INVALID, "anchor.pattern.site: unknown key");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"probes\": {\"count\": 2, \"failures\": 3}}", KL_ERR_INVALID,
                   "probes.failures: 3 failures in 2 probes");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"probes\": {\"count\": -1}}", KL_ERR_INVALID,
                   "probes.count: expected an integer >= 0, not -1");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"requires\": \"unroll\"}", KL_ERR_INVALID,
                   "requires: expected an array of strings, not a string");
    expect_invalid("{\"id\": \"a\", \"transform\": \"t\", \"contradictions\": [{\"held_in\": \"L1\"}]}", KL_ERR_INVALID,
                   "contradictions[0].predicate: missing");
    expect_invalid("{\"id\": \"a\", \"id\": \"b\", \"transform\": \"t\"}", KL_ERR_PARSE, "duplicate object key");

    /* the smallest valid card; "x-" keys are extensions and are kept */
    kl_skill *card = NULL;
    kl_error err = {0};
    assert_int_equal(kl_skill_parse("{\"x-note\": [1], \"transform\": \"t\", \"id\": \"a\"}", NULL, &card, &err), KL_OK);
    assert_string_equal(kl_skill_id(card), "a");
    assert_string_equal(kl_skill_transform(card), "t");
    assert_string_equal(kl_skill_intent(card), "");
    char *j = kl_skill_to_json(card);
    assert_string_equal(j, "{\n  \"id\": \"a\",\n  \"transform\": \"t\",\n  \"x-note\": [\n    1\n  ]\n}\n");
    free(j);
    kl_skill_free(card);
    kl_skill_free(NULL);
}

static void summary_counts_what_list_shows(void **state)
{
    (void)state;
    kl_skill *v = load_card("vectorize.json");
    kl_skill_summary s;
    kl_skill_summarize(v, &s);
    assert_string_equal(s.id, "vectorize-3fa2c1");
    assert_int_equal(s.npreconditions, 3);
    assert_int_equal(s.nprobed, 2);
    assert_int_equal(s.nrisks, 2);
    assert_int_equal(s.nlineages, 1);
    assert_int_equal(s.nrequires, 1);
    assert_int_equal(s.probes, 6);
    assert_true(s.best_gain > 1.619 && s.best_gain < 1.621);
    kl_skill_free(v);
    kl_skill *bare = NULL;
    kl_error err = {0};
    assert_int_equal(kl_skill_parse("{\"id\": \"a\", \"transform\": \"t\"}", NULL, &bare, &err), KL_OK);
    kl_skill_summarize(bare, &s);
    assert_true(s.best_gain < 0);
    assert_int_equal(s.npreconditions, 0);
    kl_skill_free(bare);
}

/* ---- predicates ------------------------------------------------------------------------------ */

static kl_truth eval(const char *pred, const char *env_json, char *why, size_t size)
{
    kl_predicate p;
    kl_error err = {0};
    if (kl_predicate_parse(pred, &p, &err) != KL_OK) fail_msg("%s", err.message);
    json_t *env = json_loads(env_json, 0, NULL);
    assert_non_null(env);
    kl_truth t = kl_predicate_eval(&p, env, why, size);
    json_decref(env);
    return t;
}

#define HOLDS(p, e) assert_int_equal(eval(p, e, NULL, 0), KL_TRUTH_HOLDS)
#define FAILS(p, e) assert_int_equal(eval(p, e, NULL, 0), KL_TRUTH_FAILS)
#define UNKNOWN(p, e) assert_int_equal(eval(p, e, NULL, 0), KL_TRUTH_UNKNOWN)

static void predicates_compare_each_way(void **state)
{
    (void)state;
    const char *env = "{\"cols\": 1024, \"rows\": 3, \"neg\": -7, \"dtype\": \"f32\", \"uses_shared\": true, "
                      "\"nbar\": 0, \"ratio\": 0.5, \"none\": null, \"obj\": {}}";
    HOLDS("cols == 1024", env);
    FAILS("cols == 1023", env);
    HOLDS("cols != 1023", env);
    FAILS("cols != 1024", env);
    HOLDS("rows < 4", env);
    FAILS("rows < 3", env);
    HOLDS("rows <= 3", env);
    FAILS("rows <= 2", env);
    HOLDS("cols > 1023", env);
    FAILS("cols > 1024", env);
    HOLDS("cols >= 1024", env);
    FAILS("cols >= 1025", env);
    HOLDS("neg < -6", env);
    HOLDS("neg >= -7", env);
    /* modulo */
    HOLDS("cols % 4 == 0", env);
    HOLDS("cols % 256 == 0", env);
    FAILS("cols % 3 == 0", env);
    HOLDS("cols % 3 == 1", env);
    HOLDS("rows % 2 != 0", env);
    /* strings and booleans */
    HOLDS("dtype == \"f32\"", env);
    FAILS("dtype == \"f16\"", env);
    HOLDS("dtype != \"f16\"", env);
    HOLDS("uses_shared == true", env);
    FAILS("uses_shared == false", env);
    HOLDS("uses_shared != false", env);
    HOLDS("nbar == false", env);      /* a count is a flag: 0 is false */
    HOLDS("uses_shared == 1", env);   /* and a flag a 0/1 number */
    HOLDS("ratio < 1", env);          /* reals compare as numbers */
    FAILS("ratio >= 1", env);
    /* unknown: absent, null, or not comparable */
    UNKNOWN("trip == 4", env);
    UNKNOWN("none == 1", env);
    UNKNOWN("dtype == 4", env);
    UNKNOWN("cols == \"1024\"", env);
    UNKNOWN("obj == true", env);
    UNKNOWN("dtype % 4 == 0", env);
    kl_predicate p;
    kl_error err = {0};
    assert_int_equal(kl_predicate_parse("n > 1", &p, &err), KL_OK);
    assert_int_equal(kl_predicate_eval(&p, NULL, NULL, 0), KL_TRUTH_UNKNOWN);

    char why[160];
    assert_int_equal(eval("cols % 4 == 0", "{\"cols\": 1023}", why, sizeof why), KL_TRUTH_FAILS);
    assert_string_equal(why, "cols = 1023, cols % 4 = 3");
    assert_int_equal(eval("trip == 4", "{}", why, sizeof why), KL_TRUTH_UNKNOWN);
    assert_string_equal(why, "trip is not in the environment");
    assert_int_equal(eval("dtype == \"f16\"", "{\"dtype\": \"f32\"}", why, sizeof why), KL_TRUTH_FAILS);
    assert_string_equal(why, "dtype = \"f32\"");
    assert_int_equal(eval("dtype == 4", "{\"dtype\": \"f32\"}", why, sizeof why), KL_TRUTH_UNKNOWN);
    assert_string_equal(why, "dtype is a string, not a number");
}

static void predicate_parse_reads_the_syntax(void **state)
{
    (void)state;
    kl_predicate p;
    kl_error err = {0};
    assert_int_equal(kl_predicate_parse("  cols%4==0 ", &p, &err), KL_OK);
    assert_string_equal(p.name, "cols");
    assert_int_equal(p.modulus, 4);
    assert_int_equal(p.op, KL_PRED_EQ);
    assert_int_equal(p.kind, KL_PRED_INT);
    assert_int_equal(p.integer, 0);
    assert_int_equal(kl_predicate_parse("site.dtype != \"say \\\"hi\\\" \\\\\"", &p, &err), KL_OK);
    assert_string_equal(p.name, "site.dtype");
    assert_int_equal(p.op, KL_PRED_NE);
    assert_int_equal(p.kind, KL_PRED_STRING);
    assert_string_equal(p.string, "say \"hi\" \\");
    assert_int_equal(kl_predicate_parse("rows >= -12", &p, &err), KL_OK);
    assert_int_equal(p.op, KL_PRED_GE);
    assert_int_equal(p.integer, -12);
    assert_int_equal(kl_predicate_parse("ok == false", &p, &err), KL_OK);
    assert_int_equal(p.kind, KL_PRED_BOOL);
    assert_false(p.boolean);
    assert_int_equal(kl_predicate_parse("n<3", &p, &err), KL_OK);
    assert_int_equal(p.op, KL_PRED_LT);
    assert_int_equal(kl_predicate_parse("n>3", &p, &err), KL_OK);
    assert_int_equal(p.op, KL_PRED_GT);
    assert_int_equal(kl_predicate_parse("n<=3", &p, &err), KL_OK);
    assert_int_equal(p.op, KL_PRED_LE);

    static const struct {
        const char *text, *message;
    } bad[] = {
        {"", "\"\": column 1: expected a name (a task size or a feature)"},
        {"4 == n", "\"4 == n\": column 1: expected a name"},
        {"cols % 4 = 0", "\"cols % 4 = 0\": column 10: expected an operator (== != < <= > >=)"},
        {"cols === 1", "\"cols === 1\": column 6: expected an operator"},
        {"cols => 1", "column 6: expected an operator"},
        {"cols", "\"cols\": column 5: expected an operator"},
        {"cols % 0 == 0", "column 8: expected a positive integer after '%'"},
        {"cols % -4 == 0", "column 8: expected a positive integer after '%'"},
        {"cols % x == 0", "column 8: expected a positive integer after '%'"},
        {"cols ==", "\"cols ==\": column 8: expected a value: an integer, a quoted string, true or false"},
        {"cols == four", "column 9: expected a value"},
        {"cols == 1.5", "column 9: expected an integer (predicates compare integers, not reals)"},
        {"cols == 99999999999999999999", "column 9: expected a value"},
        {"cols == 4 extra", "column 11: unexpected text after the value"},
        {"cols == 4 && rows == 2", "column 11: unexpected text after the value"},
        {"dtype == \"f32", "column 10: unterminated string"},
        {"dtype == \"a\\n\"", "column 12: unknown escape"},
        {"dtype < \"f32\"", "column 7: a string compares only with == and !="},
        {"flag >= true", "column 6: a boolean compares only with == and !="},
        {"cols % 4 == \"x\"", "column 13: expected an integer: the remainder of '%' is compared with a number"},
        {"truex == 1", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kl_error e = {0};
        kl_status st = kl_predicate_parse(bad[i].text, &p, &e);
        if (!bad[i].message) { /* "truex" is a name, not a boolean */
            assert_int_equal(st, KL_OK);
            assert_string_equal(p.name, "truex");
            continue;
        }
        if (st != KL_ERR_INVALID) fail_msg("\"%s\" parsed", bad[i].text);
        if (!strstr(e.message, bad[i].message)) fail_msg("\"%s\": \"%s\" lacks \"%s\"", bad[i].text, e.message, bad[i].message);
    }
    assert_int_equal(kl_predicate_parse(NULL, &p, &err), KL_ERR_INVALID);
    char longname[100];
    memset(longname, 'a', 80);
    memcpy(longname + 80, " == 1", 6);
    assert_int_equal(kl_predicate_parse(longname, &p, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "longer than 63"));
}

static void match_combines_conditions_and_requires(void **state)
{
    (void)state;
    kl_skill *v = load_card("vectorize.json");
    kl_skill_match_result r;
    kl_error err = {0};
    const char *present[] = {"row-parallel", "unroll"};
    json_t *env = json_pack("{s:s, s:i, s:i}", "dtype", "f32", "cols", 4096, "rows", 8192);
    assert_int_equal(kl_skill_match(v, env, present, 2, &r, &err), KL_OK);
    assert_int_equal(r.truth, KL_TRUTH_HOLDS);
    assert_int_equal(r.nchecks, 3);
    assert_int_equal(r.nmissing, 0);
    assert_false(r.requires_unknown);
    assert_string_equal(r.checks[1].predicate, "cols % 4 == 0");
    assert_string_equal(r.checks[1].kind, "probed");
    kl_skill_match_release(&r);

    /* a failing size: fails, and says which */
    json_object_set_new(env, "cols", json_integer(1021));
    assert_int_equal(kl_skill_match(v, env, present, 2, &r, &err), KL_OK);
    assert_int_equal(r.truth, KL_TRUTH_FAILS);
    assert_int_equal(r.checks[0].truth, KL_TRUTH_HOLDS);
    assert_int_equal(r.checks[1].truth, KL_TRUTH_FAILS);
    assert_string_equal(r.checks[1].why, "cols = 1021, cols % 4 = 1");
    kl_skill_match_release(&r);

    /* an absent name: unknown; a fail still wins over unknown */
    json_object_set_new(env, "cols", json_integer(1024));
    json_object_del(env, "dtype");
    assert_int_equal(kl_skill_match(v, env, present, 2, &r, &err), KL_OK);
    assert_int_equal(r.truth, KL_TRUTH_UNKNOWN);
    assert_int_equal(r.checks[0].truth, KL_TRUTH_UNKNOWN);
    kl_skill_match_release(&r);
    json_object_set_new(env, "rows", json_integer(17));
    assert_int_equal(kl_skill_match(v, env, present, 2, &r, &err), KL_OK);
    assert_int_equal(r.truth, KL_TRUTH_FAILS);
    kl_skill_match_release(&r);

    /* requires: absent fails; not known is unknown */
    json_object_set_new(env, "rows", json_integer(8192));
    json_object_set_new(env, "dtype", json_string("f32"));
    assert_int_equal(kl_skill_match(v, env, present + 1, 1, &r, &err), KL_OK);
    assert_int_equal(r.truth, KL_TRUTH_FAILS);
    assert_int_equal(r.nmissing, 1);
    assert_string_equal(r.missing[0], "row-parallel");
    kl_skill_match_release(&r);
    assert_int_equal(kl_skill_match(v, env, NULL, 0, &r, &err), KL_OK);
    assert_int_equal(r.truth, KL_TRUTH_UNKNOWN);
    assert_true(r.requires_unknown);
    kl_skill_match_release(&r);
    kl_skill_match_release(NULL);
    json_decref(env);
    kl_skill_free(v);

    /* unexplained conditions are not checks */
    kl_skill *u = NULL;
    assert_int_equal(kl_skill_parse("{\"id\": \"a\", \"transform\": \"t\", \"preconditions\": [{\"predicate\": null, "
                                    "\"kind\": \"unexplained\", \"because\": \"wrong at 2 shapes\"}]}",
                                    NULL, &u, &err),
                     KL_OK);
    assert_int_equal(kl_skill_match(u, NULL, NULL, 0, &r, &err), KL_OK);
    assert_int_equal(r.nchecks, 0);
    assert_int_equal(r.truth, KL_TRUTH_HOLDS);
    kl_skill_match_release(&r);
    kl_skill_free(u);
}

/* ---- merge and the store ----------------------------------------------------------------------- */

static void merge_keeps_agreement_adds_evidence_and_shows_contradictions(void **state)
{
    (void)state;
    char *a = read_data("smem-pad-a.json"), *b = read_data("smem-pad-b.json"), *m = NULL;
    kl_error err = {0};
    assert_int_equal(kl_skill_merge(a, b, &m, &err), KL_OK);
    json_t *j = json_loads(m, 0, NULL);
    assert_non_null(j);
    /* agreement: the static dtype condition stays, with the evidence of both */
    json_t *pres = json_object_get(j, "preconditions");
    assert_int_equal(json_array_size(pres), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(pres, 0), "predicate")), "dtype == \"float\"");
    assert_int_equal(json_array_size(json_object_get(json_array_get(pres, 0), "evidence")), 2);
    /* contradiction: cols >= 64 held in the transpose lineage only */
    json_t *contra = json_object_get(j, "contradictions");
    assert_int_equal(json_array_size(contra), 1);
    json_t *c0 = json_array_get(contra, 0);
    assert_string_equal(json_string_value(json_object_get(c0, "predicate")), "cols >= 64");
    assert_string_equal(json_string_value(json_object_get(c0, "held_in")), "transpose@1a2b3c");
    assert_string_equal(json_string_value(json_object_get(c0, "not_found_in")), "matmul@9f8e7d");
    /* evidence and effects add up; risks are unioned; requires: what either lineage showed */
    json_t *ev = json_object_get(j, "evidence");
    assert_int_equal(json_array_size(json_object_get(ev, "lineages")), 2);
    assert_int_equal(json_array_size(json_object_get(ev, "verdicts")), 3);
    assert_int_equal(json_array_size(json_object_get(j, "effect")), 2);
    assert_int_equal(json_array_size(json_object_get(j, "risks")), 1);
    assert_int_equal(json_array_size(json_object_get(j, "requires")), 2);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "requires"), 0)), "tile-smem");
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "requires"), 1)), "unroll");
    /* probes: counts add; the note no longer claims "no failure" */
    json_t *pr = json_object_get(j, "probes");
    assert_int_equal(json_integer_value(json_object_get(pr, "count")), 9);
    assert_int_equal(json_integer_value(json_object_get(pr, "failures")), 1);
    assert_null(json_object_get(pr, "note"));
    assert_int_equal(json_array_size(json_object_get(pr, "shapes")), 6);
    json_decref(j);
    free(m);

    /* two clean cards: the note speaks of the sum; unexplained failures are kept;
     * a condition verified in one card only is not verified */
    const char *x = "{\"id\":\"k-1\",\"transform\":\"k\",\"preconditions\":[{\"predicate\":\"n > 1\",\"kind\":\"probed\","
                    "\"verified\":true},{\"predicate\":null,\"kind\":\"unexplained\",\"because\":\"crash at 1 shape\"}],"
                    "\"probes\":{\"count\":3,\"failures\":0,\"note\":\"probed on 3 shape(s); no failure found\"},"
                    "\"evidence\":{\"lineages\":[\"L1\"]}}";
    const char *y = "{\"id\":\"k-1\",\"transform\":\"k\",\"preconditions\":[{\"predicate\":\"n > 1\",\"kind\":\"probed\","
                    "\"verified\":false}],\"probes\":{\"count\":4,\"failures\":0},\"evidence\":{\"lineages\":[\"L2\"]}}";
    assert_int_equal(kl_skill_merge(x, y, &m, &err), KL_OK);
    j = json_loads(m, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "probes"), "note")),
                        "probed on 7 shape(s); no failure found");
    pres = json_object_get(j, "preconditions");
    assert_int_equal(json_array_size(pres), 2);
    assert_true(json_is_false(json_object_get(json_array_get(pres, 0), "verified")));
    assert_true(json_is_null(json_object_get(json_array_get(pres, 1), "predicate")));
    assert_int_equal(json_array_size(json_object_get(j, "contradictions")), 0);
    json_decref(j);
    free(m);

    /* different ids and bad JSON do not merge */
    assert_int_equal(kl_skill_merge(a, "{\"id\":\"unroll-000000\"}", &m, &err), KL_ERR_INVALID);
    assert_null(m);
    assert_non_null(strstr(err.message, "different ids"));
    assert_int_equal(kl_skill_merge(a, "{", &m, &err), KL_ERR_PARSE);
    free(a);
    free(b);
}

typedef struct fixture {
    kl_store *store;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    kl_error err = {0};
    if (!f || kl_store_open(":memory:", &f->store, &err) != KL_OK) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    kl_store_close(f->store);
    free(f);
    return 0;
}

static void put(kl_store *store, const char *name)
{
    char *text = read_data(name);
    kl_error err = {0};
    if (kl_skill_put(store, text, &err) != KL_OK) fail_msg("%s", err.message);
    free(text);
}

static void store_round_trip_get_list_and_prefixes(void **state)
{
    fixture *f = *state;
    kl_error err = {0};
    put(f->store, "vectorize.json");
    put(f->store, "unroll.json");
    put(f->store, "smem-pad-a.json");

    /* what was put comes back, in the fixed key order */
    kl_skill *v = load_card("vectorize.json"), *got = NULL;
    assert_int_equal(kl_skill_get(f->store, "vectorize-3fa2c1", &got, &err), KL_OK);
    assert_true(json_equal((json_t *)kl_skill_doc(v), (json_t *)kl_skill_doc(got)));
    char *stored = NULL, *canon = kl_skill_to_json(v);
    assert_int_equal(kl_store_get(f->store, "skill", "vectorize-3fa2c1", &stored, &err), KL_OK);
    assert_string_equal(stored, canon);
    free(stored), free(canon);
    kl_skill_free(got);
    /* the same lineage again replaces its card instead of adding to it */
    put(f->store, "vectorize.json");
    assert_int_equal(kl_skill_get(f->store, "vectorize-3fa2c1", &got, &err), KL_OK);
    assert_true(json_equal((json_t *)kl_skill_doc(v), (json_t *)kl_skill_doc(got)));
    kl_skill_free(got);
    kl_skill_free(v);

    /* a unique prefix */
    assert_int_equal(kl_skill_get(f->store, "unr", &got, &err), KL_OK);
    assert_string_equal(kl_skill_id(got), "unroll-9b41d0");
    kl_skill_free(got);
    /* an ambiguous one lists what it begins */
    put(f->store, "unroll.json");
    char *u2 = read_data("unroll.json");
    json_t *j = json_loads(u2, 0, NULL);
    json_object_set_new(j, "id", json_string("unroll-000aaa"));
    char *t = json_dumps(j, 0);
    assert_int_equal(kl_skill_put(f->store, t, &err), KL_OK);
    free(t), free(u2);
    json_decref(j);
    assert_int_equal(kl_skill_get(f->store, "unroll-", &got, &err), KL_ERR_INVALID);
    assert_null(got);
    assert_non_null(strstr(err.message, "skill \"unroll-\" is ambiguous: it begins unroll-000aaa, unroll-9b41d0"));
    assert_int_equal(kl_skill_get(f->store, "zzz", &got, &err), KL_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "no skill \"zzz\""));

    /* list: by transform, then id */
    kl_skill_list list = KL_SKILL_LIST_INIT;
    assert_int_equal(kl_skill_list_load(f->store, &list, &err), KL_OK);
    assert_int_equal(list.count, 4);
    assert_string_equal(kl_skill_id(list.items[0]), "smem-pad-7c21e9");
    assert_string_equal(kl_skill_id(list.items[1]), "unroll-000aaa");
    assert_string_equal(kl_skill_id(list.items[2]), "unroll-9b41d0");
    assert_string_equal(kl_skill_id(list.items[3]), "vectorize-3fa2c1");
    kl_skill_list_release(&list);
    kl_skill_list_release(NULL);

    /* an invalid card is refused by put, and a stored one that no longer validates is named */
    assert_int_equal(kl_skill_put(f->store, "{\"id\": \"x\"}", &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "transform: missing"));
    assert_int_equal(kl_store_put(f->store, "skill", "broken-1", "{\"id\": \"broken-1\", \"transform\": 3}", &err), KL_OK);
    assert_int_equal(kl_skill_list_load(f->store, &list, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "stored skill broken-1: transform: expected a string"));
    assert_int_equal(list.count, 0);
}

static void put_merges_cards_of_other_lineages(void **state)
{
    fixture *f = *state;
    kl_error err = {0};
    put(f->store, "smem-pad-a.json");
    put(f->store, "smem-pad-b.json");
    kl_skill *m = NULL;
    assert_int_equal(kl_skill_get(f->store, "smem-pad-7c21e9", &m, &err), KL_OK);
    kl_skill_summary s;
    kl_skill_summarize(m, &s);
    assert_int_equal(s.nlineages, 2);
    assert_int_equal(s.ncontradictions, 1);
    assert_int_equal(s.npreconditions, 1);
    kl_skill_free(m);
}

/* Storing the cards of a lineage again (a replay, a walk taken up again) leaves a card merged
 * from several lineages as it was: the evidence is not counted twice, in any order; a card
 * stored before parts were kept keeps its evidence when another lineage's card arrives. */
static void put_again_is_idempotent(void **state)
{
    fixture *f = *state;
    kl_error err = {0};
    put(f->store, "smem-pad-a.json");
    put(f->store, "smem-pad-b.json");
    char *once = NULL, *twice = NULL;
    assert_int_equal(kl_store_get(f->store, "skill", "smem-pad-7c21e9", &once, &err), KL_OK);
    put(f->store, "smem-pad-a.json");
    put(f->store, "smem-pad-b.json");
    put(f->store, "smem-pad-a.json");
    assert_int_equal(kl_store_get(f->store, "skill", "smem-pad-7c21e9", &twice, &err), KL_OK);
    assert_string_equal(once, twice);
    free(twice);
    /* a card from before parts were kept (stored as it is), then another lineage's */
    kl_store *legacy = NULL;
    assert_int_equal(kl_store_open(":memory:", &legacy, &err), KL_OK);
    char *a = read_data("smem-pad-a.json"), *canon = NULL;
    kl_skill *ca = NULL;
    assert_int_equal(kl_skill_parse(a, "a", &ca, &err), KL_OK);
    canon = kl_skill_to_json(ca);
    assert_int_equal(kl_store_put(legacy, "skill", "smem-pad-7c21e9", canon, &err), KL_OK);
    put(legacy, "smem-pad-b.json");
    put(legacy, "smem-pad-b.json");
    assert_int_equal(kl_store_get(legacy, "skill", "smem-pad-7c21e9", &twice, &err), KL_OK);
    assert_string_equal(once, twice);
    kl_skill_free(ca);
    kl_store_close(legacy);
    free(a), free(canon), free(once), free(twice);
}

/* A condition learned by probing one lineage stays when the other lineage's card was never
 * probed; a static one both do not share, or a probed one the other's probes did not find,
 * becomes a contradiction. */
static void probed_conditions_survive_unprobed_evidence(void **state)
{
    (void)state;
    const char *probed =
        "{\"id\":\"x-1\",\"transform\":\"x\",\"preconditions\":[{\"predicate\":\"n >= 4096\",\"kind\":\"probed-perf\"},"
        "{\"predicate\":\"w == 4\",\"kind\":\"static\"}],\"probes\":{\"count\":2,\"failures\":1},"
        "\"evidence\":{\"lineages\":[\"L1\"]}}";
    const char *unprobed = "{\"id\":\"x-1\",\"transform\":\"x\",\"preconditions\":[{\"predicate\":\"w == 8\",\"kind\":\"static\"}],"
                           "\"probes\":{\"count\":0},\"evidence\":{\"lineages\":[\"L2\"]}}";
    const char *probed_other = "{\"id\":\"x-1\",\"transform\":\"x\",\"preconditions\":[],"
                               "\"probes\":{\"count\":2,\"failures\":0},\"evidence\":{\"lineages\":[\"L3\"]}}";
    kl_error err = {0};
    for (int order = 0; order < 2; order++) {
        char *m = NULL;
        assert_int_equal(kl_skill_merge(order ? unprobed : probed, order ? probed : unprobed, &m, &err), KL_OK);
        assert_non_null(strstr(m, "\"n >= 4096\""));
        json_t *d = json_loads(m, 0, NULL);
        json_t *pre = json_object_get(d, "preconditions");
        assert_int_equal(json_array_size(pre), 1); /* n >= 4096 kept; w == 4 / w == 8 disagree */
        assert_string_equal(json_string_value(json_object_get(json_array_get(pre, 0), "predicate")), "n >= 4096");
        assert_int_equal(json_array_size(json_object_get(d, "contradictions")), 2);
        json_decref(d);
        free(m);
    }
    char *m = NULL;
    assert_int_equal(kl_skill_merge(probed, probed_other, &m, &err), KL_OK);
    json_t *d = json_loads(m, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(d, "preconditions")), 0); /* probed elsewhere, not found */
    json_decref(d);
    free(m);
}

/* A condition with many sites of evidence shows the first four in Markdown, then a count. */
static void long_evidence_is_cut_in_markdown(void **state)
{
    (void)state;
    const char *card = "{\"id\":\"x-2\",\"transform\":\"x\",\"preconditions\":[{\"predicate\":\"w == 4\",\"kind\":\"static\","
                       "\"evidence\":[\"s1\",\"s2\",\"s3\",\"s4\",\"s5\",\"s6\",\"s7\"]}]}";
    kl_skill *c = NULL;
    kl_error err = {0};
    assert_int_equal(kl_skill_parse(card, "t", &c, &err), KL_OK);
    char *md = kl_skill_markdown(c, 1);
    assert_non_null(strstr(md, "  - s4\n  - … and 3 more\n"));
    assert_null(strstr(md, "s5"));
    free(md);
    char *json = kl_skill_to_json(c);
    assert_non_null(strstr(json, "\"s7\"")); /* the JSON keeps all */
    free(json);
    kl_skill_free(c);
}

static void import_validates_every_card_first(void **state)
{
    fixture *f = *state;
    kl_error err = {0};
    char *dir = NULL;
    assert_int_equal(kl_tempdir("skills", &dir, &err), KL_OK);
    char *path = kl_path_join(dir, "cards.json");
    /* the third card is broken: nothing lands */
    char *v = read_data("vectorize.json"), *u = read_data("unroll.json");
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "[%s, %s, {\"id\": \"bad-1\", \"transform\": \"t\", \"risks\": [{\"broke\": \"oops\"}]}]", v, u);
    assert_int_equal(kl_file_write(path, sb.buf, sb.len, &err), KL_OK);
    unsigned n = 99, merged = 99;
    assert_int_equal(kl_skill_import(f->store, path, &n, &merged, &err), KL_ERR_INVALID);
    assert_int_equal(n, 0);
    char want[1200];
    kl_snprintf(want, sizeof want, "%s: [2].risks[0].broke: \"oops\" is not one of wrong, slower, crash, compile", path);
    assert_string_equal(err.message, want);
    kl_skill_list list = KL_SKILL_LIST_INIT;
    assert_int_equal(kl_skill_list_load(f->store, &list, &err), KL_OK);
    assert_int_equal(list.count, 0);
    kl_skill_list_release(&list);
    /* a valid array lands; a second import meets the stored cards */
    kl_strbuf_reset(&sb);
    kl_strbuf_addf(&sb, "[%s, %s]", v, u);
    assert_int_equal(kl_file_write(path, sb.buf, sb.len, &err), KL_OK);
    assert_int_equal(kl_skill_import(f->store, path, &n, &merged, &err), KL_OK);
    assert_int_equal(n, 2);
    assert_int_equal(merged, 0);
    assert_int_equal(kl_skill_import(f->store, path, &n, NULL, &err), KL_OK);
    assert_int_equal(n, 2);
    /* one card alone (an object), merging with what is there */
    char *b = read_data("smem-pad-b.json");
    put(f->store, "smem-pad-a.json");
    assert_int_equal(kl_file_write(path, b, strlen(b), &err), KL_OK);
    assert_int_equal(kl_skill_import(f->store, path, &n, &merged, &err), KL_OK);
    assert_int_equal(n, 1);
    assert_int_equal(merged, 1);
    assert_int_equal(kl_skill_list_load(f->store, &list, &err), KL_OK);
    assert_int_equal(list.count, 3);
    kl_skill_list_release(&list);
    /* not a card at all; not JSON; missing */
    assert_int_equal(kl_file_write(path, "42", 2, &err), KL_OK);
    assert_int_equal(kl_skill_import(f->store, path, &n, NULL, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "expected a card (an object) or an array of cards"));
    assert_int_equal(kl_file_write(path, "[{", 2, &err), KL_OK);
    assert_int_equal(kl_skill_import(f->store, path, &n, NULL, &err), KL_ERR_PARSE);
    assert_non_null(strstr(err.message, "cards.json:1:"));
    char *missing = kl_path_join(dir, "none.json");
    assert_int_equal(kl_skill_import(f->store, missing, &n, NULL, &err), KL_ERR_NOT_FOUND);
    free(missing);
    kl_strbuf_release(&sb);
    free(v), free(u), free(b), free(path);
    assert_int_equal(kl_remove_tree(dir, &err), KL_OK);
    free(dir);
}

/* The cards the backward walk extracts (src/lineage/extract.c) validate: the contract
 * between the walk and this library. */
static void extracted_cards_validate(void **state)
{
    fixture *f = *state;
    const char *doc =
        "{\"format\":\"klineage-lineage-1\",\"key\":\"abc123\",\"task\":\"vadd\",\"expert\":\"expert.cu\","
        "\"rewriter\":\"rules\",\"bench\":{\"n\":1048576},\"steps\":["
        "{\"transform\":\"vectorize\",\"site\":\"k:3:5\",\"note\":\"float4 loads\",\"params\":{\"width\":4},"
        " \"features\":{\"dtype\":\"f32\",\"depth\":1},\"diff\":{\"before\":\"a\\n\",\"after\":\"b\\n\"},"
        " \"speedup\":0.5,\"cand_ms\":2.0,\"base_ms\":1.0,\"device\":\"H200\",\"date\":\"2026-11-29\",\"verdict\":\"v1\","
        " \"conditions\":[{\"predicate\":\"n % 4 == 0\",\"kind\":\"probed\",\"verified\":true,\"because\":\"x\","
        "   \"evidence\":[\"wrong at n=3\"]},{\"predicate\":null,\"kind\":\"unexplained\",\"verified\":false,"
        "   \"because\":\"y\",\"evidence\":[]}],"
        " \"probes\":[{\"shape\":{\"n\":3},\"pass\":false,\"broke\":\"wrong\",\"stage\":\"correct\",\"reason\":\"r\","
        "   \"verdict\":\"v2\"},{\"shape\":{\"n\":1024},\"pass\":true,\"speedup\":1.3,\"verdict\":\"v3\","
        "   \"device\":\"H200\",\"date\":\"2026-11-29\"}]},"
        "{\"transform\":\"unroll\",\"site\":\"k:4:5\",\"note\":\"\",\"params\":{},\"features\":{\"loop_var\":\"i\"},"
        " \"speedup\":-1,\"verdict\":\"\",\"probes\":[]}]}";
    kl_extract_stats xs;
    kl_error err = {0};
    if (kl_lineage_extract_skills(f->store, NULL, doc, &xs, &err) != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(xs.steps, 2);
    assert_int_equal(xs.new_cards, 2);
    kl_skill_list list = KL_SKILL_LIST_INIT;
    if (kl_skill_list_load(f->store, &list, &err) != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(list.count, 2);
    assert_string_equal(kl_skill_transform(list.items[0]), "unroll");
    assert_string_equal(kl_skill_transform(list.items[1]), "vectorize");
    kl_skill_summary s;
    kl_skill_summarize(list.items[1], &s);
    assert_int_equal(s.nprobed, 1);
    assert_int_equal(s.nrisks, 1);
    assert_true(s.best_gain > 1.99 && s.best_gain < 2.01);
    char *md = kl_skill_markdown(list.items[0], 1);
    assert_non_null(strstr(md, "Not probed: no shape other than those it was learned on was tried."));
    free(md);
    kl_skill_list_release(&list);
}

/* The same transform at sites of one kind is one card: a feature whose value is a name the
 * kernel chose (a loop variable) or a piece of its code is neither a condition nor part of the
 * id; a string (a form) is the kind of site, so another form is another card; a number (a trip
 * count) says where, not when: no condition, and the pattern keeps it only where every site
 * agrees; a word that appears only in a comment is not a name; the card says why a step was
 * not probed. */
static void names_are_not_conditions(void **state)
{
    fixture *f = *state;
    const char *doc =
        "{\"format\":\"klineage-lineage-1\",\"key\":\"k2\",\"task\":\"t\",\"expert\":\"expert.cu\",\"rewriter\":\"rules\","
        "\"bench\":{\"n\":64},\"versions\":[{\"source\":\"// plain loops\\n__global__ void k(float *x) {\\n"
        "  for (int i = 0; i < 4; i++) x[i] = 0;\\n  for (int j = 0; j < 4; j++) x[j] += 1;\\n"
        "  for (int q = 0; q < 8; q++) x[q] *= 2;\\n}\\n\"}],\"steps\":["
        "{\"transform\":\"unroll\",\"site\":\"k:3:3\",\"features\":{\"loop_var\":\"i\",\"trip\":4,\"depth\":1,\"form\":\"plain\","
        " \"bound\":\"n * 4\"}, \"speedup\":1.0,\"verdict\":\"v1\",\"probes\":[],"
        " \"probe_skipped\":\"not probed: the gain (1.000x) is below 1.05x\"},"
        "{\"transform\":\"unroll\",\"site\":\"k:4:3\",\"features\":{\"loop_var\":\"j\",\"trip\":4,\"depth\":1,\"form\":\"plain\"},"
        " \"speedup\":1.0,\"verdict\":\"v2\",\"probes\":[],\"probe_skipped\":\"not probed: the gain (1.000x) is below 1.05x\"},"
        "{\"transform\":\"unroll\",\"site\":\"k:5:3\",\"features\":{\"loop_var\":\"q\",\"trip\":8,\"depth\":1,\"form\":\"plain\"},"
        " \"speedup\":1.0,\"verdict\":\"v3\",\"probes\":[],\"probe_skipped\":\"not probed: the gain (1.000x) is below 1.05x\"},"
        "{\"transform\":\"unroll\",\"site\":\"k:6:3\",\"features\":{\"loop_var\":\"q\",\"trip\":8,\"depth\":1,\"form\":\"nested\"},"
        " \"speedup\":1.0,\"verdict\":\"v4\",\"probes\":[],\"probe_skipped\":\"not probed: the gain (1.000x) is below 1.05x\"}]}";
    kl_extract_stats xs;
    kl_error err = {0};
    if (kl_lineage_extract_skills(f->store, NULL, doc, &xs, &err) != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(xs.steps, 4);
    assert_int_equal(xs.cards, 2);
    kl_skill_list list = KL_SKILL_LIST_INIT;
    if (kl_skill_list_load(f->store, &list, &err) != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(list.count, 2); /* plain (three sites merged) and nested */
    bool saw_merged = false;
    for (size_t c = 0; c < list.count; c++) {
        char *text = kl_skill_to_json(list.items[c]);
        assert_null(strstr(text, "loop_var ==")); /* names are not conditions */
        assert_null(strstr(text, "bound ==")); /* nor code */
        assert_null(strstr(text, "trip ==")); /* nor where a site is */
        assert_non_null(strstr(text, "\"loop_var\"")); /* the anchor keeps them */
        if (strstr(text, "form == \\\"plain\\\"")) { /* a word of a comment is not a name */
            saw_merged = true;
            assert_non_null(strstr(text, "\"v1\"")), assert_non_null(strstr(text, "\"v2\""));
            assert_non_null(strstr(text, "\"v3\""));
            const json_t *d = kl_skill_doc(list.items[c]);
            /* the pattern that finds such sites keeps what the sites had alike */
            json_t *pf = json_object_get(json_object_get(json_object_get(d, "anchor"), "pattern"), "site_features");
            assert_non_null(json_object_get(pf, "depth"));
            assert_null(json_object_get(pf, "trip"));
            /* the lineage path of each site's step, in the one lineage */
            assert_int_equal(json_array_size(json_object_get(json_object_get(d, "path"), "lineages")), 3);
        } else {
            assert_non_null(strstr(text, "form == \\\"nested\\\""));
        }
        free(text);
        char *md = kl_skill_markdown(list.items[c], 1);
        assert_non_null(strstr(md, "Not probed: the gain (1.000x) is below 1.05x"));
        free(md);
    }
    assert_true(saw_merged);
    kl_skill_list_release(&list);
}

/* ---- renderings -------------------------------------------------------------------------------- */

static kl_skill *merged_smem_pad(void)
{
    char *a = read_data("smem-pad-a.json"), *b = read_data("smem-pad-b.json"), *m = NULL;
    kl_error err = {0};
    assert_int_equal(kl_skill_merge(a, b, &m, &err), KL_OK);
    kl_skill *card = NULL;
    if (kl_skill_parse(m, "merged", &card, &err) != KL_OK) fail_msg("%s", err.message);
    free(a), free(b), free(m);
    return card;
}

static void render_goldens(kl_skill *card, const char *stem)
{
    char name[128];
    char *t = kl_skill_markdown(card, 1);
    kl_snprintf(name, sizeof name, "%s.md", stem);
    golden(name, t);
    free(t);
    t = kl_skill_to_json(card);
    kl_snprintf(name, sizeof name, "%s.json", stem);
    golden(name, t);
    /* the JSON rendering reads back as the same card */
    kl_skill *back = NULL;
    kl_error err = {0};
    assert_int_equal(kl_skill_parse(t, "rendered", &back, &err), KL_OK);
    assert_true(json_equal((json_t *)kl_skill_doc(back), (json_t *)kl_skill_doc(card)));
    kl_skill_free(back);
    free(t);
    t = kl_skill_agent_markdown(card);
    kl_snprintf(name, sizeof name, "%s.SKILL.md", stem);
    golden(name, t);
    free(t);
}

static void renderings_match_goldens(void **state)
{
    (void)state;
    kl_skill *v = load_card("vectorize.json"), *u = load_card("unroll.json"), *m = merged_smem_pad();
    render_goldens(v, "vectorize");
    render_goldens(u, "unroll");
    render_goldens(m, "smem-pad-merged");

    /* what the goldens must say, whatever they are regenerated to */
    char *md = kl_skill_markdown(v, 1);
    assert_true(kl_str_starts(md, "# vectorize-3fa2c1: 16-byte vector loads"));
    assert_non_null(strstr(md, "## Where it sits"));
    assert_non_null(strstr(md, "```cuda\n    float m = -INFINITY;"));
    assert_non_null(strstr(md, "## When it is valid"));
    assert_non_null(strstr(md, "- `cols % 4 == 0` — probed"));
    assert_null(strstr(md, "no failure found")); /* it has probed conditions */
    assert_non_null(strstr(md, "| ? | rows=8192, cols=8192 (bench) | 1.62x | – | 0.8100 | 0.5000 | NVIDIA H200, 2026-11-29 | `77a0c3d2` |"));
    assert_null(strstr(md, "## Lineage path")); /* no path recorded: none shown */
    assert_non_null(strstr(md, "## Admission"));
    assert_non_null(strstr(md, "Not tried yet"));
    assert_non_null(strstr(md, "## What broke where the conditions failed"));
    assert_non_null(strstr(md, "- rows=1024, cols=1021: **wrong** — correct: rel_l2 0.41"));
    assert_non_null(strstr(md, "hurt (below 0.95x) in 1")); /* the probe at cols 1021, slower */
    assert_non_null(strstr(md, "(verdict `9c1e0a2b`)"));
    assert_non_null(strstr(md, "## Requires\n\n"));
    assert_null(strstr(md, "## Contradictions"));
    free(md);
    md = kl_skill_markdown(u, 2);
    assert_true(kl_str_starts(md, "## unroll-9b41d0"));
    assert_non_null(strstr(md, "### When it is valid"));
    assert_non_null(strstr(md, "Probed on 6 shapes; no failure found."));
    assert_non_null(strstr(md, "Nothing broke on the 6 shapes probed."));
    free(md);
    md = kl_skill_markdown(m, 1);
    assert_non_null(strstr(md, "## Contradictions"));
    assert_non_null(strstr(md, "- `cols >= 64` held in transpose@1a2b3c but was not found in matmul@9f8e7d"));
    free(md);

    char *agent = kl_skill_agent_markdown(v);
    assert_true(kl_str_starts(agent, "---\nname: vectorize-3fa2c1\ndescription: \"16-byte vector loads"));
    assert_non_null(strstr(agent, "Use when dtype == \\\"f32\\\" and cols % 4 == 0 and rows >= 100, in a kernel "
                                  "that already has row-parallel."));
    char *end = strstr(agent + 4, "\n---\n");
    assert_non_null(end);
    for (const char *p = agent + 4; p < end; p++) /* the front matter: two lines, the description on one */
        if (*p == '\n') assert_true(kl_str_starts(p + 1, "description: "));
    assert_non_null(strstr(agent, "## When to use it"));
    assert_non_null(strstr(agent, "## When not to use it"));
    assert_non_null(strstr(agent, "## How to apply it"));
    assert_non_null(strstr(agent, "## Evidence"));
    free(agent);
    kl_skill_free(v), kl_skill_free(u), kl_skill_free(m);
}

static void library_renders_and_writes_agent_skills(void **state)
{
    (void)state;
    kl_skill *cards[3] = {merged_smem_pad(), load_card("unroll.json"), load_card("vectorize.json")};
    const kl_skill *const *cc = (const kl_skill *const *)cards;
    char *text = NULL;
    kl_error err = {0};
    assert_int_equal(kl_skills_render(cc, 3, KL_SKILL_FORMAT_MARKDOWN, &text, &err), KL_OK);
    golden("library.md", text);
    assert_true(kl_str_starts(text, "# Skill library\n\n3 skills of 3 transforms, from 4 lineages.\n"));
    assert_non_null(strstr(text, "| [vectorize-3fa2c1](#vectorize-3fa2c1) | vectorize |"));
    assert_non_null(strstr(text, "<a id=\"unroll-9b41d0\"></a>\n\n## unroll-9b41d0"));
    free(text);
    assert_int_equal(kl_skills_render(cc, 3, KL_SKILL_FORMAT_JSON, &text, &err), KL_OK);
    golden("library.json", text);
    json_t *arr = json_loads(text, 0, NULL);
    assert_int_equal(json_array_size(arr), 3);
    json_decref(arr);
    free(text);
    assert_int_equal(kl_skills_render(cc, 0, KL_SKILL_FORMAT_MARKDOWN, &text, &err), KL_OK);
    assert_non_null(strstr(text, "No skills yet"));
    free(text);
    assert_int_equal(kl_skills_render(cc, 0, KL_SKILL_FORMAT_JSON, &text, &err), KL_OK);
    assert_string_equal(text, "[]\n");
    free(text);
    assert_int_equal(kl_skills_render(cc, 3, KL_SKILL_FORMAT_AGENT, &text, &err), KL_ERR_INVALID);

    kl_skill_format fmt;
    assert_int_equal(kl_skill_format_parse("agent-skills", &fmt, &err), KL_OK);
    assert_int_equal(fmt, KL_SKILL_FORMAT_AGENT);
    assert_int_equal(kl_skill_format_parse("markdown", &fmt, &err), KL_OK);
    assert_int_equal(fmt, KL_SKILL_FORMAT_MARKDOWN);
    assert_int_equal(kl_skill_format_parse("yaml", &fmt, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "unknown format \"yaml\" (expected json, md or agent-skills)"));

    char *dir = NULL;
    assert_int_equal(kl_tempdir("skills", &dir, &err), KL_OK);
    char *out = kl_path_join(dir, "agent");
    assert_int_equal(kl_skills_write_agent(cc, 3, out, &err), KL_OK);
    const char *names[] = {"smem-pad-7c21e9", "unroll-9b41d0", "vectorize-3fa2c1"};
    for (int i = 0; i < 3; i++) {
        char rel[128];
        kl_snprintf(rel, sizeof rel, "%s/SKILL.md", names[i]);
        char *p = kl_path_join(out, rel), *body = NULL;
        assert_int_equal(kl_file_read(p, 0, &body, NULL, &err), KL_OK);
        char *want = kl_skill_agent_markdown(cards[i]);
        assert_string_equal(body, want);
        free(want), free(body), free(p);
    }
    /* two ids that would share a folder */
    kl_skill *x = NULL, *y = NULL;
    assert_int_equal(kl_skill_parse("{\"id\": \"Tile_A\", \"transform\": \"t\"}", NULL, &x, &err), KL_OK);
    assert_int_equal(kl_skill_parse("{\"id\": \"tile-a\", \"transform\": \"t\"}", NULL, &y, &err), KL_OK);
    char name[72];
    kl_skill_agent_name(x, name, sizeof name);
    assert_string_equal(name, "tile-a");
    const kl_skill *pair[2] = {x, y};
    assert_int_equal(kl_skills_write_agent(pair, 2, out, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "skills Tile_A and tile-a would share the agent-skill folder"));
    kl_skill_free(x), kl_skill_free(y);
    assert_int_equal(kl_remove_tree(dir, &err), KL_OK);
    free(out), free(dir);
    for (int i = 0; i < 3; i++) kl_skill_free(cards[i]);
}


/* ---- forward: observables, matching at a site, leave-one-out, admission --------------------- */

/* The lse_rows test task (tests/data/skills/rows): sizes named batch and width, not rows and cols. */
static kl_task *rows_task(void)
{
    char *dir = data_path("rows");
    kl_task *task = NULL;
    kl_error err = {0};
    if (kl_task_load(dir, &task, &err) != KL_OK) fail_msg("%s", err.message);
    free(dir);
    return task;
}

static kl_source *rows_source(const char *file)
{
    char rel[128];
    kl_snprintf(rel, sizeof rel, "rows/%s", file);
    char *path = data_path(rel);
    kl_source *src = NULL;
    kl_error err = {0};
    if (kl_source_parse_file(path, &src, &err) != KL_OK) fail_msg("%s", err.message);
    free(path);
    return src;
}

static json_int_t obs_int(const json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v)) fail_msg("observable %s is not an integer", k);
    return json_integer_value(v);
}

static const char *obs_str(const json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_string(v)) fail_msg("observable %s is not a string", k);
    return json_string_value(v);
}

/* Sizes by role come from the index analysis, not from the task's size names: one thread per
 * row walks a row of `width` floats (the contiguous and the reduced axis), `batch` rows are
 * independent; the kernel's blocks and threads come from running launch() at the shape. */
static void observables_name_sizes_by_role(void **state)
{
    (void)state;
    kl_task *task = rows_task();
    kl_source *src = rows_source("thread_rows.cu");
    kl_error err = {0};
    json_t *o = NULL;
    if (kl_skill_observe(src, task, NULL, "lse_rows", 0, &o, &err) != KL_OK) fail_msg("%s", err.message);
    assert_string_equal(obs_str(o, "dtype"), "f32");
    assert_int_equal(obs_int(o, "elem_bytes"), 4);
    assert_string_equal(obs_str(o, "access"), "strided"); /* lane to lane: a row apart */
    assert_int_equal(obs_int(o, "contiguous_extent"), 2048);
    assert_int_equal(obs_int(o, "reduced_extent"), 2048);
    assert_int_equal(obs_int(o, "independent_rows"), 4096);
    assert_int_equal(obs_int(o, "block_threads"), 128);
    assert_int_equal(obs_int(o, "grid_blocks"), 32);
    assert_int_equal(obs_int(o, "elements"), 4096 * 2048);
    assert_int_equal(obs_int(o, "bytes_moved"), (4096 * 2048 + 4096) * 4);
    assert_true(json_is_true(json_object_get(o, "reduction")));
    assert_true(json_is_false(json_object_get(o, "dispatch")));
    json_decref(o);
    /* the loop at line 12 moves along the row contiguously; at another shape the sizes follow */
    const kl_shape *check = &task->checks[1]; /* batch 5, width 1023 */
    if (kl_skill_observe(src, task, check, "lse_rows", 12, &o, &err) != KL_OK) fail_msg("%s", err.message);
    assert_string_equal(obs_str(o, "loop_access"), "contiguous");
    assert_true(json_is_true(json_object_get(o, "in_loop")));
    assert_int_equal(obs_int(o, "contiguous_extent"), 1023);
    assert_int_equal(obs_int(o, "independent_rows"), 5);
    assert_int_equal(obs_int(o, "grid_blocks"), 1);
    json_decref(o);
    /* no task: only what needs no sizes */
    if (kl_skill_observe(src, NULL, NULL, "lse_rows", 0, &o, &err) != KL_OK) fail_msg("%s", err.message);
    assert_null(json_object_get(o, "contiguous_extent"));
    assert_string_equal(obs_str(o, "dtype"), "f32");
    json_decref(o);
    assert_int_equal(kl_skill_observe(src, task, NULL, "no_such_kernel", 0, &o, &err), KL_ERR_NOT_FOUND);
    kl_source_free(src);

    /* a dispatch: launch() run at the bench shape (width 2048) takes the long path, through a
     * host helper, a switch and a template argument; the short kernel does not run there, and
     * its sizes are those of the path that launches it */
    src = rows_source("dispatch.cu");
    if (kl_skill_observe(src, task, NULL, "lse_long", 0, &o, &err) != KL_OK) fail_msg("%s", err.message);
    assert_true(json_is_true(json_object_get(o, "dispatch")));
    assert_true(json_is_true(json_object_get(o, "runs_at_shape")));
    assert_string_equal(obs_str(o, "access"), "contiguous"); /* c starts at threadIdx.x */
    assert_int_equal(obs_int(o, "block_threads"), 256);
    assert_int_equal(obs_int(o, "grid_blocks"), 4096);
    assert_int_equal(obs_int(o, "contiguous_extent"), 2048);
    json_decref(o);
    if (kl_skill_observe(src, task, NULL, "lse_short", 0, &o, &err) != KL_OK) fail_msg("%s", err.message);
    assert_true(json_is_false(json_object_get(o, "runs_at_shape")));
    assert_int_equal(obs_int(o, "block_threads"), 128);
    assert_int_equal(obs_int(o, "grid_blocks"), 1024);
    json_decref(o);
    /* at width 4096 the 512-thread instance runs */
    if (kl_skill_observe(src, task, &task->checks[2], "lse_long", 0, &o, &err) != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(obs_int(o, "block_threads"), 512);
    assert_int_equal(obs_int(o, "grid_blocks"), 300);
    json_decref(o);
    /* a device helper is sized by the kernel that calls it */
    if (kl_skill_observe(src, task, NULL, "warp_sum", 0, &o, &err) != KL_OK) fail_msg("%s", err.message);
    assert_string_equal(obs_str(o, "function_kind"), "device");
    assert_int_equal(obs_int(o, "grid_blocks"), 4096);
    json_decref(o);
    kl_source_free(src);
    kl_task_free(task);
}

static kl_skill *card_of(const char *json_text)
{
    kl_skill *card = NULL;
    kl_error err = {0};
    if (kl_skill_parse(json_text, "test card", &card, &err) != KL_OK) fail_msg("%s", err.message);
    return card;
}

static const kl_skill_check *check_of(const kl_skill_match_result *r, const char *predicate)
{
    for (unsigned i = 0; i < r->nchecks; i++)
        if (!strcmp(r->checks[i].predicate, predicate)) return &r->checks[i];
    fail_msg("no check %s", predicate);
    return NULL;
}

/* One call matches a card at a candidate site: static conditions on the site's observables and
 * its own features, speed conditions at the bench shape, correctness conditions at every check
 * shape (a failure names the shape); unknown only for a name nothing computes, and it never
 * passes as holds. */
static void match_at_a_site_evaluates_every_condition_where_it_applies(void **state)
{
    (void)state;
    kl_task *task = rows_task();
    kl_source *src = rows_source("thread_rows.cu");
    kl_error err = {0};
    kl_skill *card = card_of(
        "{\"id\":\"row-parallel-t1\",\"transform\":\"row-parallel\",\"preconditions\":["
        "{\"predicate\":\"access == \\\"strided\\\"\",\"kind\":\"static\"},"
        "{\"predicate\":\"guard == \\\"if-return\\\"\",\"kind\":\"static\"},"
        "{\"predicate\":\"contiguous_extent % 4 == 0\",\"kind\":\"probed\"},"
        "{\"predicate\":\"independent_rows >= 1024\",\"kind\":\"probed-perf\"},"
        "{\"predicate\":\"reduced_extent >= 64\",\"kind\":\"probed\"}]}");
    kl_skill_site site = {"lse_rows", 9, "{\"guard\": \"if-return\"}"};
    const char *present[] = {"unroll"};
    kl_skill_match_result r;
    if (kl_skill_match_site(card, src, task, &site, NULL, present, 1, &r, &err) != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(r.nchecks, 5);
    assert_int_equal(check_of(&r, "access == \"strided\"")->truth, KL_TRUTH_HOLDS);
    assert_string_equal(check_of(&r, "access == \"strided\"")->shape, "");
    assert_int_equal(check_of(&r, "guard == \"if-return\"")->truth, KL_TRUTH_HOLDS); /* the site's own feature */
    /* correctness at every check shape: width 1 is the first that is not a multiple of 4 */
    const kl_skill_check *m4 = check_of(&r, "contiguous_extent % 4 == 0");
    assert_int_equal(m4->truth, KL_TRUTH_FAILS);
    assert_string_equal(m4->shape, "check[0] {batch=1, width=1}");
    assert_non_null(strstr(m4->why, "contiguous_extent = 1"));
    /* speed at the bench shape */
    const kl_skill_check *rows = check_of(&r, "independent_rows >= 1024");
    assert_int_equal(rows->truth, KL_TRUTH_HOLDS);
    assert_string_equal(rows->shape, "bench {batch=4096, width=2048}");
    /* width 1 at check[0] is below 64 */
    assert_int_equal(check_of(&r, "reduced_extent >= 64")->truth, KL_TRUTH_FAILS);
    assert_int_equal(r.truth, KL_TRUTH_FAILS);
    assert_non_null(r.observables);
    assert_int_equal(obs_int(r.observables, "contiguous_extent"), 2048);
    kl_skill_match_release(&r);
    kl_skill_free(card);

    /* every condition holds; a required transform present; then one the kernel lacks */
    card = card_of("{\"id\":\"x-t2\",\"transform\":\"x\",\"requires\":[\"unroll\"],\"preconditions\":["
                   "{\"predicate\":\"dtype == \\\"f32\\\"\",\"kind\":\"static\"},"
                   "{\"predicate\":\"contiguous_extent >= 1\",\"kind\":\"probed\"}]}");
    if (kl_skill_match_site(card, src, task, &site, NULL, present, 1, &r, &err) != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(r.truth, KL_TRUTH_HOLDS);
    assert_string_equal(check_of(&r, "contiguous_extent >= 1")->shape, "every check shape and the bench shape");
    kl_skill_match_release(&r);
    if (kl_skill_match_site(card, src, task, &site, NULL, NULL, 0, &r, &err) != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(r.truth, KL_TRUTH_UNKNOWN); /* present transforms not known */
    kl_skill_match_release(&r);
    kl_skill_free(card);

    /* a name nothing computes is unknown, and says so; the caller's extra values fill it in */
    card = card_of("{\"id\":\"y-t3\",\"transform\":\"y\",\"preconditions\":["
                   "{\"predicate\":\"arch >= 90\",\"kind\":\"static\"}]}");
    if (kl_skill_match_site(card, src, task, &site, NULL, NULL, 0, &r, &err) != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(r.truth, KL_TRUTH_UNKNOWN);
    assert_non_null(strstr(r.checks[0].why, "arch is not in the environment"));
    kl_skill_match_release(&r);
    json_t *extra = json_pack("{s:i}", "arch", 90);
    if (kl_skill_match_site(card, src, task, &site, extra, NULL, 0, &r, &err) != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(r.truth, KL_TRUTH_HOLDS);
    kl_skill_match_release(&r);
    json_decref(extra);
    kl_skill_free(card);
    /* a feature of the kind of site the card was learned at, absent from this site's features:
     * a site of another kind, so the condition fails (it is not unknown) */
    card = card_of("{\"id\":\"z-t4\",\"transform\":\"z\",\"anchor\":{\"pattern\":{\"site_features\":"
                   "{\"form\":\"grid-stride\"}}},\"preconditions\":["
                   "{\"predicate\":\"form == \\\"grid-stride\\\"\",\"kind\":\"static\"}]}");
    if (kl_skill_match_site(card, src, task, &site, NULL, NULL, 0, &r, &err) != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(r.truth, KL_TRUTH_FAILS);
    assert_non_null(strstr(r.checks[0].why, "the site's features have no form"));
    kl_skill_match_release(&r);
    /* bad site features are an error naming the site */
    kl_skill_site bad = {"lse_rows", 9, "[1, 2]"};
    assert_int_equal(kl_skill_match_site(card, src, task, &bad, NULL, NULL, 0, &r, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "lse_rows:9"));
    kl_skill_free(card);
    kl_source_free(src);
    kl_task_free(task);
}

static void put_text(kl_store *store, const char *text)
{
    kl_error err = {0};
    if (kl_skill_put(store, text, &err) != KL_OK) fail_msg("%s", err.message);
}

/* Leave-one-out: the library rebuilt from the parts of the other tasks' lineages, the store
 * untouched; an admission keeps only the trials on other tasks. */
static void library_without_a_task_is_rebuilt_from_the_other_parts(void **state)
{
    fixture *f = *state;
    kl_error err = {0};
    put_text(f->store, "{\"id\":\"v-1\",\"transform\":\"v\",\"preconditions\":[{\"predicate\":\"dtype == \\\"f32\\\"\","
                       "\"kind\":\"static\"},{\"predicate\":\"access == \\\"strided\\\"\",\"kind\":\"static\"}],"
                       "\"effect\":[{\"speedup\":2.0,\"label\":\"bench\",\"task\":\"alpha\"}],"
                       "\"evidence\":{\"task\":\"alpha\",\"lineages\":[\"LA\"]}}");
    put_text(f->store, "{\"id\":\"v-1\",\"transform\":\"v\",\"preconditions\":[{\"predicate\":\"dtype == \\\"f32\\\"\","
                       "\"kind\":\"static\"}],\"effect\":[{\"speedup\":1.5,\"label\":\"bench\",\"task\":\"beta\"}],"
                       "\"evidence\":{\"task\":\"beta\",\"lineages\":[\"LB\"]}}");
    put_text(f->store, "{\"id\":\"w-1\",\"transform\":\"w\",\"evidence\":{\"task\":\"alpha\",\"lineages\":[\"LA\"]}}");
    assert_int_equal(kl_skill_admission_put(f->store, "v-1",
                                            "{\"status\":\"untried\",\"trials\":["
                                            "{\"task\":\"alpha\",\"site\":\"k:3\",\"gain\":1.9,\"verdict\":\"reproduced\"},"
                                            "{\"task\":\"beta\",\"site\":\"q:7\",\"gain\":0.8,\"verdict\":\"lost\"}]}",
                                            &err),
                     KL_OK);
    kl_skill_list all = KL_SKILL_LIST_INIT, loo = KL_SKILL_LIST_INIT;
    if (kl_skill_list_load(f->store, &all, &err) != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(all.count, 2);
    /* the stored card: merged, admitted (a trial reproduced its gain) */
    const json_t *v = kl_skill_doc(all.items[0]);
    assert_string_equal(json_string_value(json_object_get(json_object_get(v, "admission"), "status")), "admitted");
    assert_int_equal(json_array_size(json_object_get(v, "preconditions")), 1); /* access: one side only */
    if (kl_skill_list_load_excluding(f->store, "alpha", &loo, &err) != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(loo.count, 1); /* w-1 came from alpha alone */
    const json_t *lv = kl_skill_doc(loo.items[0]);
    assert_string_equal(json_string_value(json_object_get(json_object_get(lv, "evidence"), "task")), "beta");
    assert_int_equal(json_array_size(json_object_get(lv, "effect")), 1);
    assert_int_equal(json_array_size(json_object_get(lv, "contradictions")), 0);
    json_t *adm = json_object_get(lv, "admission");
    assert_string_equal(json_string_value(json_object_get(adm, "status")), "rejected");
    assert_int_equal(json_array_size(json_object_get(adm, "trials")), 1);
    kl_skill_list_release(&loo);
    /* the store did not change */
    kl_skill_list again = KL_SKILL_LIST_INIT;
    if (kl_skill_list_load(f->store, &again, &err) != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(again.count, 2);
    char *a = kl_skill_to_json(all.items[0]), *b = kl_skill_to_json(again.items[0]);
    assert_string_equal(a, b);
    free(a), free(b);
    /* only the admitted cards */
    kl_skill_list_keep_admitted(&again);
    assert_int_equal(again.count, 1);
    assert_string_equal(kl_skill_id(again.items[0]), "v-1");
    kl_skill_list_release(&again);
    /* storing a lineage again keeps the admission */
    put_text(f->store, "{\"id\":\"v-1\",\"transform\":\"v\",\"preconditions\":[{\"predicate\":\"dtype == \\\"f32\\\"\","
                       "\"kind\":\"static\"}],\"effect\":[{\"speedup\":1.6,\"label\":\"bench\",\"task\":\"beta\"}],"
                       "\"evidence\":{\"task\":\"beta\",\"lineages\":[\"LB\"]}}");
    kl_skill *c = NULL;
    assert_int_equal(kl_skill_get(f->store, "v-1", &c, &err), KL_OK);
    assert_string_equal(json_string_value(json_object_get(json_object_get(kl_skill_doc(c), "admission"), "status")),
                        "admitted");
    kl_skill_free(c);
    /* excluding no task is the whole library; a bad trial is refused and changes nothing */
    if (kl_skill_list_load_excluding(f->store, NULL, &loo, &err) != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(loo.count, 2);
    kl_skill_list_release(&loo);
    assert_int_equal(kl_skill_admission_put(f->store, "v-1", "{\"status\":\"x\",\"trials\":[{\"verdict\":\"maybe\"}]}", &err),
                     KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "admission.trials[0].verdict"));
    assert_int_equal(kl_skill_admission_put(f->store, "nope", "{}", &err), KL_ERR_NOT_FOUND);
    assert_int_equal(kl_skill_get(f->store, "v-1", &c, &err), KL_OK);
    assert_string_equal(json_string_value(json_object_get(json_object_get(kl_skill_doc(c), "admission"), "status")),
                        "admitted");
    kl_skill_free(c);
    kl_skill_list_release(&all);
    /* the verdict of a trial: >= 1.0 and within the tolerance of the recorded gain */
    assert_string_equal(kl_admission_verdict(1.3, 1.5), "reproduced");
    assert_string_equal(kl_admission_verdict(1.1, 1.5), "lost");
    assert_string_equal(kl_admission_verdict(0.99, 1.0), "lost");
    assert_string_equal(kl_admission_verdict(3.0, 1.5), "reproduced");
    assert_string_equal(kl_admission_verdict(1.0, -1), "reproduced");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_names_the_key_in_every_error),
        cmocka_unit_test(summary_counts_what_list_shows),
        cmocka_unit_test(predicates_compare_each_way),
        cmocka_unit_test(predicate_parse_reads_the_syntax),
        cmocka_unit_test(match_combines_conditions_and_requires),
        cmocka_unit_test(merge_keeps_agreement_adds_evidence_and_shows_contradictions),
        cmocka_unit_test_setup_teardown(store_round_trip_get_list_and_prefixes, setup, teardown),
        cmocka_unit_test_setup_teardown(put_merges_cards_of_other_lineages, setup, teardown),
        cmocka_unit_test_setup_teardown(put_again_is_idempotent, setup, teardown),
        cmocka_unit_test(probed_conditions_survive_unprobed_evidence),
        cmocka_unit_test(long_evidence_is_cut_in_markdown),
        cmocka_unit_test_setup_teardown(import_validates_every_card_first, setup, teardown),
        cmocka_unit_test_setup_teardown(extracted_cards_validate, setup, teardown),
        cmocka_unit_test_setup_teardown(names_are_not_conditions, setup, teardown),
        cmocka_unit_test(renderings_match_goldens),
        cmocka_unit_test(library_renders_and_writes_agent_skills),
        cmocka_unit_test(observables_name_sizes_by_role),
        cmocka_unit_test(match_at_a_site_evaluates_every_condition_where_it_applies),
        cmocka_unit_test_setup_teardown(library_without_a_task_is_rebuilt_from_the_other_parts, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
