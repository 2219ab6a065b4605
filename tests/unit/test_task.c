/* src/task: expressions, task.json validation (one fault per case), launch() signatures,
 * deterministic inputs and their codecs, the float64 reference and the weak-reference probe. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "klineage/task.h"
#include "task/task_int.h"
#include "util/util.h"

/* ---- helpers -------------------------------------------------------------------------------- */

static char *data_path(const char *rel)
{
    const char *base = getenv("KL_TEST_DATA");
    assert_non_null(base);
    return kl_path_join(base, rel);
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char *p = kl_path_join(dir, name);
    kl_error err = {0};
    assert_int_equal(kl_file_write(p, text, strlen(text), &err), KL_OK);
    free(p);
}

static void remove_file(const char *dir, const char *name)
{
    char *p = kl_path_join(dir, name);
    unlink(p);
    free(p);
}

/* base with the first occurrence of `from` replaced by `to` (new string). */
static char *replace_once(const char *base, const char *from, const char *to)
{
    const char *at = strstr(base, from);
    if (!at) fail_msg("test bug: '%s' is not in the base task", from);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_add(&sb, base, (size_t)(at - base));
    kl_strbuf_adds(&sb, to);
    kl_strbuf_adds(&sb, at + strlen(from));
    return kl_strbuf_detach(&sb, NULL);
}

static const char *const BASE_JSON =
    "{\n"
    "  \"name\": \"vadd\",\n"
    "  \"summary\": \"c = a + b\",\n"
    "  \"sizes\": [\"n\"],\n"
    "  \"args\": [\n"
    "    {\"name\": \"a\", \"type\": \"f32*\", \"shape\": \"n\", \"role\": \"in\", \"init\": {\"dist\": \"normal\", "
    "\"mean\": 0, \"std\": 1}},\n"
    "    {\"name\": \"b\", \"type\": \"f32*\", \"shape\": \"n\", \"role\": \"in\", \"init\": {\"dist\": \"uniform\", "
    "\"lo\": -1, \"hi\": 1}},\n"
    "    {\"name\": \"c\", \"type\": \"f32*\", \"shape\": \"n\", \"role\": \"out\"},\n"
    "    {\"name\": \"n\", \"type\": \"int\", \"value\": \"n\"}\n"
    "  ],\n"
    "  \"shapes\": {\"bench\": {\"n\": 16777216}, \"check\": [{\"n\": 1}, {\"n\": 1000}, {\"n\": 1048576}]},\n"
    "  \"tolerance\": {\"rel_l2\": 1e-6},\n"
    "  \"cost\": {\"flops\": \"n\", \"bytes\": \"12*n\"},\n"
    "  \"naive\": \"naive.cu\"\n"
    "}\n";

static const char *const GOOD_REF =
    "void reference(const double *a, const double *b, double *c, int n)\n"
    "{\n"
    "    for (int i = 0; i < n; i++) c[i] = a[i] + b[i];\n"
    "}\n";

static const char *const GOOD_CU =
    "__global__ void k(const float *a, const float *b, float *c, int n)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) c[i] = a[i] + b[i];\n"
    "}\n"
    "extern \"C\" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)\n"
    "{\n"
    "    k<<<(n + 255) / 256, 256, 0, stream>>>(a, b, c, n);\n"
    "}\n";

typedef struct fixture {
    char *dir;
} fixture;

static int setup_dir(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    kl_error err = {0};
    if (kl_tempdir("test-task", &f->dir, &err) != KL_OK) return -1;
    *state = f;
    return 0;
}

static int teardown_dir(void **state)
{
    fixture *f = *state;
    kl_remove_tree(f->dir, NULL);
    free(f->dir);
    free(f);
    return 0;
}

/* Write a task (json, reference, naive.cu) into dir and validate it. */
static kl_status validate(const char *dir, const char *json, const char *ref, const char *cu, kl_task **task,
                          kl_task_faults *faults)
{
    write_file(dir, "task.json", json);
    if (ref) write_file(dir, "reference.c", ref);
    else remove_file(dir, "reference.c");
    if (cu) write_file(dir, "naive.cu", cu);
    else remove_file(dir, "naive.cu");
    kl_error err = {0};
    return kl_task_validate(dir, task, faults, &err);
}

static const kl_task_fault *find_fault(const kl_task_faults *f, const char *key, const char *reason_part)
{
    for (unsigned i = 0; i < f->count; i++)
        if (!strcmp(f->items[i].key, key) && strstr(f->items[i].reason, reason_part)) return &f->items[i];
    return NULL;
}

static void print_faults(const kl_task_faults *f)
{
    for (unsigned i = 0; i < f->count; i++) {
        char *t = kl_task_fault_text(&f->items[i]);
        print_message("  fault: %s\n", t);
        free(t);
    }
}

/* ---- expressions ------------------------------------------------------------------------------ */

static int64_t eval_ok(const char *expr, int64_t n, int64_t m)
{
    const char *names[] = {"n", "m"};
    int64_t values[] = {n, m};
    int64_t v = 0;
    kl_error err = {0};
    kl_status st = kl_expr_eval(expr, names, values, 2, &v, &err);
    if (st != KL_OK) fail_msg("'%s': %s", expr, err.message);
    return v;
}

static kl_status eval_err(const char *expr, int64_t n, kl_error *err)
{
    const char *names[] = {"n", "m"};
    int64_t values[] = {n, 3};
    int64_t v = 0;
    return kl_expr_eval(expr, names, values, 2, &v, err);
}

static void expr_precedence_and_c_semantics(void **state)
{
    (void)state;
    assert_int_equal(eval_ok("2+3*4", 0, 0), 2 + 3 * 4);
    assert_int_equal(eval_ok("(2+3)*4", 0, 0), (2 + 3) * 4);
    assert_int_equal(eval_ok("10-4-3", 0, 0), 10 - 4 - 3);
    assert_int_equal(eval_ok("100/10/5", 0, 0), 100 / 10 / 5);
    assert_int_equal(eval_ok("2*3%4", 0, 0), 2 * 3 % 4);
    assert_int_equal(eval_ok("-2*-3", 0, 0), -2 * -3);
    assert_int_equal(eval_ok("--5", 0, 0), 5);
    assert_int_equal(eval_ok("+7 - -7", 0, 0), 14);
    /* truncation toward zero, remainder with the dividend's sign */
    int64_t a = 7, b = 2, c = 3;
    assert_int_equal(eval_ok("-7/2", 0, 0), -a / b);
    assert_int_equal(eval_ok("7/-2", 0, 0), a / -b);
    assert_int_equal(eval_ok("-7%3", 0, 0), -a % c);
    assert_int_equal(eval_ok("7%-3", 0, 0), a % -c);
    assert_int_equal(eval_ok("-7%-3", 0, 0), -a % -c);
    /* sizes */
    int64_t n = 4097, m = 33;
    assert_int_equal(eval_ok(" n * m + (n - 1) / m ", n, m), n * m + (n - 1) / m);
    assert_int_equal(eval_ok("(n+m-1)/m*m", n, m), (n + m - 1) / m * m);
    assert_int_equal(eval_ok("9223372036854775807", 0, 0), INT64_MAX);
    assert_int_equal(eval_ok("-9223372036854775807-1", 0, 0), INT64_MIN);
}

static void expr_errors_name_the_column(void **state)
{
    (void)state;
    kl_error err = {0};
    /* overflow: found while evaluating, at the operator */
    assert_int_equal(eval_err("n*n", (int64_t)1 << 32, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "column 2"));
    assert_non_null(strstr(err.message, "overflow"));
    assert_int_equal(eval_err("9223372036854775807+1", 0, &err), KL_ERR_INVALID);
    char col[32];
    snprintf(col, sizeof col, "column %zu", strlen("9223372036854775807") + 1);
    assert_non_null(strstr(err.message, col));
    assert_int_equal(eval_err("(-9223372036854775807-1)/-1", 0, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "overflow"));
    assert_int_equal(eval_err("-(-9223372036854775807-1)", 0, &err), KL_ERR_INVALID);
    assert_int_equal(eval_err("99999999999999999999", 0, &err), KL_ERR_PARSE);
    /* division and remainder by zero */
    const char *dz = "n/(n-n)";
    assert_int_equal(eval_err(dz, 5, &err), KL_ERR_INVALID);
    snprintf(col, sizeof col, "column %zu", (size_t)(strchr(dz, '/') - dz) + 1);
    assert_non_null(strstr(err.message, col));
    assert_non_null(strstr(err.message, "division by zero"));
    assert_int_equal(eval_err("n%(m-3)", 5, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "remainder by zero"));
    /* syntax */
    assert_int_equal(eval_err("n*(", 5, &err), KL_ERR_PARSE);
    assert_non_null(strstr(err.message, "column 4"));
    assert_int_equal(eval_err("", 5, &err), KL_ERR_PARSE);
    assert_int_equal(eval_err("3 4", 5, &err), KL_ERR_PARSE);
    assert_non_null(strstr(err.message, "column 3"));
    assert_int_equal(eval_err("1.5", 5, &err), KL_ERR_PARSE);
    assert_int_equal(eval_err("(n", 5, &err), KL_ERR_PARSE);
    assert_non_null(strstr(err.message, "')'"));
    assert_int_equal(eval_err("n)", 5, &err), KL_ERR_PARSE);
    assert_int_equal(eval_err("n & 1", 5, &err), KL_ERR_PARSE);
    assert_int_equal(eval_err("rows", 5, &err), KL_ERR_PARSE);
    assert_non_null(strstr(err.message, "'rows' is not a size"));
    /* nesting is bounded, not a stack overflow */
    kl_strbuf deep = KL_STRBUF_INIT;
    for (int i = 0; i < 10000; i++) kl_strbuf_addc(&deep, '(');
    assert_int_equal(eval_err(kl_strbuf_str(&deep), 5, &err), KL_ERR_PARSE);
    assert_non_null(strstr(err.message, "nested"));
    kl_strbuf_reset(&deep);
    for (int i = 0; i < 10000; i++) kl_strbuf_addc(&deep, '-');
    kl_strbuf_addc(&deep, '1');
    assert_int_equal(eval_err(kl_strbuf_str(&deep), 5, &err), KL_ERR_PARSE);
    kl_strbuf_release(&deep);
}

/* ---- validation ------------------------------------------------------------------------------- */

static void good_task_loads(void **state)
{
    fixture *f = *state;
    kl_task_faults faults = KL_TASK_FAULTS_INIT;
    kl_task *t = NULL;
    kl_status st = validate(f->dir, BASE_JSON, GOOD_REF, GOOD_CU, &t, &faults);
    print_faults(&faults);
    assert_int_equal(st, KL_OK);
    assert_int_equal(faults.count, 0);
    assert_string_equal(t->name, "vadd");
    assert_int_equal(t->nsizes, 1);
    assert_int_equal(t->nargs, 4);
    assert_int_equal(t->args[0].dtype, KL_DTYPE_F32);
    assert_int_equal(t->args[0].init.dist, KL_DIST_NORMAL);
    assert_int_equal(t->args[1].init.dist, KL_DIST_UNIFORM);
    assert_int_equal(t->args[2].role, KL_ROLE_OUT);
    assert_int_equal(t->args[3].dtype, KL_DTYPE_NONE);
    assert_int_equal(t->nchecks, 3);
    assert_string_equal(t->checks[2].label, "check[2]");
    assert_int_equal(t->bench.values[0], 16777216);
    assert_true(t->rel_l2 > 0 && t->max_abs < 0 && !t->exact);
    assert_string_equal(t->reference, "reference.c");
    assert_ptr_equal(kl_task_shape(t, "check[1]"), &t->checks[1]);
    assert_ptr_equal(kl_task_shape(t, "bench"), &t->bench);
    assert_null(kl_task_shape(t, "check[3]"));
    int64_t count;
    kl_error err = {0};
    assert_int_equal(kl_task_arg_count(t, &t->checks[1], 0, &count, &err), KL_OK);
    assert_int_equal(count, 1000);
    assert_int_equal(kl_task_arg_count(t, &t->checks[1], 3, &count, &err), KL_ERR_INVALID);
    int v;
    assert_int_equal(kl_task_arg_value(t, &t->checks[2], 3, &v, &err), KL_OK);
    assert_int_equal(v, 1048576);
    int64_t bytes;
    assert_int_equal(kl_task_eval(t, &t->bench, t->cost_bytes, &bytes, &err), KL_OK);
    assert_int_equal(bytes, 12 * t->bench.values[0]);
    kl_task_free(t);
    kl_task_faults_release(&faults);

    /* the same through kl_task_load */
    assert_int_equal(kl_task_load(f->dir, &t, &err), KL_OK);
    kl_task_free(t);
    kl_task_free(NULL);
}

typedef struct json_case {
    const char *from, *to; /* the mutation of BASE_JSON */
    const char *key;       /* the fault expected */
    const char *reason;    /* a part of its reason */
} json_case;

static const json_case json_cases[] = {
    {"\"name\": \"vadd\",", "\"name\": \"vadd\", \"colour\": \"blue\",", "colour", "unknown key"},
    {"\"name\": \"vadd\"", "\"name\": 3", "name", "expected a string"},
    {"\"name\": \"vadd\",", "", "name", "missing"},
    {"\"sizes\": [\"n\"]", "\"sizes\": \"n\"", "sizes", "expected an array"},
    {"\"sizes\": [\"n\"]", "\"sizes\": [\"n\", \"n\"]", "sizes[1]", "duplicate"},
    {"\"sizes\": [\"n\"]", "\"sizes\": [\"n\", \"2x\"]", "sizes[1]", "not a name"},
    {"\"sizes\": [\"n\"]", "\"sizes\": [\"n\", \"m\"]", "shapes.check[1]", "missing a value for size \"m\""},
    {"{\"n\": 1000}", "{\"n\": 1000, \"k\": 2}", "shapes.check[1].k", "is not a size"},
    {"{\"n\": 1000}", "{\"n\": 0}", "shapes.check[1].n", "positive"},
    {"{\"n\": 1000}", "{\"n\": -5}", "shapes.check[1].n", "positive"},
    {"{\"n\": 1000}", "{\"n\": 10.5}", "shapes.check[1].n", "expected a positive integer"},
    {"{\"n\": 1000}", "{\"n\": \"1000\"}", "shapes.check[1].n", "expected a positive integer"},
    {"\"check\": [", "\"chek\": [], \"check\": [", "shapes.chek", "unknown key"},
    {"\"bench\": {\"n\": 16777216}, ", "", "shapes.bench", "missing"},
    {"\"check\": [{\"n\": 1}, {\"n\": 1000}, {\"n\": 1048576}]", "\"check\": []", "shapes.check", "empty"},
    {"\"shape\": \"n\", \"role\": \"in\", \"init\": {\"dist\": \"normal\"",
     "\"shape\": \"n*(\", \"role\": \"in\", \"init\": {\"dist\": \"normal\"", "args[0].shape", "column 4"},
    {"\"shape\": \"n\", \"role\": \"in\", \"init\": {\"dist\": \"normal\"",
     "\"shape\": \"n*rows\", \"role\": \"in\", \"init\": {\"dist\": \"normal\"", "args[0].shape", "'rows' is not a size"},
    {"\"shape\": \"n\", \"role\": \"in\", \"init\": {\"dist\": \"normal\"",
     "\"shape\": \"n*n*n*n\", \"role\": \"in\", \"init\": {\"dist\": \"normal\"", "args[0].shape", "overflows int64"},
    {"\"shape\": \"n\", \"role\": \"in\", \"init\": {\"dist\": \"normal\"",
     "\"shape\": \"n-1\", \"role\": \"in\", \"init\": {\"dist\": \"normal\"", "args[0].shape", "is 0 at check[0]"},
    {"\"shape\": \"n\", \"role\": \"in\", \"init\": {\"dist\": \"normal\"",
     "\"shape\": [1], \"role\": \"in\", \"init\": {\"dist\": \"normal\"", "args[0].shape", "found an array"},
    {"{\"name\": \"b\"", "{\"name\": \"a\"", "args[1].name", "duplicate argument name \"a\""},
    {"{\"name\": \"b\"", "{\"name\": \"b-1\"", "args[1].name", "not a C identifier"},
    {"\"type\": \"f32*\"", "\"type\": \"f31*\"", "args[0].type", "unknown type \"f31*\""},
    {"\"type\": \"f32*\"", "\"type\": 32", "args[0].type", "expected a string"},
    {"\"role\": \"out\"", "\"role\": \"output\"", "args[2].role", "unknown role"},
    {"\"role\": \"out\"", "\"role\": \"out\", \"init\": {\"dist\": \"normal\"}", "args[2].init", "is not filled"},
    {"\"role\": \"out\"", "\"role\": \"in\", \"init\": {\"dist\": \"normal\"}", "args", "no output"},
    {", \"init\": {\"dist\": \"normal\", \"mean\": 0, \"std\": 1}", "", "args[0].init", "missing"},
    {"\"dist\": \"normal\"", "\"dist\": \"gauss\"", "args[0].init.dist", "unknown distribution"},
    {"\"std\": 1}", "\"std\": -1}", "args[0].init.std", "must be positive"},
    {"\"std\": 1}", "\"std\": \"1\"}", "args[0].init.std", "expected a number"},
    {"\"std\": 1}", "\"std\": 1, \"sigma\": 2}", "args[0].init.sigma", "unknown key"},
    {"\"hi\": 1}", "\"hi\": \"k\"}", "args[1].init.hi", "'k' is not a size"},
    {"\"hi\": 1}", "\"hi\": \"n/(n-n)\"}", "args[1].init.hi", "division by zero"},
    {"\"hi\": 1}", "\"hi\": -1}", "args[1].init", "less than"},
    {"\"lo\": -1, ", "", "args[1].init.lo", "missing"},
    {"\"dist\": \"uniform\", \"lo\": -1, \"hi\": 1", "\"dist\": \"int_uniform\", \"lo\": -1.5, \"hi\": 1",
     "args[1].init.lo", "integers"},
    {"\"type\": \"int\", \"value\": \"n\"", "\"type\": \"int\"", "args[3].value", "missing"},
    {"\"type\": \"int\", \"value\": \"n\"", "\"type\": \"int\", \"value\": \"n*n\"", "args[3].value", "C int"},
    {"\"type\": \"int\", \"value\": \"n\"", "\"type\": \"int\", \"value\": \"n\", \"role\": \"in\"", "args[3].role",
     "unknown key"},
    {"\"tolerance\": {\"rel_l2\": 1e-6}", "\"tolerance\": {\"rel_l2\": \"1e-6\"}", "tolerance.rel_l2",
     "expected a number"},
    {"\"tolerance\": {\"rel_l2\": 1e-6}", "\"tolerance\": {\"rel_l2\": 0}", "tolerance.rel_l2", "(0, 1)"},
    {"\"tolerance\": {\"rel_l2\": 1e-6}", "\"tolerance\": {\"exact\": false}", "tolerance.exact", "expected true"},
    {"\"tolerance\": {\"rel_l2\": 1e-6}", "\"tolerance\": {\"exact\": true, \"rel_l2\": 1e-6}", "tolerance",
     "takes no rel_l2"},
    {"\"tolerance\": {\"rel_l2\": 1e-6}", "\"tolerance\": {\"max_abs\": 1e-3}", "tolerance.rel_l2", "missing"},
    {"\"tolerance\": {\"rel_l2\": 1e-6},", "", "tolerance", "missing"},
    {"\"flops\": \"n\"", "\"flops\": \"n/(n-1)\"", "cost.flops", "division by zero"},
    {"\"flops\": \"n\"", "\"flops\": \"0-n\"", "cost.flops", "not negative"},
    {"\"flops\": \"n\"", "\"flop\": \"n\"", "cost.flop", "unknown key"},
    {"\"naive\": \"naive.cu\"", "\"naive\": \"nope.cu\"", "naive", "does not exist"},
    {"\"naive\": \"naive.cu\"", "\"naive\": \"naive.cu\", \"expert\": \"\"", "expert", "empty file name"},
    {"\"naive\": \"naive.cu\"", "\"naive\": \"naive.cu\", \"reference\": \"ref64.c\"", "reference", "does not exist"},
};

static void every_fault_is_named(void **state)
{
    fixture *f = *state;
    for (size_t i = 0; i < sizeof json_cases / sizeof json_cases[0]; i++) {
        const json_case *c = &json_cases[i];
        char *json = replace_once(BASE_JSON, c->from, c->to);
        kl_task_faults faults = KL_TASK_FAULTS_INIT;
        kl_task *t = NULL;
        kl_status st = validate(f->dir, json, GOOD_REF, GOOD_CU, &t, &faults);
        const kl_task_fault *hit = find_fault(&faults, c->key, c->reason);
        if (st != KL_ERR_INVALID || !hit) {
            print_message("case %zu: expected a fault at '%s' with '%s'; got:\n", i, c->key, c->reason);
            print_faults(&faults);
            fail();
        }
        assert_null(t);
        char *want_file = kl_path_join(f->dir, "task.json");
        if (strcmp(c->key, "reference") && strcmp(c->key, "naive")) assert_string_equal(hit->file, want_file);
        free(want_file);
        kl_task_faults_release(&faults);
        free(json);
    }
}

static void expressions_are_checked_on_every_shape(void **state)
{
    fixture *f = *state;
    /* n*n*n*n overflows at n = 1048576 (check[2]) and at bench: two faults, one per shape */
    char *json = replace_once(BASE_JSON, "\"shape\": \"n\", \"role\": \"in\", \"init\": {\"dist\": \"normal\"",
                              "\"shape\": \"n*n*n*n\", \"role\": \"in\", \"init\": {\"dist\": \"normal\"");
    kl_task_faults faults = KL_TASK_FAULTS_INIT;
    kl_task *t = NULL;
    assert_int_equal(validate(f->dir, json, GOOD_REF, GOOD_CU, &t, &faults), KL_ERR_INVALID);
    assert_non_null(find_fault(&faults, "args[0].shape", "at check[2]"));
    assert_non_null(find_fault(&faults, "args[0].shape", "at bench"));
    assert_null(find_fault(&faults, "args[0].shape", "at check[1]"));
    kl_task_faults_release(&faults);
    free(json);
}

static void faults_are_all_collected(void **state)
{
    fixture *f = *state;
    char *j1 = replace_once(BASE_JSON, "\"name\": \"vadd\",", "\"name\": \"vadd\", \"colour\": 1,");
    char *j2 = replace_once(j1, "\"type\": \"f32*\"", "\"type\": \"f31*\"");
    char *j3 = replace_once(j2, "{\"n\": 1000}", "{\"n\": 0}");
    char *j4 = replace_once(j3, "\"rel_l2\": 1e-6", "\"rel_l2\": true");
    kl_task_faults faults = KL_TASK_FAULTS_INIT;
    kl_task *t = NULL;
    assert_int_equal(validate(f->dir, j4, NULL, GOOD_CU, &t, &faults), KL_ERR_INVALID);
    assert_non_null(find_fault(&faults, "colour", "unknown key"));
    assert_non_null(find_fault(&faults, "args[0].type", "unknown type"));
    assert_non_null(find_fault(&faults, "shapes.check[1].n", "positive"));
    assert_non_null(find_fault(&faults, "tolerance.rel_l2", "expected a number"));
    assert_non_null(find_fault(&faults, "reference", "does not exist"));
    assert_true(faults.count >= 5);
    /* kl_task_load lists them, one a line */
    kl_error err = {0};
    assert_int_equal(kl_task_load(f->dir, &t, &err), KL_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(err.message, "colour"));
    assert_non_null(strstr(err.message, "\n"));
    assert_non_null(strstr(err.message, "task.json"));
    char *text = kl_task_fault_text(&faults.items[0]);
    assert_true(kl_str_starts(text, f->dir));
    free(text);
    kl_task_faults_release(&faults);
    free(j1);
    free(j2);
    free(j3);
    free(j4);
}

static void json_syntax_errors_have_a_line(void **state)
{
    fixture *f = *state;
    /* a trailing comma on line 3 */
    kl_task_faults faults = KL_TASK_FAULTS_INIT;
    kl_task *t = NULL;
    assert_int_equal(validate(f->dir, "{\n  \"name\": \"x\",\n  \"sizes\": [\"n\",],\n}\n", GOOD_REF, GOOD_CU, &t,
                              &faults),
                     KL_ERR_INVALID);
    assert_int_equal(faults.count, 1);
    assert_int_equal(faults.items[0].line, 3);
    assert_non_null(strstr(faults.items[0].reason, "invalid JSON"));
    kl_task_faults_release(&faults);
    /* duplicate keys are refused, not silently merged */
    assert_int_equal(validate(f->dir, "{\"name\": \"x\", \"name\": \"y\"}", GOOD_REF, GOOD_CU, &t, &faults),
                     KL_ERR_INVALID);
    assert_non_null(strstr(faults.items[0].reason, "duplicate"));
    kl_task_faults_release(&faults);
    /* not an object */
    assert_int_equal(validate(f->dir, "[1, 2]", GOOD_REF, GOOD_CU, &t, &faults), KL_ERR_INVALID);
    assert_non_null(strstr(faults.items[0].reason, "JSON object"));
    kl_task_faults_release(&faults);
    /* no task.json, no folder */
    remove_file(f->dir, "task.json");
    kl_error err = {0};
    assert_int_equal(kl_task_validate(f->dir, &t, &faults, &err), KL_ERR_INVALID);
    assert_non_null(strstr(faults.items[0].file, "task.json"));
    kl_task_faults_release(&faults);
    char *nodir = kl_path_join(f->dir, "no-such-task");
    assert_int_equal(kl_task_validate(nodir, &t, &faults, &err), KL_ERR_INVALID);
    assert_non_null(strstr(faults.items[0].reason, "does not exist"));
    kl_task_faults_release(&faults);
    free(nodir);
}

/* ---- launch() signatures ------------------------------------------------------------------------ */

typedef struct sig_case {
    const char *cu;
    const char *key;
    const char *reason;
    unsigned line;  /* the line of the fault, 0: not checked */
} sig_case;

static const sig_case sig_cases[] = {
    {"extern \"C\" void launch(const float *a, const float *b, float *c, cudaStream_t stream) {}\n", "naive",
     "takes 4 parameters, expected 5", 1},
    {"extern \"C\" void launch(const float *a, float *b, float *c, int n, cudaStream_t s) {}\n", "args[1]",
     "parameter 2 is 'float*', expected const float*", 1},
    {"extern \"C\" void launch(const float *a, const float *b,\n    double *c, int n, cudaStream_t s) {}\n",
     "args[2]", "parameter 3 is 'double*', expected float*", 2},
    {"extern \"C\" void launch(const float *a, const float *b, const float *c, int n, cudaStream_t s) {}\n",
     "args[2]", "role out", 1},
    {"extern \"C\" void launch(const float *a, const float *b, float *c, int *n, cudaStream_t s) {}\n", "args[3]",
     "expected int", 1},
    {"extern \"C\" void launch(const float *a, const float *b, float *c, int n, int s) {}\n", "naive",
     "last parameter is 'int', expected cudaStream_t", 1},
    {"\n\nvoid launch(const float *a, const float *b, float *c, int n, cudaStream_t s) {}\n", "naive",
     "C linkage", 3},
    {"extern \"C\" int launch(const float *a, const float *b, float *c, int n, cudaStream_t s) { return 0; }\n",
     "naive", "expected void", 1},
    {"__global__ void kernel(float *x) {}\n", "naive", "no definition", 0},
    {"extern \"C\" void launch(const float *a, const float *b, float *c, int n, cudaStream_t s) {}\n"
     "extern \"C\" void launch(const float *a, const float *b, float *c, int n, cudaStream_t s) {}\n",
     "naive", "defined 2 times", 2},
};

static void launch_signature_mismatches(void **state)
{
    fixture *f = *state;
    for (size_t i = 0; i < sizeof sig_cases / sizeof sig_cases[0]; i++) {
        const sig_case *c = &sig_cases[i];
        kl_task_faults faults = KL_TASK_FAULTS_INIT;
        kl_task *t = NULL;
        kl_status st = validate(f->dir, BASE_JSON, GOOD_REF, c->cu, &t, &faults);
        const kl_task_fault *hit = find_fault(&faults, c->key, c->reason);
        if (st != KL_ERR_INVALID || !hit) {
            print_message("signature case %zu: expected '%s' with '%s'; got:\n", i, c->key, c->reason);
            print_faults(&faults);
            fail();
        }
        assert_true(kl_str_ends(hit->file, "naive.cu"));
        if (c->line) assert_int_equal(hit->line, c->line);
        kl_task_faults_release(&faults);
    }
}

static void launch_signatures_that_match(void **state)
{
    fixture *f = *state;
    static const char *const good[] = {
        /* qualifiers in other places, __restrict__, a const pointer, an unnamed stream */
        "extern \"C\" void launch(float const *__restrict__ a, const float *__restrict__ b, float *const c,\n"
        "                       const int n, cudaStream_t) {}\n",
        /* an extern "C" block */
        "#include <cuda_runtime.h>\nextern \"C\" {\nvoid launch(const float *a, const float *b, float *c, int n, "
        "cudaStream_t s) {}\n}\n",
        /* declared extern "C" first, defined after */
        "extern \"C\" void launch(const float *, const float *, float *, int, cudaStream_t);\n"
        "void launch(const float *a, const float *b, float *c, int n, cudaStream_t s) {}\n",
        /* templates and other functions around it */
        "template <int B> __global__ void k(const float *a, float *c, int n) {}\n"
        "static void helper(int launch) {}\n"
        "extern \"C\" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)\n"
        "{ k<256><<<1, 256, 0, stream>>>(a, c, n); }\n",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        kl_task_faults faults = KL_TASK_FAULTS_INIT;
        kl_task *t = NULL;
        kl_status st = validate(f->dir, BASE_JSON, GOOD_REF, good[i], &t, &faults);
        if (st != KL_OK) {
            print_message("good signature %zu was refused:\n", i);
            print_faults(&faults);
            fail();
        }
        kl_task_free(t);
        kl_task_faults_release(&faults);
    }
}

static void typed_signatures_of_the_gather_task(void **state)
{
    (void)state;
    char *dir = data_path("tasks/gather");
    kl_task *t = NULL;
    kl_error err = {0};
    kl_status st = kl_task_load(dir, &t, &err);
    if (st != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(t->args[0].dtype, KL_DTYPE_BF16);
    assert_int_equal(t->args[1].dtype, KL_DTYPE_I32);
    assert_int_equal(t->args[2].dtype, KL_DTYPE_U8);
    assert_true(t->exact);
    kl_task_free(t);
    free(dir);
}

/* ---- codecs and fills ---------------------------------------------------------------------------- */

static float float_from_bits(uint32_t b)
{
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* bf16 by the textbook rule on float bits: add 0x7FFF plus the kept part's lowest bit. */
static uint16_t bf16_by_bits(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

static void bf16_rounds_to_nearest_even(void **state)
{
    (void)state;
    /* exactly half way between two bf16 values: ties go to the even one */
    uint32_t even_lo = 0x3F800000u | 0x8000u;            /* 1 + 2^-8: between 0x3F80 and 0x3F81 */
    uint32_t odd_lo = 0x3F810000u | 0x8000u;             /* between 0x3F81 and 0x3F82 */
    uint32_t above = 0x3F800000u | 0x8001u;              /* just past half way */
    double x;
    uint16_t h;
    x = float_from_bits(even_lo);
    kl_dtype_from_double(KL_DTYPE_BF16, &x, &h, 1);
    assert_int_equal(h, 0x3F80);
    x = float_from_bits(odd_lo);
    kl_dtype_from_double(KL_DTYPE_BF16, &x, &h, 1);
    assert_int_equal(h, 0x3F82);
    x = float_from_bits(above);
    kl_dtype_from_double(KL_DTYPE_BF16, &x, &h, 1);
    assert_int_equal(h, 0x3F81);
    /* negative, overflow to infinity, NaN, subnormals */
    x = -(double)float_from_bits(odd_lo);
    kl_dtype_from_double(KL_DTYPE_BF16, &x, &h, 1);
    assert_int_equal(h, 0xBF82);
    x = 1e39;
    kl_dtype_from_double(KL_DTYPE_BF16, &x, &h, 1);
    assert_int_equal(h, 0x7F80);
    x = NAN;
    kl_dtype_from_double(KL_DTYPE_BF16, &x, &h, 1);
    double back;
    kl_dtype_to_double(KL_DTYPE_BF16, &h, &back, 1);
    assert_true(isnan(back));
    /* every float pattern we try agrees with the bit rule (NaNs excepted) */
    uint64_t s = 12345;
    for (int i = 0; i < 200000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t b = (uint32_t)(s >> 32);
        float fx = float_from_bits(b);
        if (isnan(fx)) continue;
        x = fx;
        kl_dtype_from_double(KL_DTYPE_BF16, &x, &h, 1);
        if (h != bf16_by_bits(fx)) fail_msg("float bits %08x: got %04x, expected %04x", b, h, bf16_by_bits(fx));
        kl_dtype_to_double(KL_DTYPE_BF16, &h, &back, 1);
        uint16_t again;
        kl_dtype_from_double(KL_DTYPE_BF16, &back, &again, 1);
        assert_int_equal(again, h);
    }
    /* rounding straight from double: a value just above a float tie must not tie */
    x = (double)float_from_bits(even_lo) + 0x1p-40;
    kl_dtype_from_double(KL_DTYPE_BF16, &x, &h, 1);
    assert_int_equal(h, 0x3F81);
}

static void f16_agrees_with_the_compiler(void **state)
{
    (void)state;
    /* ties, normal and subnormal, go to even */
    const struct {
        double x;
        uint16_t bits;
    } ties[] = {{1.0 + 0x1p-11, 0x3C00}, {1.0 + 3 * 0x1p-11, 0x3C02}, {0x1p-25, 0x0000}, {3 * 0x1p-25, 0x0002},
                {-(1.0 + 3 * 0x1p-11), 0xBC02}, {65520.0, 0x7C00}, {65519.0, 0x7BFF}};
    for (size_t i = 0; i < sizeof ties / sizeof ties[0]; i++) {
        uint16_t h;
        kl_dtype_from_double(KL_DTYPE_F16, &ties[i].x, &h, 1);
        if (h != ties[i].bits) fail_msg("%.17g: got %04x, expected %04x", ties[i].x, h, ties[i].bits);
    }
#ifdef __FLT16_MAX__
    /* float values: their short fractions make exact ties common */
    uint64_t r = 7;
    for (int i = 0; i < 400000; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t b = (uint32_t)(r >> 32);
        b = (b & 0x80000000u) | (((b >> 23) % 40 + 100) << 23) | (b & 0x7FFFFFu); /* exponents around f16's */
        double x = float_from_bits(b);
        uint16_t h, rb;
        kl_dtype_from_double(KL_DTYPE_F16, &x, &h, 1);
        _Float16 ref = (_Float16)x;
        memcpy(&rb, &ref, 2);
        if (h != rb) fail_msg("float bits %08x: got %04x, the compiler says %04x", b, h, rb);
    }
    uint64_t s = 99;
    for (int i = 0; i < 200000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        /* doubles spread over the half range and beyond, with subnormals */
        double x = ldexp((double)(int64_t)(s >> 11) / 9007199254740992.0, (int)((s >> 3) % 44) - 28);
        uint16_t h;
        kl_dtype_from_double(KL_DTYPE_F16, &x, &h, 1);
        _Float16 ref = (_Float16)x;
        uint16_t rb;
        memcpy(&rb, &ref, 2);
        if (h != rb) fail_msg("%.17g: got %04x, the compiler says %04x", x, h, rb);
        double back;
        kl_dtype_to_double(KL_DTYPE_F16, &h, &back, 1);
        assert_true(back == (double)ref || (isnan(back) && isnan((double)ref)));
    }
#else
    skip();
#endif
}

static void int_conversions_saturate(void **state)
{
    (void)state;
    double in[] = {-3.5, 2.5, 300.0, NAN, 3e10, -3e10};
    uint8_t u[6];
    int32_t v[6];
    kl_dtype_from_double(KL_DTYPE_U8, in, u, 6);
    kl_dtype_from_double(KL_DTYPE_I32, in, v, 6);
    assert_int_equal(u[0], 0);
    assert_int_equal(u[1], 2); /* rint: to even */
    assert_int_equal(u[2], 255);
    assert_int_equal(u[3], 0);
    assert_int_equal(v[0], -4);
    assert_int_equal(v[4], INT32_MAX);
    assert_int_equal(v[5], INT32_MIN);
    assert_int_equal(kl_dtype_size(KL_DTYPE_BF16), 2);
    assert_string_equal(kl_dtype_ctype(KL_DTYPE_BF16), "__nv_bfloat16");
    assert_string_equal(kl_dtype_name(KL_DTYPE_U8), "u8");
}

static kl_task *load_data_task(const char *name)
{
    char *dir = data_path(name);
    kl_task *t = NULL;
    kl_error err = {0};
    if (kl_task_load(dir, &t, &err) != KL_OK) fail_msg("%s", err.message);
    free(dir);
    return t;
}

static void fill_is_deterministic_and_chunk_free(void **state)
{
    (void)state;
    kl_task *t = load_data_task("tasks/vadd");
    const kl_shape *sh = &t->checks[1];
    int64_t n;
    kl_error err = {0};
    assert_int_equal(kl_task_arg_count(t, sh, 0, &n, &err), KL_OK);
    float *a = calloc((size_t)n, 4), *b = calloc((size_t)n, 4), *c = calloc((size_t)n, 4);
    assert_int_equal(kl_task_fill(t, sh, 0, 7, a, n, &err), KL_OK);
    assert_int_equal(kl_task_fill(t, sh, 0, 7, b, n, &err), KL_OK);
    assert_memory_equal(a, b, (size_t)n * 4);
    /* in chunks of odd sizes */
    for (int64_t first = 0; first < n;) {
        int64_t len = first % 3 == 0 ? 37 : 101;
        if (len > n - first) len = n - first;
        assert_int_equal(kl_task_fill_range(t, sh, 0, 7, c + first, first, len, &err), KL_OK);
        first += len;
    }
    assert_memory_equal(a, c, (size_t)n * 4);
    /* another seed, another argument: different values */
    assert_int_equal(kl_task_fill(t, sh, 0, 8, b, n, &err), KL_OK);
    assert_memory_not_equal(a, b, (size_t)n * 4);
    assert_int_equal(kl_task_fill(t, sh, 1, 7, b, n, &err), KL_OK);
    assert_memory_not_equal(a, b, (size_t)n * 4);
    /* wrong counts, scalars and out-of-range chunks are refused */
    assert_int_equal(kl_task_fill(t, sh, 0, 7, a, n - 1, &err), KL_ERR_INVALID);
    assert_int_equal(kl_task_fill(t, sh, 3, 7, a, n, &err), KL_ERR_INVALID);
    assert_int_equal(kl_task_fill_range(t, sh, 0, 7, a, n - 1, 2, &err), KL_ERR_INVALID);
    /* outputs are left alone */
    memset(c, 0x5A, (size_t)n * 4);
    memcpy(b, c, (size_t)n * 4);
    assert_int_equal(kl_task_fill(t, sh, 2, 7, c, n, &err), KL_OK);
    assert_memory_equal(b, c, (size_t)n * 4);
    free(a);
    free(b);
    free(c);
    kl_task_free(t);
}

/* A one-tensor task with the given type and init, at one shape n. */
static kl_task *dist_task(const char *dir, const char *type, const char *init, int64_t n)
{
    char json[1024];
    kl_snprintf(json, sizeof json,
                "{\"name\": \"d\", \"sizes\": [\"n\"], \"args\": ["
                "{\"name\": \"x\", \"type\": \"%s\", \"shape\": \"n\", \"role\": \"inout\", \"init\": %s}],"
                "\"shapes\": {\"bench\": {\"n\": %lld}, \"check\": [{\"n\": %lld}]},"
                "\"tolerance\": {\"rel_l2\": 1e-6}}",
                type, init, (long long)n, (long long)n);
    write_file(dir, "task.json", json);
    write_file(dir, "reference.c", "void reference(double *x, int n) { (void)x; (void)n; }\n");
    remove_file(dir, "naive.cu");
    kl_task *t = NULL;
    kl_error err = {0};
    if (kl_task_load(dir, &t, &err) != KL_OK) fail_msg("%s", err.message);
    return t;
}

static void fill_distributions(void **state)
{
    fixture *f = *state;
    const int64_t n = 1 << 17;
    double *x = calloc((size_t)n, sizeof *x);
    kl_error err = {0};

    /* normal(mean 3, std 2): sample mean and std within a few standard errors */
    double mean = 3, std = 2;
    kl_task *t = dist_task(f->dir, "f64*", "{\"dist\": \"normal\", \"mean\": 3, \"std\": 2}", n);
    assert_int_equal(kl_task_fill(t, &t->bench, 0, 42, x, n, &err), KL_OK);
    double s1 = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) s1 += x[i];
    double m = s1 / (double)n;
    for (int64_t i = 0; i < n; i++) s2 += (x[i] - m) * (x[i] - m);
    double sd = sqrt(s2 / (double)(n - 1));
    assert_true(fabs(m - mean) < 5 * std / sqrt((double)n));
    assert_true(fabs(sd - std) < 5 * std / sqrt(2.0 * (double)n));
    /* and about 68% within one std */
    int64_t within = 0;
    for (int64_t i = 0; i < n; i++) within += fabs(x[i] - mean) < std;
    assert_true(fabs((double)within / (double)n - 0.6826894921370859) < 0.01);
    kl_task_free(t);

    /* uniform over an expression bound: [-n/4, n/2), mean at the middle */
    t = dist_task(f->dir, "f64*", "{\"dist\": \"uniform\", \"lo\": \"-n/4\", \"hi\": \"n/2\"}", n);
    assert_int_equal(kl_task_fill(t, &t->bench, 0, 1, x, n, &err), KL_OK);
    double lo = (double)(-n / 4), hi = (double)(n / 2);
    s1 = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(x[i] >= lo && x[i] <= hi);
        s1 += x[i];
    }
    double width = hi - lo;
    assert_true(fabs(s1 / (double)n - (lo + hi) / 2) < 5 * width / sqrt(12.0 * (double)n));
    kl_task_free(t);

    /* uniform with fractional bounds */
    t = dist_task(f->dir, "f32*", "{\"dist\": \"uniform\", \"lo\": -0.25, \"hi\": 0.5}", n);
    float *xf = (float *)x;
    assert_int_equal(kl_task_fill(t, &t->bench, 0, 1, xf, n, &err), KL_OK);
    for (int64_t i = 0; i < n; i++) assert_true(xf[i] >= -0.25f && xf[i] <= 0.5f);
    kl_task_free(t);

    /* int_uniform is inclusive: every value of [-2, 3] appears, nothing else */
    t = dist_task(f->dir, "i32*", "{\"dist\": \"int_uniform\", \"lo\": -2, \"hi\": 3}", n);
    int32_t *xi = (int32_t *)x;
    assert_int_equal(kl_task_fill(t, &t->bench, 0, 5, xi, n, &err), KL_OK);
    int64_t seen[6] = {0};
    for (int64_t i = 0; i < n; i++) {
        assert_true(xi[i] >= -2 && xi[i] <= 3);
        seen[xi[i] + 2]++;
    }
    for (int k = 0; k < 6; k++) assert_true(fabs((double)seen[k] - (double)n / 6) < 5 * sqrt((double)n / 6));
    kl_task_free(t);

    /* u8 across its whole range */
    t = dist_task(f->dir, "u8*", "{\"dist\": \"int_uniform\", \"lo\": 0, \"hi\": 255}", n);
    uint8_t *xu = (uint8_t *)x;
    assert_int_equal(kl_task_fill(t, &t->bench, 0, 5, xu, n, &err), KL_OK);
    int64_t lo_hits = 0, hi_hits = 0;
    for (int64_t i = 0; i < n; i++) lo_hits += xu[i] == 0, hi_hits += xu[i] == 255;
    assert_true(lo_hits > 0 && hi_hits > 0);
    kl_task_free(t);

    /* an u8 bound past 255 is a validation fault */
    char json[512];
    kl_snprintf(json, sizeof json,
                "{\"name\": \"d\", \"sizes\": [\"n\"], \"args\": [{\"name\": \"x\", \"type\": \"u8*\", \"shape\": "
                "\"n\", \"role\": \"inout\", \"init\": {\"dist\": \"int_uniform\", \"lo\": 0, \"hi\": \"n\"}}],"
                "\"shapes\": {\"bench\": {\"n\": 256}, \"check\": [{\"n\": 3}]}, \"tolerance\": {\"exact\": true}}");
    write_file(f->dir, "task.json", json);
    kl_task_faults faults = KL_TASK_FAULTS_INIT;
    assert_int_equal(kl_task_validate(f->dir, &t, &faults, &err), KL_ERR_INVALID);
    assert_non_null(find_fault(&faults, "args[0].init.hi", "outside the range of u8"));
    assert_non_null(find_fault(&faults, "args[0].init.hi", "at bench"));
    assert_null(find_fault(&faults, "args[0].init.hi", "at check[0]"));
    kl_task_faults_release(&faults);
    free(x);
}

static void bf16_fill_is_the_rounded_f64_fill(void **state)
{
    fixture *f = *state;
    const int64_t n = 4099;
    const char *init = "{\"dist\": \"normal\", \"mean\": 0.5, \"std\": 3}";
    kl_task *t64 = dist_task(f->dir, "f64*", init, n);
    double *x = calloc((size_t)n, sizeof *x);
    kl_error err = {0};
    assert_int_equal(kl_task_fill(t64, &t64->bench, 0, 11, x, n, &err), KL_OK);
    kl_task *t16 = dist_task(f->dir, "bf16*", init, n);
    uint16_t *h = calloc((size_t)n, 2);
    assert_int_equal(kl_task_fill(t16, &t16->bench, 0, 11, h, n, &err), KL_OK);
    for (int64_t i = 0; i < n; i++) {
        uint16_t want;
        kl_dtype_from_double(KL_DTYPE_BF16, &x[i], &want, 1);
        assert_int_equal(h[i], want);
    }
    kl_task_free(t16);
    t16 = dist_task(f->dir, "f16*", init, n);
    assert_int_equal(kl_task_fill(t16, &t16->bench, 0, 11, h, n, &err), KL_OK);
    for (int64_t i = 0; i < n; i++) {
        uint16_t want;
        kl_dtype_from_double(KL_DTYPE_F16, &x[i], &want, 1);
        assert_int_equal(h[i], want);
    }
    kl_task_free(t16);
    kl_task_free(t64);
    free(x);
    free(h);
}

/* ---- the reference ----------------------------------------------------------------------------- */

static unsigned count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    unsigned n = 0;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) n += kl_str_ends(e->d_name, suffix);
    closedir(d);
    return n;
}

static void reference_builds_and_runs(void **state)
{
    fixture *f = *state;
    kl_task *t = load_data_task("tasks/vadd");
    char *cache = kl_path_join(f->dir, "cache");
    kl_reference *ref = NULL;
    kl_error err = {0};
    kl_status st = kl_reference_load(t, cache, &ref, &err);
    if (st != KL_OK) fail_msg("%s", err.message);
    assert_int_equal(count_files(cache, ".so"), 1);
    const kl_shape *sh = &t->checks[1];
    int64_t n;
    assert_int_equal(kl_task_arg_count(t, sh, 0, &n, &err), KL_OK);
    float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
    assert_int_equal(kl_task_fill(t, sh, 0, 3, a, n, &err), KL_OK);
    assert_int_equal(kl_task_fill(t, sh, 1, 3, b, n, &err), KL_OK);
    void *args[4] = {a, b, NULL, NULL};
    double *outs[4];
    assert_int_equal(kl_reference_run(ref, t, sh, args, outs, &err), KL_OK);
    assert_null(outs[0]);
    assert_null(outs[1]);
    assert_null(outs[3]);
    assert_non_null(outs[2]);
    for (int64_t i = 0; i < n; i++) assert_true(outs[2][i] == (double)a[i] + (double)b[i]);
    free(outs[2]);
    kl_reference_free(ref);
    /* a second load comes from the cache: still one object */
    assert_int_equal(kl_reference_load(t, cache, &ref, &err), KL_OK);
    assert_int_equal(count_files(cache, ".so"), 1);
    kl_reference_free(ref);
    kl_reference_free(NULL);
    free(a);
    free(b);
    free(cache);
    kl_task_free(t);
}

static void reference_with_integer_and_bf16_args(void **state)
{
    fixture *f = *state;
    kl_task *t = load_data_task("tasks/gather");
    char *cache = kl_path_join(f->dir, "cache");
    kl_reference *ref = NULL;
    kl_error err = {0};
    if (kl_reference_load(t, cache, &ref, &err) != KL_OK) fail_msg("%s", err.message);
    const kl_shape *sh = &t->checks[1];
    int64_t n, m;
    assert_int_equal(kl_task_arg_count(t, sh, 0, &m, &err), KL_OK);
    assert_int_equal(kl_task_arg_count(t, sh, 1, &n, &err), KL_OK);
    uint16_t *x = malloc((size_t)m * 2);
    int32_t *idx = malloc((size_t)n * 4);
    uint8_t *mask = malloc((size_t)n);
    assert_int_equal(kl_task_fill(t, sh, 0, 9, x, m, &err), KL_OK);
    assert_int_equal(kl_task_fill(t, sh, 1, 9, idx, n, &err), KL_OK);
    assert_int_equal(kl_task_fill(t, sh, 2, 9, mask, n, &err), KL_OK);
    void *args[6] = {x, idx, mask, NULL, NULL, NULL};
    double *outs[6];
    assert_int_equal(kl_reference_run(ref, t, sh, args, outs, &err), KL_OK);
    int64_t masked = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(idx[i] >= 0 && idx[i] < m);
        double want = 0;
        if (mask[i]) kl_dtype_to_double(KL_DTYPE_BF16, &x[idx[i]], &want, 1);
        assert_true(outs[3][i] == want);
        masked += mask[i] == 0;
    }
    assert_true(masked > 0 && masked < n);
    free(outs[3]);
    kl_reference_free(ref);
    free(x);
    free(idx);
    free(mask);
    free(cache);
    kl_task_free(t);
}

static void reference_compile_errors_name_the_line(void **state)
{
    fixture *f = *state;
    char *cache = kl_path_join(f->dir, "cache");
    kl_task_faults faults = KL_TASK_FAULTS_INIT;
    kl_task *t = NULL;
    kl_error err = {0};
    /* a syntax error on line 3 */
    const char *bad = "void reference(const double *a, const double *b, double *c, int n)\n{\n"
                      "    for (int i = 0; i < n; i++) c[i] = a[i] + b[i]\n}\n";
    assert_int_equal(validate(f->dir, BASE_JSON, bad, GOOD_CU, &t, &faults), KL_OK);
    kl_reference *ref = NULL;
    assert_int_equal(kl_reference_load(t, cache, &ref, &err), KL_ERR_COMPILE);
    assert_null(ref);
    char *path = kl_path_join(f->dir, "reference.c");
    char want[1024];
    kl_snprintf(want, sizeof want, "%s:", path);
    assert_non_null(strstr(err.message, want));
    assert_non_null(strstr(err.message, "error"));
    kl_snprintf(want, sizeof want, "%s:3:", path);
    assert_non_null(strstr(err.message, want));
    kl_task_free(t);
    /* parameters that differ from the declared args do not compile either */
    const char *wrong = "#include <stdint.h>\n"
                        "void reference(const double *a, const int32_t *b, double *c, int n)\n"
                        "{ for (int i = 0; i < n; i++) c[i] = a[i] + b[i]; }\n";
    assert_int_equal(validate(f->dir, BASE_JSON, wrong, GOOD_CU, &t, &faults), KL_OK);
    assert_int_equal(kl_reference_load(t, cache, &ref, &err), KL_ERR_COMPILE);
    kl_task_free(t);
    const char *fewer = "void reference(const double *a, const double *b, double *c)\n{ c[0] = a[0] + b[0]; }\n";
    assert_int_equal(validate(f->dir, BASE_JSON, fewer, GOOD_CU, &t, &faults), KL_OK);
    assert_int_equal(kl_reference_load(t, cache, &ref, &err), KL_ERR_COMPILE);
    kl_task_free(t);
    assert_int_equal(count_files(cache, ".so"), 0);
    kl_task_faults_release(&faults);
    free(path);
    free(cache);
}

static kl_status probe_with(const char *dir, const char *ref_text, kl_task_faults *faults)
{
    kl_task *t = NULL;
    kl_status st = validate(dir, BASE_JSON, ref_text, GOOD_CU, &t, faults);
    assert_int_equal(st, KL_OK);
    char *cache = kl_path_join(dir, "cache");
    kl_reference *ref = NULL;
    kl_error err = {0};
    st = kl_reference_load(t, cache, &ref, &err);
    if (st != KL_OK) fail_msg("%s", err.message);
    st = kl_reference_probe(ref, t, 1, 2, faults, &err);
    kl_reference_free(ref);
    kl_task_free(t);
    free(cache);
    return st;
}

static void weak_references_are_caught(void **state)
{
    fixture *f = *state;
    kl_task_faults faults = KL_TASK_FAULTS_INIT;
    /* the honest one passes */
    assert_int_equal(probe_with(f->dir, GOOD_REF, &faults), KL_OK);
    print_faults(&faults);
    assert_int_equal(faults.count, 0);
    /* ignores its inputs */
    assert_int_equal(probe_with(f->dir,
                                "void reference(const double *a, const double *b, double *c, int n)\n"
                                "{ (void)a; (void)b; for (int i = 0; i < n; i++) c[i] = i; }\n",
                                &faults),
                     KL_OK);
    assert_non_null(find_fault(&faults, "c", "does not change when the inputs change"));
    kl_task_faults_release(&faults);
    /* reads its inputs but writes one value everywhere */
    assert_int_equal(probe_with(f->dir,
                                "void reference(const double *a, const double *b, double *c, int n)\n"
                                "{ for (int i = 0; i < n; i++) c[i] = a[0] + b[0]; }\n",
                                &faults),
                     KL_OK);
    assert_non_null(find_fault(&faults, "c", "one value in every element"));
    kl_task_faults_release(&faults);
    /* leaves outputs unwritten */
    assert_int_equal(probe_with(f->dir,
                                "void reference(const double *a, const double *b, double *c, int n)\n"
                                "{ for (int i = 0; i < n; i += 2) c[i] = a[i] + b[i]; }\n",
                                &faults),
                     KL_OK);
    assert_non_null(find_fault(&faults, "c", "c[1] is NaN"));
    kl_task_faults_release(&faults);
    /* the weak_ref task in the test data */
    kl_task *t = load_data_task("tasks/weak_ref");
    char *cache = kl_path_join(f->dir, "cache");
    kl_reference *ref = NULL;
    kl_error err = {0};
    assert_int_equal(kl_reference_load(t, cache, &ref, &err), KL_OK);
    assert_int_equal(kl_reference_probe(ref, t, 1, 2, &faults, &err), KL_OK);
    assert_int_equal(faults.count, 1);
    assert_non_null(strstr(faults.items[0].reason, "weak reference"));
    assert_true(kl_str_ends(faults.items[0].file, "reference.c"));
    kl_task_faults_release(&faults);
    kl_reference_free(ref);
    kl_task_free(t);
    free(cache);
}

/* A reference that crashes, loops or calls exit() is an error naming it and the shape; the
 * test process (the caller) lives on. */
static void a_misbehaving_reference_is_an_error(void **state)
{
    fixture *f = *state;
    static const struct {
        const char *body, *want;
        kl_status st;
    } cases[] = {
        {"{ (void)a; (void)b; (void)n; volatile double *p = 0; c[0] = *p; }", "crashed", KL_ERR_CHILD},
        {"{ (void)a; (void)b; (void)c; (void)n; for (volatile int k = 0;; k++) {} }", "ran longer than 2 s",
         KL_ERR_TIMEOUT},
        /* (the status itself is not checked: under LeakSanitizer exit() runs a leak check in the child) */
        {"{ (void)a; (void)b; (void)c; (void)n; exit(0); }", "ended its process (exit status", KL_ERR_CHILD},
        {"{ (void)a; (void)b; (void)c; (void)n; exit(3); }", "ended its process (exit status", KL_ERR_CHILD},
        {"{ (void)a; (void)b; (void)c; (void)n; abort(); }", "crashed", KL_ERR_CHILD},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char text[512];
        kl_snprintf(text, sizeof text,
                    "#include <stdlib.h>\nvoid reference(const double *a, const double *b, double *c, int n)\n%s\n",
                    cases[k].body);
        kl_task_faults faults = KL_TASK_FAULTS_INIT;
        kl_task *t = NULL;
        assert_int_equal(validate(f->dir, BASE_JSON, text, GOOD_CU, &t, &faults), KL_OK);
        char *cache = kl_path_join(f->dir, "cache");
        kl_reference *ref = NULL;
        kl_error err = {0};
        if (kl_reference_load(t, cache, &ref, &err) != KL_OK) fail_msg("%s", err.message);
        kl_reference_set_timeout(ref, 2.0);
        void *args[4] = {NULL, NULL, NULL, NULL};
        int64_t n;
        const kl_shape *sh = &t->checks[0];
        assert_int_equal(kl_task_arg_count(t, sh, 0, &n, &err), KL_OK);
        float *a = calloc((size_t)n, 4), *b = calloc((size_t)n, 4);
        args[0] = a;
        args[1] = b;
        double *outs[4] = {NULL, NULL, NULL, NULL};
        double t0 = kl_now();
        kl_status st = kl_reference_run(ref, t, sh, args, outs, &err);
        if (st != cases[k].st || !strstr(err.message, cases[k].want))
            fail_msg("case %zu: status %d, \"%s\"; expected %d and \"%s\"", k, st, err.message, cases[k].st,
                     cases[k].want);
        assert_true(kl_now() - t0 < 30);
        assert_non_null(strstr(err.message, "reference.c"));
        assert_non_null(strstr(err.message, sh->label));
        for (int i = 0; i < 4; i++) assert_null(outs[i]);
        /* the probe says the same, as an error of its run */
        assert_int_not_equal(kl_reference_probe(ref, t, 1, 2, &faults, &err), KL_OK);
        assert_non_null(strstr(err.message, cases[k].want));
        kl_reference_free(ref);
        kl_task_faults_release(&faults);
        kl_task_free(t);
        free(a);
        free(b);
        free(cache);
    }
}

/* The reference's server (kl_reference_serve): started before the caller limits itself, it runs
 * the reference in the caller's place. Here the caller (a child of the test) then limits the files
 * it may write to 4 KiB, as the worker's sandbox limits them to 1 GiB: arrays larger than that
 * still reach the reference (their files are the server's), the results are exact, and a reference
 * that crashes is still the same error. */
static void served_reference_runs_past_the_callers_file_limit(void **state)
{
    fixture *f = *state;
    kl_task *t = load_data_task("tasks/vadd");
    char *cache = kl_path_join(f->dir, "cache");
    const kl_shape *sh = &t->checks[0];
    int64_t n = 0;
    kl_error err = {0};
    for (unsigned k = 0; k < t->nchecks; k++) {
        int64_t m;
        assert_int_equal(kl_task_arg_count(t, &t->checks[k], 0, &m, &err), KL_OK);
        if (m > n) n = m, sh = &t->checks[k];
    }
    assert_true(n * 8 > 4096); /* the float64 copies pass the limit */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        kl_reference *ref = NULL;
        if (kl_reference_load(t, cache, &ref, &err) != KL_OK || kl_reference_serve(ref, &err) != KL_OK) {
            fprintf(stderr, "%s\n", err.message);
            _exit(2);
        }
        struct rlimit lim = {4096, 4096};
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(3);
        float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
        if (!a || !b || kl_task_fill(t, sh, 0, 3, a, n, &err) != KL_OK || kl_task_fill(t, sh, 1, 4, b, n, &err) != KL_OK)
            _exit(4);
        for (int rep = 0; rep < 3; rep++) { /* the server takes one run after another */
            void *args[4] = {a, b, NULL, NULL};
            double *outs[4];
            if (kl_reference_run(ref, t, sh, args, outs, &err) != KL_OK) {
                fprintf(stderr, "run %d: %s\n", rep, err.message);
                _exit(5);
            }
            for (int64_t i = 0; i < n; i++)
                if (outs[2][i] != (double)a[i] + (double)b[i]) _exit(6);
            if (!(kl_reference_last_seconds(ref) >= 0)) _exit(7);
            free(outs[2]);
        }
        kl_reference_free(ref);
        free(a), free(b);
        _exit(0);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {}
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("the limited caller: %s %d", WIFSIGNALED(status) ? "signal" : "exit",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    free(cache);
    kl_task_free(t);
}

/* Many arguments, many duplicates: one fault per key past a limit, one per duplicate; quick. */
static void large_tasks_hit_limits_not_quadratic_time(void **state)
{
    fixture *f = *state;
    kl_task_faults faults = KL_TASK_FAULTS_INIT;
    kl_task *t = NULL;
    for (int variant = 0; variant < 3; variant++) {
        unsigned nargs = variant == 0 ? 5000 : variant == 1 ? KL_TASK_MAX_ARGS : 3;
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_adds(&sb, "{\"name\": \"big\", \"sizes\": [");
        unsigned nsizes = variant == 2 ? 100000 : 1;
        for (unsigned i = 0; i < nsizes; i++) kl_strbuf_addf(&sb, "%s\"n%u\"", i ? ", " : "", i);
        kl_strbuf_adds(&sb, "], \"args\": [");
        for (unsigned i = 0; i < nargs; i++)
            kl_strbuf_addf(&sb, "%s{\"name\": \"x\", \"type\": \"f32*\", \"shape\": \"n0\", \"role\": \"%s\"}", i ? ", " : "",
                           i + 1 == nargs ? "out" : "in");
        kl_strbuf_adds(&sb, "], \"shapes\": {\"bench\": {\"n0\": 4}, \"check\": [{\"n0\": 1}]}, \"tolerance\": "
                            "{\"rel_l2\": 1e-6}, \"naive\": \"naive.cu\"}");
        double t0 = kl_now();
        assert_int_equal(validate(f->dir, kl_strbuf_str(&sb), GOOD_REF, GOOD_CU, &t, &faults), KL_ERR_INVALID);
        assert_true(kl_now() - t0 < 20);
        unsigned dups = 0, limits = 0;
        for (unsigned i = 0; i < faults.count; i++) {
            dups += strstr(faults.items[i].reason, "duplicate argument name") != NULL;
            limits += strstr(faults.items[i].reason, "more than the limit") != NULL;
        }
        if (variant == 0) {
            assert_int_equal(limits, 1);
            assert_non_null(find_fault(&faults, "args", "5000 arguments, more than the limit of 256"));
        } else if (variant == 1) {
            assert_int_equal(dups, KL_TASK_MAX_ARGS - 1); /* each once, not once per earlier twin */
            assert_int_equal(limits, 0);
        } else {
            assert_non_null(find_fault(&faults, "sizes", "100000 size names, more than the limit of 64"));
        }
        assert_true(faults.count < 2 * KL_TASK_MAX_ARGS);
        kl_task_faults_release(&faults);
        kl_strbuf_release(&sb);
    }
}

/* A kernel file that is a symbolic link out of the task folder is refused, and what it points
 * to is never read (so no error can quote it). */
static void files_outside_the_task_folder_are_refused(void **state)
{
    fixture *f = *state;
    kl_task_faults faults = KL_TASK_FAULTS_INIT;
    kl_task *t = NULL;
    char *outside = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("test-task-outside", &outside, &err), KL_OK);
    write_file(outside, "secret.cu", "TOP SECRET 1234 (\n");
    char *target = kl_path_join(outside, "secret.cu");
    assert_int_equal(validate(f->dir, BASE_JSON, GOOD_REF, GOOD_CU, &t, &faults), KL_OK);
    kl_task_free(t);
    char *link = kl_path_join(f->dir, "naive.cu");
    unlink(link);
    assert_int_equal(symlink(target, link), 0);
    write_file(f->dir, "task.json", BASE_JSON);
    assert_int_equal(kl_task_validate(f->dir, &t, &faults, &err), KL_ERR_INVALID);
    assert_null(t);
    const kl_task_fault *fl = find_fault(&faults, "naive", "leads outside the task folder");
    assert_non_null(fl);
    for (unsigned i = 0; i < faults.count; i++) assert_null(strstr(faults.items[i].reason, "TOP SECRET"));
    assert_null(strstr(err.message, "TOP SECRET"));
    kl_task_faults_release(&faults);
    /* "../" in the name, the same */
    char *json = replace_once(BASE_JSON, "\"naive.cu\"", "\"../x/naive.cu\"");
    char *sub = kl_path_join(f->dir, "t");
    assert_int_equal(kl_mkdirs(sub, &err), KL_OK);
    char *xdir = kl_path_join(f->dir, "x");
    assert_int_equal(kl_mkdirs(xdir, &err), KL_OK);
    write_file(xdir, "naive.cu", GOOD_CU);
    write_file(sub, "reference.c", GOOD_REF);
    write_file(sub, "task.json", json);
    assert_int_equal(kl_task_validate(sub, &t, &faults, &err), KL_ERR_INVALID);
    assert_non_null(find_fault(&faults, "naive", "leads outside the task folder"));
    kl_task_faults_release(&faults);
    /* a link inside the folder is fine */
    unlink(link);
    write_file(f->dir, "real.cu", GOOD_CU);
    assert_int_equal(symlink("real.cu", link), 0);
    assert_int_equal(kl_task_validate(f->dir, &t, &faults, &err), KL_OK);
    kl_task_free(t);
    kl_task_faults_release(&faults);
    kl_remove_tree(outside, NULL);
    free(outside), free(target), free(link), free(json), free(sub), free(xdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(expr_precedence_and_c_semantics),
        cmocka_unit_test(expr_errors_name_the_column),
        cmocka_unit_test_setup_teardown(good_task_loads, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(every_fault_is_named, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(expressions_are_checked_on_every_shape, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(faults_are_all_collected, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(json_syntax_errors_have_a_line, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(launch_signature_mismatches, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(launch_signatures_that_match, setup_dir, teardown_dir),
        cmocka_unit_test(typed_signatures_of_the_gather_task),
        cmocka_unit_test(bf16_rounds_to_nearest_even),
        cmocka_unit_test(f16_agrees_with_the_compiler),
        cmocka_unit_test(int_conversions_saturate),
        cmocka_unit_test(fill_is_deterministic_and_chunk_free),
        cmocka_unit_test_setup_teardown(fill_distributions, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(bf16_fill_is_the_rounded_f64_fill, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(reference_builds_and_runs, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(reference_with_integer_and_bf16_args, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(reference_compile_errors_name_the_line, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(weak_references_are_caught, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(a_misbehaving_reference_is_an_error, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(served_reference_runs_past_the_callers_file_limit, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(large_tasks_hit_limits_not_quadratic_time, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(files_outside_the_task_folder_are_refused, setup_dir, teardown_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
