/* The gate's worker without a GPU: job parsing errors, the no-GPU result, the device
 * runtime compiling with nvcc (kl_runtime_build), and the checks on kernel objects
 * (shim ABI, interposed symbols, threads). Tests that need nvcc or cc skip with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gate/gate_int.h"
#include "gate/worker.h"
#include "util/util.h"

static char *tmp_root;

static int setup(void **state)
{
    (void)state;
    kl_error err = {0};
    return kl_tempdir("worker-test", &tmp_root, &err) == KL_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    kl_remove_tree(tmp_root, NULL);
    free(tmp_root);
    return 0;
}

/* Run a job; returns the exit code, *doc the parsed result (json_decref). */
static int run_job(const char *job, json_t **doc)
{
    char *out = NULL;
    int code = kl_worker_run(job, strlen(job), &out);
    assert_non_null(out);
    json_error_t e;
    *doc = json_loads(out, 0, &e);
    if (!*doc) fprintf(stderr, "result is not JSON: %s\n%s\n", e.text, out);
    assert_non_null(*doc);
    free(out);
    return code;
}

static const char *err_field(json_t *doc, const char *key)
{
    json_t *e = json_object_get(doc, "error");
    assert_true(json_is_object(e));
    json_t *v = json_object_get(e, key);
    return json_is_string(v) ? json_string_value(v) : "";
}

static void job_errors(void **state)
{
    (void)state;
    struct {
        const char *job;
        const char *expect;   /* in error.detail */
    } cases[] = {
        {"{\"job\": ", "line 1"},
        {"[1, 2]", "expected a JSON object"},
        {"{\"runtime\": \"x.so\"}", "\"job\" is required"},
        {"{\"job\": \"dance\"}", "gate or gpu-info, not \"dance\""},
        {"{\"job\": \"gpu-info\", \"runtime\": \"x.so\", \"rpes\": 3}", "unknown key \"rpes\""},
        {"{\"job\": \"gpu-info\", \"runtime\": \"x.so\", \"reps\": 0}", "\"reps\" is 0"},
        {"{\"job\": \"gate\", \"runtime\": \"x.so\", \"candidate\": \"c.so\", \"shapes\": [\"bench\"]}",
         "\"task_dir\" is required"},
        {"{\"job\": \"gate\", \"runtime\": \"x.so\", \"task_dir\": \"t\", \"candidate\": \"c.so\", \"shapes\": []}",
         "\"shapes\" must be a non-empty array"},
        {"{\"job\": \"gate\", \"runtime\": \"x.so\", \"task_dir\": \"t\", \"candidate\": \"c.so\", \"shapes\": [\"bench\"], "
         "\"stages\": {\"corect\": true}}",
         "stages: unknown key \"corect\""},
        {"{\"job\": \"gate\", \"runtime\": \"x.so\", \"task_dir\": \"t\", \"candidate\": \"c.so\", \"shapes\": [\"bench\"], "
         "\"stages\": {\"profile\": {\"min_reps\": \"many\"}}}",
         "\"min_reps\" must be a number"},
        {"{\"job\": \"gate\", \"runtime\": \"x.so\", \"task_dir\": \"t\", \"candidate\": \"c.so\", \"shapes\": [\"bench\"], "
         "\"baseline\": \"b.so\", \"baseline_builtin\": \"cublas-sgemm\"}",
         "not both"},
        {"{\"job\": \"gate\", \"runtime\": \"x.so\", \"task_dir\": \"t\", \"candidate\": \"c.so\", \"shapes\": [\"bench\"], "
         "\"timer\": \"sundial\"}",
         "cupti or events"},
        {"{\"job\": \"gate\", \"task_dir\": \"t\", \"candidate\": \"c.so\", \"shapes\": [\"bench\"]}",
         "give \"runtime\""},
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *doc;
        int code = run_job(cases[i].job, &doc);
        const char *detail = err_field(doc, "detail");
        if (!strstr(detail, cases[i].expect))
            fprintf(stderr, "case %u: expected \"%s\" in \"%s\"\n", i, cases[i].expect, detail);
        assert_non_null(strstr(detail, cases[i].expect));
        assert_int_equal(code, KL_WORKER_EXIT_JOB);
        assert_string_equal(err_field(doc, "stage"), "job");
        json_decref(doc);
    }
}

static void missing_runtime_is_a_harness_failure(void **state)
{
    (void)state;
    char *rt = kl_path_join(tmp_root, "no-such-runtime.so");
    char job[1024];
    kl_snprintf(job, sizeof job, "{\"job\": \"gpu-info\", \"runtime\": \"%s\", \"cache_dir\": \"%s\"}", rt, tmp_root);
    json_t *doc;
    int code = run_job(job, &doc);
    assert_int_equal(code, KL_WORKER_EXIT_HARNESS);
    assert_string_equal(err_field(doc, "stage"), "init");
    assert_non_null(strstr(err_field(doc, "detail"), rt));
    json_decref(doc);
    free(rt);
}

static const char *find_nvcc(void)
{
    static char buf[512];
    const char *env = getenv("KLINEAGE_NVCC");
    if (env && access(env, X_OK) == 0) return env;
    if (access("/usr/local/cuda/bin/nvcc", X_OK) == 0) return "/usr/local/cuda/bin/nvcc";
    FILE *p = popen("command -v nvcc 2>/dev/null", "r");
    if (!p) return NULL;
    const char *r = NULL;
    if (fgets(buf, sizeof buf, p)) {
        buf[strcspn(buf, "\n")] = '\0';
        if (*buf) r = buf;
    }
    pclose(p);
    return r;
}

static bool have_gpu_device(void) { return access("/dev/nvidiactl", F_OK) == 0; }

/* runtime.cu compiles with nvcc; a second build is served from the cache; without a GPU
 * the worker answers with the no-GPU result and exit code 3. */
static void runtime_builds_and_no_gpu_result(void **state)
{
    (void)state;
    const char *nvcc = find_nvcc();
    if (!nvcc) {
        printf("skipped: nvcc not found (set KLINEAGE_NVCC)\n");
        skip();
    }
    char *cache = kl_path_join(tmp_root, "cache");
    char *so = NULL, *so2 = NULL;
    kl_error err = {0};
    kl_status st = kl_runtime_build(nvcc, "sm_90", cache, &so, &err);
    if (st != KL_OK) fprintf(stderr, "%s\n", err.message);
    assert_int_equal(st, KL_OK);
    assert_true(kl_file_exists(so));
    assert_true(kl_str_starts(so, cache));
    struct stat s1, s2;
    assert_int_equal(stat(so, &s1), 0);
    double t0 = kl_now();
    assert_int_equal(kl_runtime_build(nvcc, "sm_90", cache, &so2, &err), KL_OK);
    assert_string_equal(so, so2);
    assert_int_equal(stat(so2, &s2), 0);
    assert_true(s1.st_mtim.tv_sec == s2.st_mtim.tv_sec && s1.st_mtim.tv_nsec == s2.st_mtim.tv_nsec);
    assert_true(kl_now() - t0 < 30.0); /* nvcc --version only */
    free(so2);
    /* the arch is part of the key (and of the name) */
    assert_non_null(strstr(so, "-sm_90/"));
    /* a malformed arch never reaches nvcc */
    assert_int_equal(kl_runtime_build(nvcc, "sm_90; rm -rf /", cache, &so2, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "arch"));

    /* the runtime resolves every entry point of runtime.h with the right ABI */
    kl_rt_api api;
    st = kl_rt_api_load(so, &api, &err);
    if (st != KL_OK) fprintf(stderr, "%s\n", err.message);
    assert_int_equal(st, KL_OK);
    assert_int_equal(api.abi(), KL_RT_ABI);
    kl_rt_api_unload(&api);

    char job[2048];
    kl_snprintf(job, sizeof job, "{\"job\": \"gpu-info\", \"runtime\": \"%s\", \"cache_dir\": \"%s\", \"reps\": 3}", so,
                cache);
    json_t *doc;
    int code = run_job(job, &doc);
    if (have_gpu_device() && code == KL_WORKER_EXIT_OK) {
        printf("note: a GPU is present; the no-GPU path was not exercised\n");
        assert_true(json_is_object(json_object_get(doc, "device")));
        assert_true(json_is_object(json_object_get(doc, "ceilings")));
    } else {
        assert_int_equal(code, KL_WORKER_EXIT_NO_GPU);
        assert_string_equal(err_field(doc, "stage"), "init");
        assert_true(kl_str_starts(err_field(doc, "detail"), "no CUDA device: "));
        assert_null(json_object_get(doc, "device"));
    }
    json_decref(doc);

    /* and through "nvcc" + "arch": the worker builds the runtime itself (from the cache now) */
    kl_snprintf(job, sizeof job,
                "{\"job\": \"gate\", \"nvcc\": \"%s\", \"arch\": \"sm_90\", \"cache_dir\": \"%s\", \"task_dir\": \"%s\", "
                "\"candidate\": \"c.so\", \"shapes\": [\"bench\"]}",
                nvcc, cache, tmp_root);
    code = run_job(job, &doc);
    if (!(have_gpu_device() && code != KL_WORKER_EXIT_NO_GPU)) {
        assert_int_equal(code, KL_WORKER_EXIT_NO_GPU);
        assert_true(kl_str_starts(err_field(doc, "detail"), "no CUDA device: "));
    }
    json_decref(doc);
    free(so);
    free(cache);
}

/* Compile a small C shared object with the host compiler; NULL when there is none. */
static char *build_object(const char *name, const char *source)
{
    char *src = kl_path_join(tmp_root, name);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "%s.c", src);
    char *c = kl_strbuf_detach(&sb, NULL);
    kl_strbuf_addf(&sb, "%s.so", src);
    char *so = kl_strbuf_detach(&sb, NULL);
    kl_error err = {0};
    assert_int_equal(kl_file_write(c, source, strlen(source), &err), KL_OK);
    const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
    const char *argv[] = {cc, "-shared", "-fPIC", "-O1", "-o", so, c, "-lpthread", NULL};
    kl_child ch;
    kl_child_init(&ch);
    ch.argv = argv;
    ch.timeout_s = 60;
    ch.merge_stderr = true;
    bool ok = kl_child_run(&ch, &err) == KL_OK && ch.exit_code == 0;
    if (!ok) fprintf(stderr, "cc failed: %s\n", kl_strbuf_str(&ch.out));
    kl_child_release(&ch);
    free(src);
    free(c);
    if (!ok) {
        free(so);
        return NULL;
    }
    return so;
}

#define SHIM_OK                                                                                    \
    "int kl_shim_launch(void *const *args, void *stream) { (void)args; (void)stream; return 0; }\n" \
    "const char *kl_shim_abi(void) { return \"klineage-shim-1\"; }\n"

static void shim_objects_checked(void **state)
{
    (void)state;
    char *good = build_object("good", "#include <stddef.h>\n" SHIM_OK);
    if (!good) {
        printf("skipped: no host C compiler\n");
        skip();
    }
    kl_shim_object obj;
    kl_error err = {0};
    assert_int_equal(kl_shim_object_load(good, &obj, &err), KL_OK);
    assert_non_null(obj.launch);
    assert_int_equal(obj.launch(NULL, NULL), 0);

    /* a clean object interposes nothing */
    kl_symbol_snapshot snap;
    kl_symbols_snapshot(NULL, &snap);
    assert_true(snap.n > 10);
    kl_strbuf why = KL_STRBUF_INIT;
    assert_true(kl_symbols_check(NULL, &snap, &obj, &why));
    assert_int_equal(why.len, 0);
    kl_shim_object_unload(&obj);

    char *noabi = build_object("noabi",
                               "int kl_shim_launch(void *const *a, void *s) { (void)a; (void)s; return 0; }\n");
    assert_int_equal(kl_shim_object_load(noabi, &obj, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "kl_shim_abi"));
    char *oldabi = build_object("oldabi", "int kl_shim_launch(void *const *a, void *s) { (void)a; (void)s; return 0; }\n"
                                          "const char *kl_shim_abi(void) { return \"klineage-shim-0\"; }\n");
    assert_int_equal(kl_shim_object_load(oldabi, &obj, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "klineage-shim-0"));

    /* an object that defines memcmp (to make every comparison succeed) is caught */
    char *cheat = build_object("cheat", "#include <stddef.h>\n" SHIM_OK
                                        "int memcmp(const void *a, const void *b, size_t n) { (void)a; (void)b; (void)n; return 0; }\n");
    assert_int_equal(kl_shim_object_load(cheat, &obj, &err), KL_OK);
    kl_strbuf_reset(&why);
    assert_false(kl_symbols_check(NULL, &snap, &obj, &why));
    assert_non_null(strstr(kl_strbuf_str(&why), "memcmp"));
    /* and the harness's own binding did not move */
    assert_null(strstr(kl_strbuf_str(&why), "resolves elsewhere"));
    kl_shim_object_unload(&obj);
    kl_strbuf_release(&why);
    free(good);
    free(noabi);
    free(oldabi);
    free(cheat);
}

static void *idle_thread(void *arg)
{
    volatile int *stop = arg;
    while (!*stop) usleep(1000);
    return NULL;
}

/* A thread started after the snapshot is reported, by id and name; a thread named like the
 * CUDA driver's is left out when asked. */
static void threads_are_counted(void **state)
{
    (void)state;
    kl_thread_set before, after;
    kl_error err = {0};
    assert_int_equal(kl_threads_list(&before, &err), KL_OK);
    assert_true(before.n >= 1);
    volatile int stop = 0;
    pthread_t t1, t2;
    assert_int_equal(pthread_create(&t1, NULL, idle_thread, (void *)&stop), 0);
    assert_int_equal(pthread_create(&t2, NULL, idle_thread, (void *)&stop), 0);
    pthread_setname_np(t1, "sneaky");
    pthread_setname_np(t2, "cuda-EvtHandlr");
    assert_int_equal(kl_threads_list(&after, &err), KL_OK);
    kl_strbuf sb = KL_STRBUF_INIT;
    assert_int_equal(kl_threads_new(&before, &after, false, &sb), 2);
    kl_strbuf_reset(&sb);
    assert_int_equal(kl_threads_new(&before, &after, true, &sb), 1);
    assert_non_null(strstr(kl_strbuf_str(&sb), "sneaky"));
    assert_null(strstr(kl_strbuf_str(&sb), "cuda"));
    assert_int_equal(kl_threads_new(&after, &after, false, &sb), 0);
    stop = 1;
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    kl_strbuf_release(&sb);
    kl_threads_free(&before);
    kl_threads_free(&after);
}

/* The real binary: bad input gives exit 1 and a JSON error on stdout. */
static void worker_binary(void **state)
{
    (void)state;
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    char *dir = kl_path_dirname(self);
    char *up = kl_path_dirname(dir);
    char *worker = kl_path_join(up, "klineage-worker");
    const char *env = getenv("KLINEAGE_WORKER");
    const char *bin = env && *env ? env : worker;
    if (access(bin, X_OK) != 0) {
        printf("skipped: %s not built\n", bin);
        free(dir);
        free(up);
        free(worker);
        skip();
    }
    const char *argv[] = {bin, NULL};
    kl_child ch;
    kl_child_init(&ch);
    ch.argv = argv;
    ch.stdin_data = "{\"job\": 42}";
    ch.stdin_len = strlen(ch.stdin_data);
    ch.timeout_s = 60;
    kl_error err = {0};
    assert_int_equal(kl_child_run(&ch, &err), KL_OK);
    assert_int_equal(ch.exit_code, KL_WORKER_EXIT_JOB);
    json_t *doc = json_loads(kl_strbuf_str(&ch.out), 0, NULL);
    assert_non_null(doc);
    assert_non_null(strstr(err_field(doc, "detail"), "\"job\" must be a string"));
    json_decref(doc);
    kl_child_release(&ch);
    free(dir);
    free(up);
    free(worker);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(job_errors),
        cmocka_unit_test(missing_runtime_is_a_harness_failure),
        cmocka_unit_test(runtime_builds_and_no_gpu_result),
        cmocka_unit_test(shim_objects_checked),
        cmocka_unit_test(threads_are_counted),
        cmocka_unit_test(worker_binary),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
