/* The gate's worker without a GPU: job parsing errors, the no-GPU result, the device
 * runtime compiling with nvcc (kl_runtime_build), and the checks on kernel objects
 * (shim ABI, interposed symbols, threads). Tests that need nvcc or cc skip with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gate/gate_int.h"
#include "gate/sandbox.h"
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

/* Fills on the pool's threads equal one whole single-threaded fill, bit for bit, for every
 * distribution and dtype, at sizes that are and are not a multiple of the chunk. */
static void parallel_fill_is_bit_identical(void **state)
{
    (void)state;
    char *dir = kl_path_join(tmp_root, "filltask");
    kl_error err = {0};
    assert_int_equal(kl_mkdirs(dir, &err), KL_OK);
    const char *json =
        "{\"name\": \"fills\", \"sizes\": [\"n\"], \"args\": ["
        "{\"name\": \"a\", \"type\": \"f32*\", \"shape\": \"n\", \"role\": \"in\", "
        "\"init\": {\"dist\": \"normal\", \"mean\": 1, \"std\": 3}},"
        "{\"name\": \"b\", \"type\": \"bf16*\", \"shape\": \"n\", \"role\": \"in\", "
        "\"init\": {\"dist\": \"uniform\", \"lo\": -2, \"hi\": 5}},"
        "{\"name\": \"c\", \"type\": \"i32*\", \"shape\": \"n\", \"role\": \"inout\", "
        "\"init\": {\"dist\": \"int_uniform\", \"lo\": -7, \"hi\": \"n\"}},"
        "{\"name\": \"d\", \"type\": \"f16*\", \"shape\": \"n\", \"role\": \"in\", "
        "\"init\": {\"dist\": \"normal\", \"mean\": 0, \"std\": 1}},"
        "{\"name\": \"y\", \"type\": \"f32*\", \"shape\": \"n\", \"role\": \"out\"},"
        "{\"name\": \"n\", \"type\": \"int\", \"value\": \"n\"}],"
        "\"shapes\": {\"bench\": {\"n\": 3145729}, \"check\": [{\"n\": 1}, {\"n\": 2097152}, {\"n\": 1000}]},"
        "\"tolerance\": {\"rel_l2\": 1e-6}}";
    char *tj = kl_path_join(dir, "task.json"), *rc = kl_path_join(dir, "reference.c");
    assert_int_equal(kl_file_write(tj, json, strlen(json), &err), KL_OK);
    const char *ref = "#include <stdint.h>\nvoid reference(const double *a, const double *b, int32_t *c, const double *d, "
                      "double *y, int n) { for (int i = 0; i < n; i++) y[i] = a[i] + b[i] + c[i] + d[i]; }\n";
    assert_int_equal(kl_file_write(rc, ref, strlen(ref), &err), KL_OK);
    kl_task *t = NULL;
    if (kl_task_load(dir, &t, &err) != KL_OK) fail_msg("%s", err.message);
    kl_pool *pool = NULL;
    assert_int_equal(kl_pool_start(4, &pool, &err), KL_OK);
    assert_int_equal(kl_pool_threads(pool), 4);
    const kl_shape *shapes[] = {&t->bench, &t->checks[0], &t->checks[1], &t->checks[2]};
    for (unsigned k = 0; k < 4; k++) {
        const kl_shape *sh = shapes[k];
        for (unsigned arg = 0; arg < 4; arg++) {
            int64_t n;
            assert_int_equal(kl_task_arg_count(t, sh, arg, &n, &err), KL_OK);
            size_t bytes = (size_t)n * kl_dtype_size(t->args[arg].dtype);
            unsigned char *one = malloc(bytes), *many = malloc(bytes), *here = malloc(bytes);
            assert_non_null(one);
            assert_non_null(many);
            assert_non_null(here);
            memset(many, 0x5A, bytes);
            memset(here, 0xA5, bytes);
            assert_int_equal(kl_task_fill(t, sh, arg, 99, one, n, &err), KL_OK);
            assert_int_equal(kl_fill_parallel(pool, t, sh, arg, 99, many, n, &err), KL_OK);
            assert_int_equal(kl_fill_parallel(NULL, t, sh, arg, 99, here, n, &err), KL_OK);
            assert_memory_equal(one, many, bytes);
            assert_memory_equal(one, here, bytes);
            free(one);
            free(many);
            free(here);
        }
    }
    /* a wrong count is refused before anything is queued */
    float small[4];
    assert_int_equal(kl_fill_parallel(pool, t, &t->bench, 0, 1, small, 4, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "buffer holds 4 elements"));
    /* the pool counted its work, and is idle afterwards */
    kl_pool_wait_idle(pool);
    assert_true(kl_pool_busy_seconds(pool) > 0);
    kl_pool_stop(pool);
    kl_task_free(t);
    free(tj);
    free(rc);
    free(dir);
}

static void count_task(void *arg)
{
    int *n = arg;
    __atomic_add_fetch(n, 1, __ATOMIC_SEQ_CST);
}

/* The pool's threads are started before the hygiene snapshot: work on them afterwards is the
 * harness's and never counted against a candidate. A library the harness loads after the
 * snapshot (RTLD_LOCAL, as the runtime loads cuBLAS) moves no binding of the harness. */
static void harness_threads_and_late_libraries_are_not_blamed(void **state)
{
    (void)state;
    kl_error err = {0};
    kl_pool *pool = NULL;
    assert_int_equal(kl_pool_start(3, &pool, &err), KL_OK);
    kl_thread_set before, after;
    assert_int_equal(kl_threads_list(&before, &err), KL_OK);
    kl_symbol_snapshot snap;
    kl_symbols_snapshot(NULL, &snap);
    int n = 0;
    for (int i = 0; i < 100; i++) assert_int_equal(kl_pool_submit(pool, count_task, &n, &err), KL_OK);
    kl_pool_wait_idle(pool);
    assert_int_equal(__atomic_load_n(&n, __ATOMIC_SEQ_CST), 100);
    assert_int_equal(kl_threads_list(&after, &err), KL_OK);
    kl_strbuf sb = KL_STRBUF_INIT;
    assert_int_equal(kl_threads_new(&before, &after, true, &sb), 0);
    kl_threads_free(&after);

    /* a library loaded late, defining memcmp and malloc of its own */
    char *lib = build_object("late", "#include <stddef.h>\n"
                                     "int memcmp(const void *a, const void *b, size_t n) { (void)a; (void)b; (void)n; return 0; }\n"
                                     "int late_answer(void) { return 42; }\n");
    if (lib) {
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        assert_non_null(h);
        kl_strbuf_reset(&sb);
        assert_true(kl_symbols_check(NULL, &snap, NULL, &sb));
        assert_int_equal(sb.len, 0);
        dlclose(h);
        free(lib);
    } else {
        printf("note: no host C compiler; the late library was not tried\n");
    }
    kl_pool_stop(pool);
    /* the pool's threads are gone once it is stopped */
    assert_int_equal(kl_threads_list(&after, &err), KL_OK);
    assert_true(after.n <= before.n - 3);
    kl_strbuf_release(&sb);
    kl_threads_free(&before);
    kl_threads_free(&after);
}

/* Every result carries "timings", also a job that was refused. */
static void timings_always_reported(void **state)
{
    (void)state;
    json_t *doc;
    int code = run_job("{\"job\": \"gate\", \"runtime\": \"x.so\", \"task_dir\": \"t\", \"candidate\": \"c.so\", "
                       "\"shapes\": [\"bench\"], \"stages\": {\"profile\": {\"settle_rel\": 2}}}",
                       &doc);
    assert_int_equal(code, KL_WORKER_EXIT_JOB);
    assert_non_null(strstr(err_field(doc, "detail"), "\"settle_rel\" is 2"));
    json_t *t = json_object_get(doc, "timings");
    assert_true(json_is_object(t));
    assert_true(json_is_real(json_object_get(t, "total")));
    assert_true(json_real_value(json_object_get(t, "total")) >= 0);
    static const char *const keys[] = {"parse", "runtime_load", "cuda_init", "cupti_init", "cublas_init",
                                       "candidate_load", "correct", "determinism", "integrity", "stream",
                                       "profile", "fills_cpu", "references_cpu", "wait_inputs",
                                       "wait_reference", "profile_reps", "profile_stopped", NULL};
    for (const char *const *k = keys; *k; k++) {
        if (!json_object_get(t, *k)) fprintf(stderr, "timings.%s is missing\n", *k);
        assert_non_null(json_object_get(t, *k));
    }
    json_decref(doc);
}

/* klineage-worker beside the tests' folder, or $KLINEAGE_WORKER; NULL when not built. */
static char *worker_bin(void)
{
    const char *env = getenv("KLINEAGE_WORKER");
    if (env && *env) return access(env, X_OK) == 0 ? kl_strdup(env) : NULL;
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return NULL;
    self[n] = '\0';
    char *dir = kl_path_dirname(self), *up = dir ? kl_path_dirname(dir) : NULL;
    char *bin = up ? kl_path_join(up, "klineage-worker") : NULL;
    free(dir), free(up);
    if (bin && access(bin, X_OK) != 0) free(bin), bin = NULL;
    return bin;
}

/* The sandbox itself, applied to a child of this test: everything a candidate may not do is
 * refused, and what the worker needs (its scratch folder, reading what it was given) is not.
 * Each attempt's outcome is one bit sent back on a pipe. */
enum {
    SB_WRITE_SCRATCH = 1 << 0,  /* allowed */
    SB_READ_GIVEN = 1 << 1,     /* allowed */
    SB_CREATE_OUTSIDE = 1 << 2, /* the rest: refused */
    SB_UNLINK_OUTSIDE = 1 << 3,
    SB_READ_OUTSIDE = 1 << 4,
    SB_SOCKET_INET = 1 << 5,
    SB_RAW_SOCKET = 1 << 6,
    SB_FORK = 1 << 7,
    SB_EXEC = 1 << 8,
    SB_CHMOD = 1 << 9,
    SB_KILL_PARENT = 1 << 10,
    SB_THREAD = 1 << 11,        /* allowed: the driver starts threads */
};

static void *sb_thread(void *arg) { return arg; }

static unsigned sandbox_attempts(const char *scratch, const char *given, const char *outside, bool try_exec)
{
    unsigned got = 0;
    char path[4200];
    kl_snprintf(path, sizeof path, "%s/mine", scratch);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0 && write(fd, "x", 1) == 1) got |= SB_WRITE_SCRATCH;
    if (fd >= 0) close(fd);
    kl_snprintf(path, sizeof path, "%s/input", given);
    fd = open(path, O_RDONLY);
    if (fd >= 0) got |= SB_READ_GIVEN, close(fd);
    kl_snprintf(path, sizeof path, "%s/created", outside);
    fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) got |= SB_CREATE_OUTSIDE, close(fd);
    kl_snprintf(path, sizeof path, "%s/victim", outside);
    if (unlink(path) == 0) got |= SB_UNLINK_OUTSIDE;
    kl_snprintf(path, sizeof path, "%s/secret", outside);
    fd = open(path, O_RDONLY);
    if (fd >= 0) got |= SB_READ_OUTSIDE, close(fd);
    int so = socket(AF_INET, SOCK_STREAM, 0);
    if (so >= 0) got |= SB_SOCKET_INET, close(so);
    long raw = syscall(SYS_socket, AF_INET6, SOCK_DGRAM, 0);
    if (raw >= 0) got |= SB_RAW_SOCKET, close((int)raw);
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    if (pid > 0) got |= SB_FORK, waitpid(pid, NULL, 0);
    char *const argv[] = {(char *)"/bin/true", NULL};
    /* when it works it never returns: the process is /bin/true, whose exit the parent sees */
    if (try_exec && syscall(SYS_execve, "/bin/true", argv, NULL) == 0) got |= SB_EXEC;
    kl_snprintf(path, sizeof path, "%s/keep", outside);
    if (chmod(path, 0777) == 0) got |= SB_CHMOD;
    if (kill(getppid(), 0) == 0) got |= SB_KILL_PARENT;
    pthread_t t;
    if (pthread_create(&t, NULL, sb_thread, NULL) == 0) got |= SB_THREAD, pthread_join(t, NULL);
    return got;
}

static void sandbox_refuses_in_a_child(void **state)
{
    (void)state;
    /* outside: a folder of its own (tmp_root holds objects this process mapped, which the
     * sandbox lets it read) */
    char *scratch = kl_path_join(tmp_root, "sb-scratch"), *given = kl_path_join(tmp_root, "sb-given"), *outside = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("sb-outside", &outside, &err), KL_OK);
    assert_int_equal(kl_mkdirs(scratch, &err), KL_OK);
    assert_int_equal(kl_mkdirs(given, &err), KL_OK);
    assert_int_equal(kl_mkdirs(outside, &err), KL_OK);
    char *in = kl_path_join(given, "input"), *victim = kl_path_join(outside, "victim"),
         *secret = kl_path_join(outside, "secret"), *keep = kl_path_join(outside, "keep");
    assert_int_equal(kl_file_write(in, "in", 2, &err), KL_OK);
    assert_int_equal(kl_file_write(victim, "v", 1, &err), KL_OK);
    assert_int_equal(kl_file_write(secret, "s", 1, &err), KL_OK);
    assert_int_equal(kl_file_write(keep, "k", 1, &err), KL_OK);
    assert_int_equal(chmod(keep, 0600), 0);
    /* without the sandbox every attempt works: the attempts are real */
    unsigned open_run = sandbox_attempts(scratch, given, outside, false);
    assert_true(open_run & SB_CREATE_OUTSIDE);
    assert_true(open_run & SB_UNLINK_OUTSIDE);
    assert_true(open_run & SB_SOCKET_INET);
    assert_true(open_run & SB_FORK);
    assert_true(open_run & SB_CHMOD);
    assert_int_equal(kl_file_write(victim, "v", 1, &err), KL_OK);
    char *created = kl_path_join(outside, "created");
    unlink(created);
    assert_int_equal(chmod(keep, 0600), 0);

    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        const char *reads[] = {given, NULL};
        kl_sandbox_policy pol = {scratch, reads, NULL, false};
        kl_sandbox sb;
        kl_error e = {0};
        unsigned report[3] = {0, 0, 0};
        if (kl_sandbox_apply(&pol, &sb, &e) == KL_OK) {
            report[0] = 1u | (sb.landlock ? 2u : 0u) | (sb.seccomp ? 4u : 0u);
            report[1] = sandbox_attempts(scratch, given, outside, true);
        }
        report[2] = (unsigned)sb.landlock_abi;
        if (write(fds[1], report, sizeof report) != (ssize_t)sizeof report) _exit(2);
        _exit(0); /* no exit handlers in the sandbox */
    }
    close(fds[1]);
    unsigned report[3] = {0, 0, 0};
    ssize_t n = read(fds[0], report, sizeof report);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_int_equal(n, (ssize_t)sizeof report);
    assert_true(report[0] & 1u);  /* applied */
    assert_true(report[0] & 4u);  /* seccomp is always there */
    unsigned got = report[1];
    assert_true(got & SB_WRITE_SCRATCH);
    assert_true(got & SB_THREAD);
    assert_false(got & SB_SOCKET_INET);
    assert_false(got & SB_RAW_SOCKET);
    assert_false(got & SB_FORK);
    assert_false(got & SB_EXEC);
    assert_false(got & SB_CHMOD);
    assert_false(got & SB_KILL_PARENT);
    if (report[0] & 2u) { /* Landlock: the file system */
        assert_true(got & SB_READ_GIVEN);
        assert_false(got & SB_CREATE_OUTSIDE);
        assert_false(got & SB_UNLINK_OUTSIDE);
        assert_false(got & SB_READ_OUTSIDE);
        assert_true(kl_file_exists(victim));
        assert_false(kl_file_exists(created));
    } else {
        printf("note: this kernel has no Landlock (ABI %u): the file rules were not tried\n", report[2]);
    }
    struct stat st;
    assert_int_equal(stat(keep, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    kl_remove_tree(outside, &err);
    free(scratch), free(given), free(outside), free(in), free(victim), free(secret), free(keep), free(created);
}

/* A device runtime over host memory: every kl_rt_* entry point, so that the worker's whole
 * gate job (fills and references on the pool, correct, determinism, integrity, stream, the
 * batched profile loop) runs without a GPU. "Device" pointers are host pointers. */
static const char FAKE_RUNTIME[] =
    "#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n#include <time.h>\n"
    "typedef struct { char name[256]; int ordinal, cc_major, cc_minor, sms, l2_bytes; uint64_t mem_bytes;\n"
    "  int clock_khz, mem_clock_khz, mem_bus_bits, driver_version, runtime_version, smem_per_block_optin, regs_per_sm; } dev;\n"
    "typedef struct { double ms; int timer; unsigned records; uint64_t a, b, c; double sum_ms;\n"
    "  unsigned kernels, incomplete; int marked; double host_ms; uint64_t mark_ns; double device_ms; } timing;\n"
    "typedef struct { double copy_gbs, fma_tflops, tensor_tflops; unsigned reps; uint64_t copy_bytes; } ceil_t;\n"
    "static unsigned wins, maxw, tick, digests; static int open_, stream_obj, pinned;\n"
    "int kl_rt_abi(void) { return 4; }\n"
    "int kl_rt_init(int o) { (void)o; return 0; }\n"
    "void kl_rt_fini(void) {}\n"
    "const char *kl_rt_error(void) { return \"\"; }\n"
    "const char *kl_rt_error_name(void) { return \"\"; }\n"
    "int kl_rt_device_info(dev *d) { memset(d, 0, sizeof *d); strcpy(d->name, \"Fake Host\"); d->cc_major = 9; d->sms = 1;\n"
    "  d->l2_bytes = 1 << 20; return 0; }\n"
    "int kl_rt_malloc(void **p, size_t n) { *p = malloc(n ? n : 1); return *p ? 0 : 6; }\n"
    "int kl_rt_free(void *p) { free(p); return 0; }\n"
    "int kl_rt_memset(void *p, int b, size_t n) { memset(p, b, n); return 0; }\n"
    "int kl_rt_h2d(void *d, const void *s, size_t n) { memcpy(d, s, n); return 0; }\n"
    "int kl_rt_d2h(void *d, const void *s, size_t n) { memcpy(d, s, n); return 0; }\n"
    "int kl_rt_d2d(void *d, const void *s, size_t n) { memcpy(d, s, n); return 0; }\n"
    "int kl_rt_digest(const void *p, size_t n, uint64_t *out) { const unsigned char *b = p; uint64_t h = 1469598103934665603u;\n"
    "  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211u; *out = h ^ n; digests++; return 0; }\n"
    "unsigned kl_fake_digests(void) { return digests; }\n"
    "int kl_rt_host_alloc(void **p, size_t n) { *p = malloc(n ? n : 1); pinned++; return *p ? 0 : 6; }\n"
    "int kl_rt_host_free(void *p) { free(p); pinned--; return 0; }\n"
    "int kl_fake_pinned_live(void) { return pinned; }\n"
    "int kl_rt_stream_create(void **s, int nb) { (void)nb; *s = &stream_obj; return 0; }\n"
    "int kl_rt_stream_destroy(void *s) { (void)s; return 0; }\n"
    "int kl_rt_stream_sync(void *s) { (void)s; return 0; }\n"
    "int kl_rt_stream_idle(void *s, int *idle) { (void)s; *idle = 1; return 0; }\n"
    "int kl_rt_device_sync(void) { return 0; }\n"
    "int kl_rt_device_idle(int us, int *idle) { (void)us; *idle = 1; return 0; }\n"
    "int kl_rt_check(void) { return 0; }\n"
    "static int cupti; static unsigned empty_every, empty_batches; static int cand_empty;\n"
    "void kl_fake_cupti(int on, unsigned every, unsigned batches, int cand) { cupti = on; empty_every = every;\n"
    "  empty_batches = batches; cand_empty = cand; }\n"
    "int kl_rt_timer_init(int want, int *t) { (void)want; *t = cupti ? 1 : 2; return 0; }\n"
    "int kl_rt_timer_begin(void) { return 0; }\n"
    "int kl_rt_timer_end(timing *t) { memset(t, 0, sizeof *t); t->timer = 2; t->ms = 1.0; t->sum_ms = 1.0; t->host_ms = 1.0; return 0; }\n"
    "static unsigned marks, poisons; static double host_extra;\n"
    "int kl_rt_mark(void) { marks++; return 0; }\n"
    "int kl_rt_smem_poison(int b) { (void)b; poisons++; return 0; }\n"
    "unsigned kl_fake_poisons(void) { return poisons; }\n"
    "void kl_fake_host_extra(double ms) { host_extra = ms; }\n"
    "int kl_rt_batch_begin(unsigned m) { if (!m || open_) return 5; maxw = m; wins = 0; return 0; }\n"
    "int kl_rt_batch_open(void) { if (open_ || wins >= maxw) return 5; open_ = 1; return 0; }\n"
    "int kl_rt_batch_close(void) { if (!open_) return 5; open_ = 0; wins++; return 0; }\n"
    "int kl_rt_batch_end(timing *out, unsigned *n) { if (open_) return 5;\n"
    "  for (unsigned i = 0; i < wins; i++) { memset(&out[i], 0, sizeof out[i]); out[i].timer = cupti ? 1 : 2;\n"
    "    out[i].ms = (i % 2 ? 2.0 : 1.0) * (1.0 + 0.001 * (double)(tick++ % 7)); out[i].sum_ms = out[i].ms;\n"
    "    out[i].records = 1; out[i].kernels = 1; out[i].marked = 1; out[i].host_ms = out[i].ms + (i % 2 ? 0 : host_extra);\n"
    "    out[i].device_ms = out[i].ms;\n"
    "    if (empty_batches && empty_every && i % empty_every == 1) out[i].marked = 0, out[i].records = out[i].kernels = 0, out[i].ms = 0;\n"
    "    if (cand_empty && i % 2 == 0) out[i].records = out[i].kernels = 0, out[i].ms = out[i].device_ms = 0; }\n"
    "  if (empty_batches) empty_batches--;\n"
    "  *n = wins; wins = 0; return 0; }\n"
    "uint64_t kl_rt_now_ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);\n"
    "  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec; }\n"
    "int kl_rt_l2_flush(void) { return 0; }\n"
    "int kl_rt_ceilings_measure(unsigned r, ceil_t *c) { memset(c, 0, sizeof *c); c->reps = r; return 0; }\n"
    "int kl_rt_cublas_available(void) { return 0; }\n"
    "int kl_rt_cublas_sgemm(const void *a, const void *b, void *c, int m, int n, int k, void *s)\n"
    "{ (void)a; (void)b; (void)c; (void)m; (void)n; (void)k; (void)s; return 4; }\n"
    "int kl_rt_cublas_bf16gemm(const void *a, const void *b, void *c, int f, int m, int n, int k, void *s)\n"
    "{ (void)a; (void)b; (void)c; (void)f; (void)m; (void)n; (void)k; (void)s; return 4; }\n";

/* rowsum on the host, through the typed shim's signature */
#define ROWSUM_SHIM(BODY)                                                                          \
    "const char *kl_shim_abi(void) { return \"klineage-shim-1\"; }\n"                                 \
    "int kl_shim_launch(void *const *args, void *stream) { (void)stream;\n"                          \
    "  const float *x = args[0]; float *y = args[1]; int rows = *(const int *)args[2], cols = *(const int *)args[3];\n" \
    "  " BODY "\n  return 0; }\n"

static void write_in(const char *dir, const char *name, const char *text)
{
    char *path = kl_path_join(dir, name);
    kl_error err = {0};
    assert_int_equal(kl_file_write(path, text, strlen(text), &err), KL_OK);
    free(path);
}

/* The whole gate job on the host runtime: a right kernel passes every stage with the inputs
 * filled on the pool and the references computed there; a kernel that writes nothing fails
 * correct; the profile loop runs in batches and stops settled. */
static void gate_job_on_a_host_runtime(void **state)
{
    (void)state;
    char *rt = build_object("fake_rt", FAKE_RUNTIME);
    if (!rt) {
        printf("skipped: no host C compiler\n");
        skip();
    }
    char *good = build_object("rowsum_good", ROWSUM_SHIM(
        "for (int r = 0; r < rows; r++) { double s = 0; for (int c = 0; c < cols; c++) s += x[(long)r * cols + c]; y[r] = (float)s; }"));
    char *lazy = build_object("rowsum_lazy", ROWSUM_SHIM("(void)x; (void)y; (void)rows; (void)cols;"));
    assert_non_null(good);
    assert_non_null(lazy);
    char *dir = kl_path_join(tmp_root, "rowsum");
    kl_error err = {0};
    assert_int_equal(kl_mkdirs(dir, &err), KL_OK);
    write_in(dir, "task.json",
             "{\"name\": \"rowsum\", \"sizes\": [\"rows\", \"cols\"], \"args\": ["
             "{\"name\": \"x\", \"type\": \"f32*\", \"shape\": \"rows*cols\", \"role\": \"in\", "
             "\"init\": {\"dist\": \"normal\", \"mean\": 0, \"std\": 1}},"
             "{\"name\": \"y\", \"type\": \"f32*\", \"shape\": \"rows\", \"role\": \"out\"},"
             "{\"name\": \"rows\", \"type\": \"int\", \"value\": \"rows\"},"
             "{\"name\": \"cols\", \"type\": \"int\", \"value\": \"cols\"}],"
             "\"shapes\": {\"bench\": {\"rows\": 640, \"cols\": 4097}, \"check\": [{\"rows\": 1, \"cols\": 1}, "
             "{\"rows\": 3, \"cols\": 1023}, {\"rows\": 257, \"cols\": 33}]},"
             "\"tolerance\": {\"rel_l2\": 1e-5}, \"cost\": {\"flops\": \"rows*cols\", \"bytes\": \"4*rows*cols\"}}");
    write_in(dir, "reference.c",
             "void reference(const double *x, double *y, int rows, int cols)\n"
             "{ for (int r = 0; r < rows; r++) { double s = 0; for (int c = 0; c < cols; c++) s += x[(long)r * cols + c]; y[r] = s; } }\n");
    char *cache = kl_path_join(tmp_root, "fake-cache");
    char job[4096];
    kl_snprintf(job, sizeof job,
                "{\"job\": \"gate\", \"runtime\": \"%s\", \"cache_dir\": \"%s\", \"task_dir\": \"%s\", \"candidate\": \"%s\", "
                "\"baseline\": \"%s\", \"timer\": \"events\", "
                "\"shapes\": [\"check[0]\", \"check[1]\", \"check[2]\", \"bench\"], \"seeds\": [11, 12]}",
                rt, cache, dir, good, good);
    json_t *doc;
    int code = run_job(job, &doc);
    if (code != 0) {
        char *text = json_dumps(doc, JSON_INDENT(1));
        fprintf(stderr, "%s\n", text);
        free(text);
    }
    assert_int_equal(code, KL_WORKER_EXIT_OK);
    assert_true(json_is_null(json_object_get(doc, "error")));
    assert_true(json_is_true(json_object_get(json_object_get(doc, "hygiene"), "ok")));
    json_t *correct = json_object_get(doc, "correct");
    assert_int_equal(json_array_size(correct), 4 * 2 * 2); /* shapes x seeds x poisons */
    size_t i;
    json_t *e;
    json_array_foreach(correct, i, e) assert_true(json_is_true(json_object_get(e, "ok")));
    assert_true(json_is_true(json_object_get(json_object_get(doc, "determinism"), "ok")));
    assert_true(json_is_true(json_object_get(json_object_get(doc, "integrity"), "ok")));
    assert_true(json_is_true(json_object_get(json_object_get(doc, "stream"), "ok")));
    json_t *prof = json_object_get(doc, "profile");
    assert_true(json_is_true(json_object_get(prof, "ok")));
    assert_string_equal(json_string_value(json_object_get(prof, "stopped")), "settled");
    assert_int_equal(json_integer_value(json_object_get(prof, "reps")), 20);
    /* candidate windows are the even ones (1 ms), baseline the odd ones (2 ms) */
    double cm = json_real_value(json_object_get(json_object_get(prof, "candidate"), "median_ms"));
    double bm = json_real_value(json_object_get(json_object_get(prof, "baseline"), "median_ms"));
    assert_true(cm >= 1.0 && cm < 1.01);
    assert_true(bm >= 2.0 && bm < 2.02);
    json_t *t = json_object_get(doc, "timings");
    assert_int_equal(json_integer_value(json_object_get(t, "profile_reps")), 20);
    assert_int_equal(json_integer_value(json_object_get(t, "profile_batches")), 2); /* warm-up + 20 */
    assert_string_equal(json_string_value(json_object_get(t, "profile_stopped")), "settled");
    /* every (shape, seed) filled once and referenced once, on the pool */
    assert_int_equal(json_integer_value(json_object_get(t, "fills")), 8);
    assert_int_equal(json_integer_value(json_object_get(t, "references")), 8);
    assert_true(json_integer_value(json_object_get(t, "pool_threads")) >= 1);
    /* trial buffers are reused, not reallocated per trial */
    assert_true(json_integer_value(json_object_get(t, "buffers_reused")) > 0);
    assert_true(json_integer_value(json_object_get(t, "buffers_allocated")) > 0);
    /* the repeat trials run at the largest checked shape, not the timed one */
    json_t *trials = json_object_get(json_object_get(doc, "determinism"), "trials");
    assert_string_equal(json_string_value(json_object_get(json_array_get(trials, 0), "shape")), "check[2]");
    json_decref(doc);
    /* inputs were checked through their digests on the "device" */
    void *h = dlopen(rt, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    unsigned (*digests)(void) = (unsigned (*)(void))dlsym(h, "kl_fake_digests");
    assert_non_null(digests);
    unsigned digests_before = digests();

    /* a kernel that writes one element of its input is caught, and told where */
    char *scribble = build_object("rowsum_scribble", ROWSUM_SHIM(
        "for (int r = 0; r < rows; r++) { double s = 0; for (int c = 0; c < cols; c++) s += x[(long)r * cols + c]; y[r] = (float)s; }\n"
        "  if (rows * cols > 5) ((float *)x)[5] += 1.0f;"));
    assert_non_null(scribble);
    kl_snprintf(job, sizeof job,
                "{\"job\": \"gate\", \"runtime\": \"%s\", \"cache_dir\": \"%s\", \"task_dir\": \"%s\", \"candidate\": \"%s\", "
                "\"timer\": \"events\", \"shapes\": [\"check[0]\", \"check[1]\", \"bench\"], \"seeds\": [11, 12]}",
                rt, cache, dir, scribble);
    code = run_job(job, &doc);
    assert_int_equal(code, KL_WORKER_EXIT_OK);
    json_t *integ = json_object_get(doc, "integrity");
    assert_false(json_is_true(json_object_get(integ, "ok")));
    const char *why = json_string_value(json_object_get(integ, "detail"));
    assert_non_null(strstr(why, "input 'x' changed by the candidate at check[1]"));
    assert_non_null(strstr(why, "1 elements, first at 5"));
    assert_true(digests() > digests_before);
    json_decref(doc);
    free(scribble);

    /* the bench shape checked against the baseline, one seed: no reference computed there */
    kl_snprintf(job, sizeof job,
                "{\"job\": \"gate\", \"runtime\": \"%s\", \"cache_dir\": \"%s\", \"task_dir\": \"%s\", \"candidate\": \"%s\", "
                "\"baseline\": \"%s\", \"timer\": \"events\", \"shapes\": [\"check[0]\", \"check[1]\", \"check[2]\", "
                "{\"label\": \"bench\", \"reference\": false, \"seeds\": 1}], \"seeds\": [11, 12]}",
                rt, cache, dir, good, good);
    code = run_job(job, &doc);
    assert_int_equal(code, KL_WORKER_EXIT_OK);
    correct = json_object_get(doc, "correct");
    assert_int_equal(json_array_size(correct), 3 * 2 * 2 + 1 * 2);
    json_array_foreach(correct, i, e) {
        assert_true(json_is_true(json_object_get(e, "ok")));
        bool bench = !strcmp(json_string_value(json_object_get(e, "shape")), "bench");
        assert_string_equal(json_string_value(json_object_get(e, "checked_against")), bench ? "baseline" : "reference");
    }
    assert_int_equal(json_array_size(json_object_get(doc, "baseline_correct")), 3);
    t = json_object_get(doc, "timings");
    assert_int_equal(json_integer_value(json_object_get(t, "references")), 3 * 2);
    assert_int_equal(json_integer_value(json_object_get(t, "fills")), 3 * 2 + 1);
    json_decref(doc);
    /* a wrong candidate is still caught at the bench shape against the baseline */
    char *off = build_object("rowsum_off_at_bench", ROWSUM_SHIM(
        "for (int r = 0; r < rows; r++) { double s = 0; for (int c = 0; c < cols; c++) s += x[(long)r * cols + c]; y[r] = (float)s; }\n"
        "  if (rows >= 640) y[rows - 1] += 1.0f;"));
    assert_non_null(off);
    kl_snprintf(job, sizeof job,
                "{\"job\": \"gate\", \"runtime\": \"%s\", \"cache_dir\": \"%s\", \"task_dir\": \"%s\", \"candidate\": \"%s\", "
                "\"baseline\": \"%s\", \"timer\": \"events\", \"shapes\": [\"check[0]\", "
                "{\"label\": \"bench\", \"reference\": false, \"seeds\": 1}], \"seeds\": [11, 12]}",
                rt, cache, dir, off, good);
    code = run_job(job, &doc);
    assert_int_equal(code, KL_WORKER_EXIT_OK);
    correct = json_object_get(doc, "correct");
    json_t *last = json_array_get(correct, json_array_size(correct) - 1);
    assert_string_equal(json_string_value(json_object_get(last, "shape")), "bench");
    assert_false(json_is_true(json_object_get(last, "ok")));
    assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(last, "outputs"), 0), "first_bad")), 639);
    json_decref(doc);
    free(off);

    /* a kernel that writes nothing is still rejected, at the first shape */
    kl_snprintf(job, sizeof job,
                "{\"job\": \"gate\", \"runtime\": \"%s\", \"cache_dir\": \"%s\", \"task_dir\": \"%s\", \"candidate\": \"%s\", "
                "\"timer\": \"events\", \"shapes\": [\"check[0]\", \"check[1]\", \"bench\"], \"seeds\": [11, 12]}",
                rt, cache, dir, lazy);
    code = run_job(job, &doc);
    assert_int_equal(code, KL_WORKER_EXIT_OK);
    correct = json_object_get(doc, "correct");
    json_t *first = json_array_get(correct, 0);
    assert_false(json_is_true(json_object_get(first, "ok")));
    json_t *out0 = json_array_get(json_object_get(first, "outputs"), 0);
    assert_int_equal(json_integer_value(json_object_get(out0, "unwritten")), 1);
    assert_null(json_object_get(doc, "profile"));
    assert_null(json_object_get(doc, "determinism"));
    json_decref(doc);

    /* CUPTI windows without an activity record: the timer's fault when some are empty (the
     * batch is measured again; a harness failure, not a verdict, when it keeps happening), the
     * candidate's when all of its windows are and none of the baseline's */
    void (*fake_cupti)(int, unsigned, unsigned, int) = (void (*)(int, unsigned, unsigned, int))dlsym(h, "kl_fake_cupti");
    assert_non_null(fake_cupti);
    kl_snprintf(job, sizeof job,
                "{\"job\": \"gate\", \"runtime\": \"%s\", \"cache_dir\": \"%s\", \"task_dir\": \"%s\", \"candidate\": \"%s\", "
                "\"baseline\": \"%s\", \"shapes\": [\"check[0]\", \"bench\"], \"seeds\": [11]}",
                rt, cache, dir, good, good);
    fake_cupti(1, 4, 2, 0); /* the warm-up batch and the first timed one lose records */
    code = run_job(job, &doc);
    assert_int_equal(code, KL_WORKER_EXIT_OK);
    assert_true(json_is_true(json_object_get(json_object_get(doc, "profile"), "ok")));
    t = json_object_get(doc, "timings");
    assert_int_equal(json_integer_value(json_object_get(t, "profile_retries")), 1);
    cm = json_real_value(json_object_get(json_object_get(json_object_get(doc, "profile"), "candidate"), "median_ms"));
    assert_true(cm >= 1.0); /* no empty window's zero among the times */
    json_decref(doc);
    fake_cupti(1, 4, 1000, 0); /* every batch */
    code = run_job(job, &doc);
    assert_int_equal(code, KL_WORKER_EXIT_HARNESS);
    assert_non_null(strstr(err_field(doc, "detail"), "the timer could not attribute the device work"));
    json_decref(doc);
    fake_cupti(1, 0, 0, 1); /* the candidate's windows only, every time */
    code = run_job(job, &doc);
    assert_int_equal(code, KL_WORKER_EXIT_OK);
    prof = json_object_get(doc, "profile");
    assert_false(json_is_true(json_object_get(prof, "ok")));
    const char *pd = json_string_value(json_object_get(prof, "detail"));
    assert_non_null(strstr(pd, "no kernel ran in "));
    assert_non_null(strstr(pd, "copies and memsets are not the task's work"));
    assert_null(json_object_get(json_object_get(doc, "timings"), "profile_retries"));
    json_decref(doc);
    /* host work in the launch that the device timer does not see: 5 ms beyond 1 ms of device
     * work in every window fails the profile; 0.5 ms (under the 1 ms slack) does not */
    void (*host_extra)(double) = (void (*)(double))dlsym(h, "kl_fake_host_extra");
    assert_non_null(host_extra);
    fake_cupti(1, 0, 0, 0);
    host_extra(5.0);
    code = run_job(job, &doc);
    assert_int_equal(code, KL_WORKER_EXIT_OK);
    prof = json_object_get(doc, "profile");
    assert_false(json_is_true(json_object_get(prof, "ok")));
    assert_non_null(strstr(json_string_value(json_object_get(prof, "detail")), "on the host beyond its"));
    assert_true(json_real_value(json_object_get(prof, "host_unseen_ms")) >= 4.9);
    json_decref(doc);
    host_extra(0.5);
    code = run_job(job, &doc);
    assert_int_equal(code, KL_WORKER_EXIT_OK);
    assert_true(json_is_true(json_object_get(json_object_get(doc, "profile"), "ok")));
    json_decref(doc);
    host_extra(0);
    fake_cupti(0, 0, 0, 0);
    /* shared memory was poisoned before the candidate's launches (correct and determinism) */
    unsigned (*poisons)(void) = (unsigned (*)(void))dlsym(h, "kl_fake_poisons");
    assert_non_null(poisons);
    assert_true(poisons() > 0);
    dlclose(h);
    free(rt);
    free(good);
    free(lazy);
    free(dir);
    free(cache);
}

/* A reference too slow for a shape (its cost.flops at the speed measured at a small shape,
 * past the budget) is not run there: the baseline stands in; without a baseline the job ends as
 * a harness failure (exit 4), never as the candidate's rejection. */
static void slow_reference_is_never_the_candidates_failure(void **state)
{
    (void)state;
    char *rt = build_object("slow_rt", FAKE_RUNTIME);
    if (!rt) {
        printf("skipped: no host C compiler\n");
        skip();
    }
    char *good = build_object("slow_good", ROWSUM_SHIM(
        "for (int r = 0; r < rows; r++) { double s = 0; for (int c = 0; c < cols; c++) s += x[(long)r * cols + c]; y[r] = (float)s; }"));
    assert_non_null(good);
    char *dir = kl_path_join(tmp_root, "slowref");
    kl_error err = {0};
    assert_int_equal(kl_mkdirs(dir, &err), KL_OK);
    /* cost.flops says a million flops per element: the probe (check[0], 10^6 flops) is fast, and
     * the bench shape (1.7e13) predicted far past 20 s at any speed the probe can show */
    write_in(dir, "task.json",
             "{\"name\": \"rowsum\", \"sizes\": [\"rows\", \"cols\"], \"args\": ["
             "{\"name\": \"x\", \"type\": \"f32*\", \"shape\": \"rows*cols\", \"role\": \"in\", "
             "\"init\": {\"dist\": \"normal\", \"mean\": 0, \"std\": 1}},"
             "{\"name\": \"y\", \"type\": \"f32*\", \"shape\": \"rows\", \"role\": \"out\"},"
             "{\"name\": \"rows\", \"type\": \"int\", \"value\": \"rows\"},"
             "{\"name\": \"cols\", \"type\": \"int\", \"value\": \"cols\"}],"
             "\"shapes\": {\"bench\": {\"rows\": 4096, \"cols\": 4096}, \"check\": [{\"rows\": 1, \"cols\": 1}, "
             "{\"rows\": 1, \"cols\": 100}, {\"rows\": 64, \"cols\": 64}]},"
             "\"tolerance\": {\"rel_l2\": 1e-5}, \"cost\": {\"flops\": \"rows*cols*1000000\"}}");
    write_in(dir, "reference.c",
             "void reference(const double *x, double *y, int rows, int cols)\n"
             "{ for (int r = 0; r < rows; r++) { double s = 0; for (int c = 0; c < cols; c++) s += x[(long)r * cols + c]; y[r] = s; } }\n");
    char *cache = kl_path_join(tmp_root, "slow-cache");
    char job[4096];
    kl_snprintf(job, sizeof job,
                "{\"job\": \"gate\", \"runtime\": \"%s\", \"cache_dir\": \"%s\", \"task_dir\": \"%s\", \"candidate\": \"%s\", "
                "\"baseline\": \"%s\", \"timer\": \"events\", \"shapes\": [\"check[0]\", \"check[1]\", \"check[2]\", \"bench\"], "
                "\"seeds\": [11, 12], \"stages\": {\"profile\": false, \"stream\": false}}",
                rt, cache, dir, good, good);
    json_t *doc;
    int code = run_job(job, &doc);
    assert_int_equal(code, KL_WORKER_EXIT_OK);
    json_t *speed = json_object_get(doc, "reference_speed");
    assert_true(json_is_object(speed));
    assert_string_equal(json_string_value(json_object_get(speed, "shape")), "check[0]");
    json_t *moved = json_object_get(speed, "against_baseline");
    assert_int_equal(json_array_size(moved), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(moved, 0), "shape")), "bench");
    size_t i;
    json_t *e;
    bool bench_seen = false;
    json_array_foreach(json_object_get(doc, "correct"), i, e) {
        assert_true(json_is_true(json_object_get(e, "ok")));
        if (!strcmp(json_string_value(json_object_get(e, "shape")), "bench")) {
            bench_seen = true;
            assert_string_equal(json_string_value(json_object_get(e, "checked_against")), "baseline");
        }
    }
    assert_true(bench_seen);
    json_decref(doc);
    /* no baseline to stand in: a harness failure, not a verdict on the candidate */
    kl_snprintf(job, sizeof job,
                "{\"job\": \"gate\", \"runtime\": \"%s\", \"cache_dir\": \"%s\", \"task_dir\": \"%s\", \"candidate\": \"%s\", "
                "\"timer\": \"events\", \"shapes\": [\"check[0]\", \"bench\"], \"seeds\": [11], "
                "\"stages\": {\"profile\": false, \"stream\": false}}",
                rt, cache, dir, good);
    code = run_job(job, &doc);
    assert_int_equal(code, KL_WORKER_EXIT_HARNESS);
    assert_non_null(strstr(err_field(doc, "detail"), "too large for the reference"));
    assert_non_null(strstr(err_field(doc, "detail"), "no baseline to stand in"));
    json_decref(doc);
    free(rt), free(good), free(dir), free(cache);
}

/* Candidates that try what a candidate may not do, each in a real sandboxed worker (the host
 * runtime stands in for the GPU): each computes the right rowsum only when its attempt was
 * refused, so a verdict that passes means "refused". The same candidate without the sandbox
 * fails: the attempts are real. Writing in its own working folder (the scratch) still works. */
static void sandboxed_worker_refuses_candidates(void **state)
{
    (void)state;
    char *bin = worker_bin();
    char *rt = build_object("sb_fake_rt", FAKE_RUNTIME);
    if (!bin || !rt) {
        printf("skipped: %s\n", !bin ? "klineage-worker not built" : "no host C compiler");
        free(bin), free(rt);
        skip();
    }
    kl_error err = {0};
    char *outside = NULL, *scratch = NULL;
    assert_int_equal(kl_tempdir("sb-outside", &outside, &err), KL_OK);
    assert_int_equal(kl_tempdir("sb-scratch", &scratch, &err), KL_OK);
    char *dir = kl_path_join(tmp_root, "sb-rowsum");
    assert_int_equal(kl_mkdirs(dir, &err), KL_OK);
    write_in(dir, "task.json",
             "{\"name\": \"rowsum\", \"sizes\": [\"rows\", \"cols\"], \"args\": ["
             "{\"name\": \"x\", \"type\": \"f32*\", \"shape\": \"rows*cols\", \"role\": \"in\", "
             "\"init\": {\"dist\": \"normal\", \"mean\": 0, \"std\": 1}},"
             "{\"name\": \"y\", \"type\": \"f32*\", \"shape\": \"rows\", \"role\": \"out\"},"
             "{\"name\": \"rows\", \"type\": \"int\", \"value\": \"rows\"},"
             "{\"name\": \"cols\", \"type\": \"int\", \"value\": \"cols\"}],"
             "\"shapes\": {\"bench\": {\"rows\": 64, \"cols\": 33}, \"check\": [{\"rows\": 3, \"cols\": 5}]},"
             "\"tolerance\": {\"rel_l2\": 1e-5}}");
    write_in(dir, "reference.c",
             "void reference(const double *x, double *y, int rows, int cols)\n"
             "{ for (int r = 0; r < rows; r++) { double s = 0; for (int c = 0; c < cols; c++) s += x[(long)r * cols + c]; y[r] = s; } }\n");
    static const struct {
        const char *name, *attempt; /* true when the forbidden thing worked */
        bool forbidden;
    } cands[] = {
        {"create_outside", "open(OUT \"/created\", O_WRONLY | O_CREAT, 0644) >= 0", true},
        {"unlink_outside", "unlink(OUT \"/victim\") == 0", true},
        {"read_outside", "open(OUT \"/secret\", O_RDONLY) >= 0", true},
        {"socket_inet", "socket(AF_INET, SOCK_STREAM, 0) >= 0", true},
        {"raw_syscall_socket", "syscall(SYS_socket, AF_INET6, SOCK_DGRAM, 0) >= 0", true},
        {"fork", "({ pid_t p = fork(); if (p == 0) _exit(0); p > 0; })", true},
        {"write_own_scratch", "open(\"mine\", O_WRONLY | O_CREAT, 0644) < 0", false},
    };
    char *victim = kl_path_join(outside, "victim"), *secret = kl_path_join(outside, "secret"),
         *created = kl_path_join(outside, "created");
    assert_int_equal(kl_file_write(secret, "s", 1, &err), KL_OK);
    for (size_t k = 0; k < sizeof cands / sizeof cands[0]; k++) {
        for (int sandboxed = 1; sandboxed >= 0; sandboxed--) {
            if (!sandboxed && !cands[k].forbidden) continue;
            assert_int_equal(kl_file_write(victim, "v", 1, &err), KL_OK);
            unlink(created);
            char src[4096];
            kl_snprintf(src, sizeof src,
                        "#define _GNU_SOURCE\n#include <fcntl.h>\n#include <sys/socket.h>\n#include <sys/syscall.h>\n"
                        "#include <unistd.h>\n#define OUT \"%s\"\n"
                        "const char *kl_shim_abi(void) { return \"klineage-shim-1\"; }\n"
                        "int kl_shim_launch(void *const *args, void *stream) { (void)stream;\n"
                        "  const float *x = args[0]; float *y = args[1]; int rows = *(const int *)args[2], cols = *(const int *)args[3];\n"
                        "  int worked = %s;\n"
                        "  for (int r = 0; r < rows; r++) { double s = 0; for (int c = 0; c < cols; c++) s += x[(long)r * cols + c]; y[r] = (float)s; }\n"
                        "  if (worked) y[0] += 1000.0f;\n  return 0; }\n",
                        outside, cands[k].attempt);
            char *obj = build_object(cands[k].name, src);
            assert_non_null(obj);
            json_t *job = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:[s, s], s:[i], s:{s:b, s:b, s:b}}", "job", "gate",
                                    "runtime", rt, "cache_dir", tmp_root, "task_dir", dir, "candidate", obj, "timer",
                                    "events", "shapes", "check[0]", "bench", "seeds", 11, "stages", "determinism", 0,
                                    "stream", 0, "profile", 0);
            if (sandboxed)
                json_object_set_new(job, "sandbox", json_pack("{s:s, s:[s]}", "scratch", scratch, "read", tmp_root));
            char *text = json_dumps(job, JSON_COMPACT);
            json_decref(job);
            const char *argv[] = {bin, NULL};
            kl_child ch;
            kl_child_init(&ch);
            ch.argv = argv;
            ch.dir = scratch;
            ch.stdin_data = text;
            ch.stdin_len = strlen(text);
            ch.timeout_s = 120;
            assert_int_equal(kl_child_run(&ch, &err), KL_OK);
            json_t *doc = json_loads(kl_strbuf_str(&ch.out), 0, NULL);
            if (!doc || ch.exit_code != 0)
                fprintf(stderr, "%s (sandbox %d): exit %d\n%s\n%s\n", cands[k].name, sandboxed, ch.exit_code,
                        kl_strbuf_str(&ch.out), kl_strbuf_str(&ch.err));
            assert_non_null(doc);
            assert_int_equal(ch.exit_code, KL_WORKER_EXIT_OK);
            json_t *sb = json_object_get(doc, "sandbox");
            bool landlock = json_is_true(json_object_get(sb, "landlock"));
            bool fs_attempt = strstr(cands[k].name, "outside") != NULL;
            bool refused_expected = sandboxed && (!fs_attempt || landlock);
            bool all_ok = true;
            size_t i;
            json_t *e;
            json_array_foreach(json_object_get(doc, "correct"), i, e) if (!json_is_true(json_object_get(e, "ok"))) all_ok = false;
            if (sandboxed) {
                assert_true(json_is_true(json_object_get(sb, "applied")));
                assert_true(json_is_true(json_object_get(sb, "seccomp")));
            }
            if (!cands[k].forbidden || refused_expected) {
                if (!all_ok) fprintf(stderr, "%s (sandbox %d) was not refused:\n%s\n", cands[k].name, sandboxed, kl_strbuf_str(&ch.out));
                assert_true(all_ok);
            } else if (!sandboxed) {
                assert_false(all_ok); /* the attempt works outside the sandbox */
            }
            if (refused_expected && fs_attempt) {
                assert_true(kl_file_exists(victim));
                assert_false(kl_file_exists(created));
            }
            json_decref(doc);
            kl_child_release(&ch);
            free(text);
            free(obj);
        }
    }
    kl_remove_tree(outside, &err);
    kl_remove_tree(scratch, &err);
    free(outside), free(scratch), free(dir), free(victim), free(secret), free(created), free(rt), free(bin);
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
        cmocka_unit_test(parallel_fill_is_bit_identical),
        cmocka_unit_test(harness_threads_and_late_libraries_are_not_blamed),
        cmocka_unit_test(timings_always_reported),
        cmocka_unit_test(gate_job_on_a_host_runtime),
        cmocka_unit_test(sandbox_refuses_in_a_child),
        cmocka_unit_test(sandboxed_worker_refuses_candidates),
        cmocka_unit_test(slow_reference_is_never_the_candidates_failure),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
