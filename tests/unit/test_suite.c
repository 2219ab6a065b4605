/* tasks/: the built-in suite. Every task folder loads and validates with kl_task_load, its
 * reference.c compiles as plain C11, and (when nvcc is present) every naive.cu and expert.cu
 * compiles for sm_90 (sm_90a where it uses wgmma, as the gate compiles it) without warnings and without
 * register spills. No GPU needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate/gate_int.h"
#include "klineage/task.h"
#include "util/util.h"

static const char *const suite[] = {"sgemm", "hgemm", "softmax", "layernorm",
                                    "reduce_sum", "transpose", "blur", "histogram"};
#define SUITE_SIZE (sizeof suite / sizeof suite[0])

/* tasks/<name> under the source tree, new string. */
static char *task_dir(const char *name)
{
    const char *src = getenv("KL_SOURCE_DIR");
    assert_non_null(src);
    char *tasks = kl_path_join(src, "tasks");
    char *dir = kl_path_join(tasks, name);
    free(tasks);
    return dir;
}

/* nvcc from $KL_NVCC, the usual install folder, or PATH; NULL when there is none. New string. */
static char *find_nvcc(void)
{
    const char *env = getenv("KL_NVCC");
    if (env && env[0]) return kl_file_exists(env) ? kl_strdup(env) : NULL;
    if (access("/usr/local/cuda/bin/nvcc", X_OK) == 0) return kl_strdup("/usr/local/cuda/bin/nvcc");
    const char *path = getenv("PATH");
    if (!path) return NULL;
    char *copy = kl_strdup(path), *save = NULL, *found = NULL;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char *p = kl_path_join(d[0] ? d : ".", "nvcc");
        if (access(p, X_OK) == 0) found = p;
        else free(p);
    }
    free(copy);
    return found;
}

static void every_task_loads_and_validates(void **state)
{
    (void)state;
    for (size_t i = 0; i < SUITE_SIZE; i++) {
        char *dir = task_dir(suite[i]);
        kl_task *t = NULL;
        kl_error err = {0};
        kl_status st = kl_task_load(dir, &t, &err);
        if (st != KL_OK) fail_msg("%s: %s", dir, err.message);
        assert_non_null(t);
        assert_string_equal(t->name, suite[i]);
        assert_non_null(t->naive);
        assert_non_null(t->expert);
        assert_string_equal(t->naive, "naive.cu");
        assert_string_equal(t->expert, "expert.cu");
        assert_non_null(t->cost_flops);
        assert_non_null(t->cost_bytes);
        /* Several check shapes: tiny, odd and non-square ones. */
        assert_true(t->nchecks >= 8);
        assert_true(t->exact || t->rel_l2 > 0);

        /* Every tensor has a positive element count at the bench shape and at every check shape,
         * and the cost expressions evaluate everywhere. */
        for (unsigned s = 0; s <= t->nchecks; s++) {
            const kl_shape *shape = s == t->nchecks ? &t->bench : &t->checks[s];
            for (unsigned a = 0; a < t->nargs; a++) {
                if (t->args[a].dtype == KL_DTYPE_NONE) continue;
                int64_t count = 0;
                st = kl_task_arg_count(t, shape, a, &count, &err);
                if (st != KL_OK) fail_msg("%s %s arg %s: %s", suite[i], shape->label, t->args[a].name, err.message);
                assert_true(count > 0);
            }
            int64_t flops = -1, bytes = -1;
            assert_int_equal(kl_task_eval(t, shape, t->cost_flops, &flops, &err), KL_OK);
            assert_int_equal(kl_task_eval(t, shape, t->cost_bytes, &bytes, &err), KL_OK);
            assert_true(flops >= 0);
            assert_true(bytes > 0);
        }
        kl_task_free(t);
        free(dir);
    }
}

/* The largest value of the tiniest dimension over the check shapes is small: every task is
 * checked at a size of 1 somewhere (the tiny case), and at a size that is not a multiple of 2. */
static void every_task_checks_tiny_and_odd_shapes(void **state)
{
    (void)state;
    for (size_t i = 0; i < SUITE_SIZE; i++) {
        char *dir = task_dir(suite[i]);
        kl_task *t = NULL;
        kl_error err = {0};
        if (kl_task_load(dir, &t, &err) != KL_OK) fail_msg("%s: %s", dir, err.message);
        bool all_ones = false, odd_large = false;
        for (unsigned s = 0; s < t->nchecks; s++) {
            bool ones = true;
            for (unsigned z = 0; z < t->nsizes; z++) {
                int64_t v = t->checks[s].values[z];
                if (v != 1) ones = false;
                if (v > 256 && v % 2 == 1) odd_large = true;
            }
            if (ones) all_ones = true;
        }
        if (!all_ones) fail_msg("%s: no check shape with every size 1", suite[i]);
        if (!odd_large) fail_msg("%s: no check shape with an odd size above 256", suite[i]);
        kl_task_free(t);
        free(dir);
    }
}

/* Run argv; on a non-zero exit fail with its output. Returns the captured output (free()). */
static char *run_or_fail(const char *const *argv, const char *what)
{
    kl_child c;
    kl_child_init(&c);
    c.argv = argv;
    c.merge_stderr = true;
    c.timeout_s = 300;
    kl_error err = {0};
    if (kl_child_run(&c, &err) != KL_OK) fail_msg("%s: %s", what, err.message);
    char how[64];
    kl_child_describe(&c, how, sizeof how);
    if (c.exit_code != 0) fail_msg("%s: %s\n%s", what, how, kl_strbuf_str(&c.out));
    char *out = kl_strdup(kl_strbuf_str(&c.out));
    kl_child_release(&c);
    return out;
}

static void every_reference_compiles_as_c11(void **state)
{
    (void)state;
    char *tmp = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("suite-ref", &tmp, &err), KL_OK);
    const char *cc = getenv("CC");
    if (!cc || !cc[0]) cc = "cc";
    for (size_t i = 0; i < SUITE_SIZE; i++) {
        char *dir = task_dir(suite[i]);
        char *src = kl_path_join(dir, "reference.c");
        char *obj = kl_path_join(tmp, "reference.o");
        const char *argv[] = {cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-c", src, "-o", obj, NULL};
        char *out = run_or_fail(argv, src);
        free(out);
        free(obj);
        free(src);
        free(dir);
    }
    kl_remove_tree(tmp, &err);
    free(tmp);
}

/* Every "N bytes spill stores" / "N bytes spill loads" in a ptxas report has N == 0. */
static void assert_no_spills(const char *report, const char *file)
{
    for (const char *p = strstr(report, "bytes spill"); p; p = strstr(p + 1, "bytes spill")) {
        const char *q = p;
        while (q > report && q[-1] == ' ') q--;
        const char *num_end = q;
        while (q > report && q[-1] >= '0' && q[-1] <= '9') q--;
        if (q == num_end) fail_msg("%s: unreadable ptxas report near \"%.40s\"", file, p);
        if (strtol(q, NULL, 10) != 0) fail_msg("%s: register spills\n%s", file, report);
    }
}

/* tests/nvcc_batch.py's file DIR/<i>.<ext>, new string (NULL when it is not there). */
static char *batch_file(const char *dir, size_t i, const char *ext)
{
    char name[64];
    kl_snprintf(name, sizeof name, "%zu.%s", i, ext);
    char *p = kl_path_join(dir, name), *text = NULL;
    size_t len;
    kl_error err = {0};
    if (kl_file_read(p, 0, &text, &len, &err) != KL_OK) text = NULL;
    free(p);
    return text;
}

/* Every naive.cu and expert.cu compiles (host and device code, ptxas -v) for the gate's own choice
 * of target, several files to a translation unit (tests/nvcc_batch.py: most of a file's nvcc time
 * is the CUDA headers; a unit that says anything against a file is compiled again file by file). */
static void every_kernel_compiles_for_sm90(void **state)
{
    (void)state;
    char *nvcc = find_nvcc();
    if (!nvcc) {
        print_message("nvcc not found (set KL_NVCC): kernel compile checks skipped\n");
        skip();
        return;
    }
    char *tmp = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("suite-nvcc", &tmp, &err), KL_OK);
    static const char *const files[] = {"naive.cu", "expert.cu"};
    enum { NFILES = SUITE_SIZE * 2 };
    char *src[NFILES];
    const char *src_arg[NFILES];
    for (size_t i = 0; i < SUITE_SIZE; i++) {
        char *dir = task_dir(suite[i]);
        for (size_t f = 0; f < 2; f++) src[2 * i + f] = kl_path_join(dir, files[f]);
        free(dir);
    }
    for (size_t k = 0; k < NFILES; k++) src_arg[k] = src[k];
    char *helper = kl_path_join(getenv("KL_SOURCE_DIR"), "tests/nvcc_batch.py");
    const char *argv[8 + NFILES] = {"python3", helper, "--nvcc", nvcc, "--out", tmp, "--flag=-c"};
    for (size_t k = 0; k < NFILES; k++) argv[7 + k] = src_arg[k];
    argv[7 + NFILES] = NULL;
    free(run_or_fail(argv, "tests/nvcc_batch.py"));
    for (size_t k = 0; k < NFILES; k++) {
        /* the gate's own choice of target: sm_90, or sm_90a for a file using wgmma (kl_source_arch) */
        char *text = NULL;
        size_t tlen;
        assert_int_equal(kl_file_read(src[k], 0, &text, &tlen, &err), KL_OK);
        char *arch = kl_source_arch("sm_90", text);
        char archf[96];
        const char *gate_flags[16];
        assert_non_null(arch);
        unsigned nf = kl_nvcc_flags(arch, archf, sizeof archf, gate_flags, 16);
        char *used = batch_file(tmp, k, "arch"), *rc = batch_file(tmp, k, "rc"), *out = batch_file(tmp, k, "log");
        if (!used || !rc || !out) fail_msg("%s: tests/nvcc_batch.py left no result", src[k]);
        used[strcspn(used, "\n")] = '\0';
        if (strcmp(used, gate_flags[nf - 1])) fail_msg("%s: compiled with %s, the gate uses %s", src[k], used, gate_flags[nf - 1]);
        if (atoi(rc) != 0) fail_msg("%s: nvcc exit %d\n%s", src[k], atoi(rc), out);
        if (strstr(out, "warning")) fail_msg("%s: compiler warnings\n%s", src[k], out);
        assert_non_null(strstr(out, "Used")); /* the ptxas report came back */
        assert_no_spills(out, src[k]);
        free(used);
        free(rc);
        free(out);
        free(arch);
        free(text);
        free(src[k]);
    }
    free(helper);
    kl_remove_tree(tmp, &err);
    free(tmp);
    free(nvcc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_task_loads_and_validates),
        cmocka_unit_test(every_task_checks_tiny_and_odd_shapes),
        cmocka_unit_test(every_reference_compiles_as_c11),
        cmocka_unit_test(every_kernel_compiles_for_sm90),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
