/*
 * The gate, parent side: the device document, the verdict key, the store, the worker run
 * with a wall-clock limit, and the verdict assembled from what the worker reported (or
 * from how it ended). docs/gate.md describes the stages; docs/gate-worker.md the worker.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate/executor.h"
#include "gate/gate_int.h"
#include "gate/worker.h" /* the worker's exit codes */

#define WORKER_OUT_MAX ((size_t)64 << 20)
#define WORKER_ERR_MAX ((size_t)1 << 20)
#define LOG_KEEP 8192
#define CEILING_SLACK 1.25 /* a figure this far past a measured ceiling is not believed */
#define GPU_FORMAT "klineage-gpu-1"

/* ---- open / close ----------------------------------------------------------------------- */

static char *dup_or_null(const char *s) { return s ? kl_strdup(s) : NULL; }

kl_status kl_gate_open(const kl_gate_options *opt, kl_gate **out, kl_error *err)
{
    *out = NULL;
    kl_gate_options none = {0};
    if (!opt) opt = &none;
    if (opt->mode == KL_GATE_REPLAY && !opt->store)
        return kl_error_set(err, KL_ERR_INVALID, "replay needs a store holding the recorded verdicts");
    kl_gate *g = calloc(1, sizeof *g);
    if (!g) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    g->mode = opt->mode;
    g->store = opt->store;
    g->arch = dup_or_null(opt->arch);
    g->nvcc = dup_or_null(opt->nvcc);
    g->worker = dup_or_null(opt->worker);
    g->sanitizer = dup_or_null(opt->sanitizer);
    g->device_opt = dup_or_null(opt->device);
    g->cache_dir = opt->cache_dir ? kl_strdup(opt->cache_dir) : kl_cache_dir();
    g->jobs = opt->jobs > 0 ? opt->jobs : 1;
    g->compile_timeout_s = opt->compile_timeout_s > 0 ? opt->compile_timeout_s : 300;
    g->run_timeout_s = opt->run_timeout_s > 0 ? opt->run_timeout_s : 120;
    g->sanitize_timeout_s = opt->sanitize_timeout_s > 0 ? opt->sanitize_timeout_s : 600;
    if (!g->cache_dir || (opt->arch && !g->arch) || (opt->nvcc && !g->nvcc) || (opt->worker && !g->worker) ||
        (opt->sanitizer && !g->sanitizer) || (opt->device && !g->device_opt)) {
        kl_gate_close(g);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    const char *sb = getenv("KLINEAGE_SANDBOX");
    g->sandbox = !sb || !*sb || !strcmp(sb, "on") ? KL_SANDBOX_ON : !strcmp(sb, "off") ? KL_SANDBOX_OFF
                 : !strcmp(sb, "require")                          ? KL_SANDBOX_REQUIRE
                                                                   : -1;
    if (g->sandbox < 0) {
        kl_status st = kl_error_set(err, KL_ERR_INVALID, "$KLINEAGE_SANDBOX is on, off or require, not '%s'", sb);
        kl_gate_close(g);
        return st;
    }
    if (g->arch && (!kl_str_starts(g->arch, "sm_") || strlen(g->arch) < 5)) {
        kl_status st = kl_error_set(err, KL_ERR_INVALID, "--arch %s: expected sm_XY (sm_90, sm_90a …)", g->arch);
        kl_gate_close(g);
        return st;
    }
    g->stand_in = opt->stand_in;
    kl_status est = kl_gate_open_executor(g, opt, err); /* executor.c: the stand-in, the executor */
    if (est != KL_OK) {
        kl_gate_close(g);
        return est;
    }
    *out = g;
    return KL_OK;
}

void kl_gate_close(kl_gate *g)
{
    if (!g) return;
    kl_executor_close(g->exec);
    free(g->arch);
    free(g->nvcc);
    free(g->nvcc_version);
    free(g->worker);
    free(g->sanitizer);
    free(g->cache_dir);
    free(g->device_opt);
    json_decref(g->gpu);
    free(g->gpu_key);
    free(g->runtime);
    free(g);
}

/* ---- how a child ended ------------------------------------------------------------------ */

void kl_gate_child_reason(const kl_child *c, char *buf, size_t size)
{
    if (c->timed_out) {
        kl_snprintf(buf, size, "timed out after %g s", c->timeout_s);
    } else if (c->term_signal) {
        const char *abbrev = sigabbrev_np(c->term_signal);
        if (abbrev) kl_snprintf(buf, size, "killed by SIG%s", abbrev);
        else kl_snprintf(buf, size, "killed by signal %d", c->term_signal);
    } else {
        kl_snprintf(buf, size, "exit %d", c->exit_code);
    }
}

static bool cuda_sticky(const char *what)
{
    static const char *const sticky[] = {"illegal memory access", "illegal address", "misaligned address",
                                         "illegal instruction", "unspecified launch failure", "device-side assert",
                                         "hardware stack error", "invalid program counter", "launch timed out",
                                         "launch timeout", "trap", "exception", "IllegalAddress", "LaunchFailure",
                                         "MisalignedAddress", "IllegalInstruction", "Assert", "HardwareStackError",
                                         "InvalidPc", "LaunchTimeout"};
    for (size_t i = 0; what && i < sizeof sticky / sizeof sticky[0]; i++)
        if (strstr(what, sticky[i])) return true;
    return false;
}

char *kl_gate_cuda_reason(const json_t *error)
{
    const char *cuda = json_string_value(json_object_get(error, "cuda"));
    const char *detail = json_string_value(json_object_get(error, "detail"));
    const char *stage = json_string_value(json_object_get(error, "stage"));
    kl_strbuf sb = KL_STRBUF_INIT;
    if (cuda && *cuda) {
        kl_strbuf_addf(&sb, "CUDA error: %s", cuda);
        if (json_is_true(json_object_get(error, "sticky")) || cuda_sticky(cuda) || cuda_sticky(detail))
            kl_strbuf_adds(&sb, " (sticky CUDA error: the context is lost)");
    } else {
        kl_strbuf_adds(&sb, "worker error");
    }
    if (stage && *stage) kl_strbuf_addf(&sb, " in %s", stage);
    if (detail && *detail) kl_strbuf_addf(&sb, ": %s", detail);
    return sb.failed ? (kl_strbuf_release(&sb), NULL) : kl_strbuf_detach(&sb, NULL);
}

/* ---- the worker ------------------------------------------------------------------------- */

kl_status kl_gate_worker(kl_gate *gate, kl_error *err)
{
    if (gate->worker) {
        if (access(gate->worker, X_OK) == 0) return KL_OK;
        return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: the gate's worker is not an executable file", gate->worker);
    }
    const char *e = getenv("KLINEAGE_WORKER");
    if (e && *e) {
        gate->worker = kl_strdup(e);
    } else {
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) {
            self[n] = '\0';
            char *dir = kl_path_dirname(self);
            gate->worker = dir ? kl_path_join(dir, "klineage-worker") : NULL;
            free(dir);
        }
    }
    if (!gate->worker) return kl_error_set(err, KL_ERR_NOT_FOUND, "klineage-worker not found: set $KLINEAGE_WORKER");
    if (access(gate->worker, X_OK) != 0) {
        kl_status st = kl_error_set(err, KL_ERR_NOT_FOUND,
                                    "%s: the gate's worker is missing (build it beside klineage, or set $KLINEAGE_WORKER)",
                                    gate->worker);
        free(gate->worker);
        gate->worker = NULL;
        return st;
    }
    return KL_OK;
}

/* Run the worker on one job. KL_OK when it ran (whatever its end: see c); the caller
 * releases c. */
kl_status kl_gate_scratch(kl_gate *gate, char **scratch, kl_error *err)
{
    *scratch = NULL;
    if (gate->sandbox == KL_SANDBOX_OFF) return KL_OK;
    return kl_tempdir("worker", scratch, err);
}

void kl_gate_scratch_done(char *scratch)
{
    if (!scratch) return;
    kl_error ignore;
    kl_remove_tree(scratch, &ignore);
    free(scratch);
}

/* p as an absolute path (a new string): the worker runs in its scratch folder, where a path
 * relative to this process's folder names nothing. */
static json_t *absolute_path(const char *p)
{
    if (!p || p[0] == '/') return p ? json_string(p) : json_null();
    char *real = realpath(p, NULL);
    if (real) {
        json_t *v = json_string(real);
        free(real);
        return v;
    }
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) return json_string(p);
    char *joined = kl_path_join(cwd, p);
    json_t *v = json_string(joined ? joined : p);
    free(joined);
    return v;
}

void kl_gate_job_sandbox(kl_gate *gate, json_t *job, const kl_task *task, const char *scratch, bool sanitizer)
{
    if (!job || !scratch) return;
    /* the worker starts in the scratch folder: every path it is given is made absolute */
    static const char *const paths[] = {"task_dir", "cache_dir", "runtime", "candidate", "baseline", NULL};
    for (const char *const *k = paths; *k; k++) {
        json_t *v = json_object_get(job, *k);
        if (json_is_string(v) && json_string_value(v)[0] != '/')
            json_object_set_new(job, *k, absolute_path(json_string_value(v)));
    }
    /* reads beyond the system's and the mapped libraries' (the worker adds those): the task's
     * folder and the cache (objects, the reference, the runtime) */
    json_t *read = json_array(), *write = json_array();
    if (task->dir) json_array_append_new(read, absolute_path(task->dir));
    json_array_append_new(read, absolute_path(gate->cache_dir));
    /* compute-sanitizer's injected library may keep files of its own in the usual places */
    if (sanitizer) {
        json_array_append_new(write, json_string("/tmp"));
        json_array_append_new(write, json_string("/dev/shm"));
    }
    json_object_set_new(job, "sandbox", json_pack("{s:s, s:o, s:o, s:b}", "scratch", scratch, "read", read, "write",
                                                  write, "require", gate->sandbox == KL_SANDBOX_REQUIRE));
}

static kl_status run_worker(kl_gate *gate, const char *job, double timeout_s, const char *scratch, kl_child *c,
                            kl_error *err)
{
    kl_child_init(c);
    kl_status st = kl_gate_worker(gate, err);
    if (st != KL_OK) return st;
    const char *argv[] = {gate->worker, NULL};
    char tmpdir[4200];
    const char *env[] = {tmpdir, NULL};
    if (scratch) {
        kl_snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", scratch);
        c->dir = scratch;
        c->env = env;
    }
    c->argv = argv;
    c->stdin_data = job;
    c->stdin_len = strlen(job);
    c->timeout_s = timeout_s;
    c->out_max = WORKER_OUT_MAX;
    c->err_max = WORKER_ERR_MAX;
    st = kl_gate_run_child(gate, c, err); /* on the judgement's GPU (executor.h) */
    c->argv = NULL; /* argv and env live on this frame */
    c->env = NULL;
    c->dir = NULL;
    return st;
}

static const char *last_line(const char *text, char *buf, size_t size)
{
    size_t n = strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == ' ')) n--;
    size_t start = n;
    while (start && text[start - 1] != '\n') start--;
    size_t len = n - start < size - 1 ? n - start : size - 1;
    memcpy(buf, text + start, len);
    buf[len] = '\0';
    return buf;
}

/* ---- the device ------------------------------------------------------------------------- */

static bool gpu_present(void)
{
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (d) {
        struct dirent *e;
        bool any = false;
        while ((e = readdir(d)) != NULL)
            if (e->d_name[0] != '.') any = true;
        closedir(d);
        if (any) return true;
    }
    return access("/dev/nvidia0", F_OK) == 0;
}

bool kl_gate_gpu_available(void) { return gpu_present(); }

/* The model of the first GPU the driver lists ("NVIDIA H200"), new string or NULL. */
static char *probe_device_name(void)
{
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (!d) return NULL;
    char *best = NULL, *best_bus = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (best_bus && strcmp(e->d_name, best_bus) > 0) continue; /* the lowest bus id first */
        kl_strbuf p = KL_STRBUF_INIT;
        kl_strbuf_addf(&p, "/proc/driver/nvidia/gpus/%s/information", e->d_name);
        char *text = NULL;
        kl_error ignore;
        if (kl_file_read(kl_strbuf_str(&p), 65536, &text, NULL, &ignore) == KL_OK) {
            const char *m = strstr(text, "Model:");
            if (m) {
                m += 6;
                while (*m == ' ' || *m == '\t') m++;
                size_t n = strcspn(m, "\n");
                while (n && (m[n - 1] == ' ' || m[n - 1] == '\t')) n--;
                free(best);
                free(best_bus);
                best = kl_strndup(m, n);
                best_bus = kl_strdup(e->d_name);
            }
            free(text);
        }
        kl_strbuf_release(&p);
    }
    closedir(d);
    free(best_bus);
    return best;
}

/* The device's compute capability as "sm_XY" from nvidia-smi, for the first runtime build
 * (before any device document exists). NULL when nvidia-smi cannot say. */
static char *probe_arch(void)
{
    kl_child c;
    kl_child_init(&c);
    const char *argv[] = {"nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader", "-i", "0", NULL};
    c.argv = argv;
    c.timeout_s = 30;
    c.out_max = 4096;
    char *arch = NULL;
    int major = 0, minor = 0;
    if (kl_child_run(&c, NULL) == KL_OK && c.exit_code == 0 &&
        sscanf(kl_strbuf_str(&c.out), "%d.%d", &major, &minor) == 2 && major > 0) {
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "sm_%d%d", major, minor);
        arch = kl_strbuf_detach(&sb, NULL);
    }
    kl_child_release(&c);
    return arch;
}

static kl_status ensure_runtime(kl_gate *gate, const char *arch, kl_error *err)
{
    if (gate->runtime) return KL_OK;
    kl_status st = kl_gate_nvcc(gate, err);
    if (st != KL_OK) return st;
    st = kl_runtime_build(gate->nvcc, arch, gate->cache_dir, &gate->runtime, err);
    return st == KL_OK ? KL_OK : kl_error_prefix(err, "building the device runtime");
}

static void toolchain_text(const char *nvcc_version, const char *arch, char *buf, size_t size)
{
    kl_snprintf(buf, size, "nvcc %s %s", nvcc_version ? nvcc_version : "?", arch ? arch : "?");
}

/* Run the worker's gpu-info job, store the document under `key` (NULL: the device's name). */
static kl_status measure_gpu(kl_gate *gate, const char *key, kl_error *err)
{
    kl_status st = KL_OK;
    char *arch = gate->arch ? kl_strdup(gate->arch) : probe_arch();
    char *job = NULL, *text = NULL;
    json_t *res = NULL;
    kl_child c;
    kl_child_init(&c);
    if (!arch) arch = kl_strdup("native");
    KL_TRY(kl_gate_nvcc(gate, err));
    KL_TRY(ensure_runtime(gate, arch, err));
    json_t *j = json_pack("{s:s, s:s, s:s}", "job", "gpu-info", "runtime", gate->runtime, "cache_dir", gate->cache_dir);
    job = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!job) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    KL_TRY(run_worker(gate, job, gate->run_timeout_s, NULL, &c, err));
    json_error_t je;
    res = json_loads(kl_strbuf_str(&c.out), 0, &je);
    if (c.exit_code != 0 || !json_is_object(res)) {
        char how[128], line[512];
        kl_gate_child_reason(&c, how, sizeof how);
        const char *why = json_string_value(json_object_get(json_object_get(res, "error"), "detail"));
        bool nodev = (!c.timed_out && !c.term_signal && c.exit_code == KL_WORKER_EXIT_NO_GPU) ||
                     (why && strstr(why, "no CUDA"));
        st = kl_error_set(err, nodev ? KL_ERR_NO_GPU : KL_ERR_CHILD, "gpu-info: the worker ended with %s: %s", how,
                          why ? why : last_line(kl_strbuf_str(&c.err), line, sizeof line));
        goto cleanup;
    }
    const char *name = json_string_value(json_object_get(json_object_get(res, "device"), "name"));
    if (!name) {
        st = kl_error_set(err, KL_ERR_PARSE, "gpu-info: the worker's result has no device.name");
        goto cleanup;
    }
    if (!key) key = name;
    json_t *dev = json_object_get(res, "device");
    const char *cc = json_string_value(json_object_get(dev, "cc"));
    int major = 0, minor = 0;
    if (!gate->arch && cc && sscanf(cc, "%d.%d", &major, &minor) == 2) {
        free(arch);
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "sm_%d%d", major, minor);
        arch = kl_strbuf_detach(&sb, NULL);
    }
    char tc[256], stamp[32];
    toolchain_text(gate->nvcc_version, arch, tc, sizeof tc);
    kl_utc_stamp(stamp, sizeof stamp);
    json_object_set_new(res, "format", json_string(GPU_FORMAT));
    json_object_set_new(res, "key", json_string(key));
    json_object_set_new(res, "date", json_string(stamp));
    json_object_set_new(res, "toolchain", json_pack("{s:s, s:s, s:s}", "nvcc", gate->nvcc_version, "arch",
                                                    arch ? arch : "?", "text", tc));
    json_object_del(res, "error");
    text = json_dumps(res, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    if (gate->store) KL_TRY(kl_store_put(gate->store, "gpu", key, text, err));
    json_decref(gate->gpu);
    gate->gpu = res;
    res = NULL;
    free(gate->gpu_key);
    gate->gpu_key = kl_strdup(key);
cleanup:
    kl_child_release(&c);
    json_decref(res);
    free(job);
    free(text);
    free(arch);
    return st;
}

typedef struct gpu_visit {
    unsigned n;
    char *key, *json;
    kl_strbuf names;
} gpu_visit;

static bool visit_gpu(const char *key, const char *json, void *user)
{
    gpu_visit *v = user;
    if (!v->n) {
        v->key = kl_strdup(key);
        v->json = kl_strdup(json);
    }
    kl_strbuf_addf(&v->names, "%s%s", v->n ? ", " : "", key);
    v->n++;
    return true;
}

static kl_status load_gpu_doc(kl_gate *gate, const char *key, const char *json, kl_error *err)
{
    json_error_t je;
    json_t *doc = json_loads(json, 0, &je);
    if (!json_is_object(doc)) {
        json_decref(doc);
        return kl_error_set(err, KL_ERR_PARSE, "the stored device document \"%s\" is not a JSON object: %s", key,
                            je.text);
    }
    json_decref(gate->gpu);
    gate->gpu = doc;
    free(gate->gpu_key);
    gate->gpu_key = kl_strdup(key);
    return gate->gpu_key ? KL_OK : kl_error_set(err, KL_ERR_NOMEM, "out of memory");
}

/* Replay: the recorded device — --device, or the only one recorded. */
static kl_status replay_device(kl_gate *gate, kl_error *err)
{
    if (gate->gpu) return KL_OK;
    kl_status st;
    if (gate->device_opt) {
        char *json = NULL;
        st = kl_store_get(gate->store, "gpu", gate->device_opt, &json, err);
        if (st == KL_ERR_NOT_FOUND)
            return kl_error_set(err, KL_ERR_UNMEASURED, "no device \"%s\" recorded in the archive", gate->device_opt);
        if (st != KL_OK) return st;
        st = load_gpu_doc(gate, gate->device_opt, json, err);
        free(json);
        return st;
    }
    gpu_visit v = {0, NULL, NULL, KL_STRBUF_INIT};
    st = kl_store_each(gate->store, "gpu", NULL, visit_gpu, &v, err);
    if (st == KL_OK) {
        if (v.n == 0)
            st = kl_error_set(err, KL_ERR_UNMEASURED,
                              "no device recorded in the archive (a live run with --measure record writes one)");
        else if (v.n > 1)
            st = kl_error_set(err, KL_ERR_INVALID, "several devices recorded (%s): choose one with --device",
                              kl_strbuf_str(&v.names));
        else
            st = load_gpu_doc(gate, v.key, v.json, err);
    }
    free(v.key);
    free(v.json);
    kl_strbuf_release(&v.names);
    return st;
}

/* Live: the device document for this machine's GPU — in memory, in the store, or measured. */
static kl_status live_device(kl_gate *gate, bool measure, kl_error *err)
{
    if (gate->gpu && !measure) return KL_OK;
    if (!gpu_present() && !(gate->exec && kl_executor_remote(gate->exec)))
        return kl_error_set(err, KL_ERR_NO_GPU,
                            "no GPU on this machine (no NVIDIA driver: /proc/driver/nvidia/gpus and /dev/nvidia0 are "
                            "missing); use --measure replay to serve recorded verdicts");
    char *name = probe_device_name();
    kl_status st = KL_OK;
    if (!name && gate->exec && kl_executor_remote(gate->exec)) {
        /* a submitting host without a GPU (Slurm, docs/cluster.md): the nodes' device document, as
         * stored (the only one, or --device); else measured on a node, the runtime built for --arch */
        if (!measure && gate->store && replay_device(gate, err) == KL_OK) return KL_OK;
        kl_error_clear(err);
        if (!gate->arch)
            return kl_error_set(err, KL_ERR_NO_GPU,
                                "this host has no GPU to read the nodes' architecture from: measure the nodes' "
                                "device once with `klineage --executor slurm … gate --arch sm_XY TASK FILE.cu`");
    }
    if (!measure && name && gate->store) {
        char *json = NULL;
        st = kl_store_get(gate->store, "gpu", name, &json, err);
        if (st == KL_OK) {
            st = load_gpu_doc(gate, name, json, err);
            free(json);
            free(name);
            return st;
        }
        if (st != KL_ERR_NOT_FOUND) {
            free(name);
            return st;
        }
        kl_error_clear(err);
    }
    st = measure_gpu(gate, name, err);
    free(name);
    return st;
}

kl_status kl_gate_device(kl_gate *gate, kl_error *err)
{
    return gate->mode == KL_GATE_REPLAY ? replay_device(gate, err) : live_device(gate, false, err);
}

kl_status kl_gate_gpu_info(kl_gate *gate, bool measure, char **json, kl_error *err)
{
    *json = NULL;
    kl_status st = gate->mode == KL_GATE_REPLAY ? replay_device(gate, err) : live_device(gate, measure, err);
    if (st != KL_OK) return st;
    *json = json_dumps(gate->gpu, JSON_INDENT(2) | JSON_SORT_KEYS);
    return *json ? KL_OK : kl_error_set(err, KL_ERR_NOMEM, "out of memory");
}

/* A ceiling from the device document's "ceilings": the first number whose key path (two
 * levels, lowercase) holds every one of the words. < 0 when none. */
static double find_ceiling(const json_t *obj, const char *prefix, const char *const *words, unsigned nwords)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v)
    {
        char path[256];
        kl_snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", k);
        for (char *p = path; *p; p++)
            if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
        if (json_is_number(v)) {
            unsigned hit = 0;
            for (unsigned i = 0; i < nwords; i++)
                if (strstr(path, words[i])) hit++;
            if (hit == nwords) return json_number_value(v);
        } else if (json_is_object(v) && !*prefix) {
            double d = find_ceiling(v, path, words, nwords);
            if (d >= 0) return d;
        }
    }
    return -1;
}

typedef struct ceilings {
    double copy_gbps, fma_tflops, tensor_tflops;
} ceilings;

static ceilings device_ceilings(const json_t *gpu)
{
    const json_t *c = json_object_get(gpu, "ceilings");
    static const char *const copy[] = {"copy", "gb"};
    static const char *const fma[] = {"fma", "tflop"};
    static const char *const f32[] = {"f32", "tflop"};
    static const char *const tensor[] = {"tensor", "tflop"};
    static const char *const bf16[] = {"bf16", "tflop"};
    ceilings r = {-1, -1, -1};
    if (!json_is_object(c)) return r;
    r.copy_gbps = find_ceiling(c, "", copy, 2);
    r.fma_tflops = find_ceiling(c, "", fma, 2);
    if (r.fma_tflops < 0) r.fma_tflops = find_ceiling(c, "", f32, 2);
    r.tensor_tflops = find_ceiling(c, "", tensor, 2);
    if (r.tensor_tflops < 0) r.tensor_tflops = find_ceiling(c, "", bf16, 2);
    return r;
}

/* ---- judging ---------------------------------------------------------------------------- */

typedef struct judge_ctx {
    kl_gate *gate;
    const kl_task *task;
    const kl_judge_options *opt;
    const char *cand_name, *base_name;
    char *cand_text, *base_text, *base_path;
    char *task_json, *reference;
    const char *builtin;      /* a vendor baseline built into the worker ("cublas-sgemm"), or NULL */
    char *arch;
    char toolchain[256];
    char key[KL_HASH_HEX];
    kl_strbuf shapes;  /* "check[0],…,bench" */
    kl_strbuf stages;
} judge_ctx;

static kl_status read_text(const char *path, char **out, kl_error *err)
{
    size_t len = 0;
    return kl_file_read(path, (size_t)64 << 20, out, &len, err);
}

static kl_status judge_inputs(judge_ctx *j, const kl_gate_source *cand, const kl_gate_source *base, kl_error *err)
{
    kl_status st = KL_OK;
    const kl_task *t = j->task;
    if (!cand || !cand->name) return kl_error_set(err, KL_ERR_INVALID, "no candidate kernel given");
    j->cand_name = cand->name;
    if (cand->text) j->cand_text = kl_strdup(cand->text);
    else KL_TRY(read_text(cand->name, &j->cand_text, err));
    if (j->opt->baseline_builtin) {
        if (strcmp(j->opt->baseline_builtin, "cublas-sgemm") && strcmp(j->opt->baseline_builtin, "cublas-bf16gemm"))
            return kl_error_set(err, KL_ERR_INVALID, "unknown built-in baseline '%s' (cublas-sgemm, cublas-bf16gemm)",
                                j->opt->baseline_builtin);
        j->builtin = j->opt->baseline_builtin;
        j->base_name = j->builtin;
    } else if (base && base->name) {
        j->base_name = base->name;
        if (base->text) j->base_text = kl_strdup(base->text);
        else KL_TRY(read_text(base->name, &j->base_text, err));
        j->base_path = kl_strdup(base->name);
    } else if (t->naive) {
        j->base_path = kl_task_path(t, t->naive);
        if (!j->base_path) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        j->base_name = j->base_path;
        KL_TRY(read_text(j->base_path, &j->base_text, err));
    }
    char *p = kl_task_path(t, "task.json");
    if (!p) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    st = read_text(p, &j->task_json, err);
    free(p);
    if (st != KL_OK) return st;
    p = kl_task_path(t, t->reference ? t->reference : "reference.c");
    if (!p) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    st = read_text(p, &j->reference, err);
    free(p);
    if (st != KL_OK) return st;
    for (unsigned i = 0; i < t->nchecks; i++) kl_strbuf_addf(&j->shapes, "%s,", t->checks[i].label);
    kl_strbuf_adds(&j->shapes, t->bench.label ? t->bench.label : "bench");
    kl_strbuf_adds(&j->stages, "correct,determinism,integrity,stream");
    if (!j->opt->no_profile) kl_strbuf_adds(&j->stages, ",profile");
    if (j->opt->sanitize) kl_strbuf_adds(&j->stages, ",sanitize");
    if (j->opt->bench_against_baseline) {
        if (!j->base_name)
            return kl_error_set(err, KL_ERR_INVALID,
                                "checking the bench shape against the baseline needs a baseline (the task has no naive kernel)");
        kl_strbuf_adds(&j->stages, ",bench-against-baseline");
    }
    if (!j->cand_text || (j->base_name && !j->builtin && !j->base_text) || j->shapes.failed || j->stages.failed)
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
cleanup:
    return st;
}

static void judge_release(judge_ctx *j)
{
    free(j->cand_text);
    free(j->base_text);
    free(j->base_path);
    free(j->task_json);
    free(j->reference);
    free(j->arch);
    kl_strbuf_release(&j->shapes);
    kl_strbuf_release(&j->stages);
}

static void key_of(const judge_ctx *j, const char *stages, char hex[KL_HASH_HEX])
{
    char builtin[96] = "";
    if (j->builtin) kl_snprintf(builtin, sizeof builtin, "builtin:%s", j->builtin);
    kl_verdict_key_parts p = {j->cand_text, j->builtin ? builtin : j->base_text, j->task_json, j->reference,
                              kl_strbuf_str(&j->shapes), stages, j->gate->gpu_key, j->toolchain};
    kl_verdict_key(&p, hex);
}

static void judge_key(judge_ctx *j) { key_of(j, kl_strbuf_str(&j->stages), j->key); }

/* The same judgement without the sanitize stage: its stored document, or NULL. A sanitized
 * verdict reuses the stages of a stored one and runs only the sanitizer (a walk asks for the
 * sanitizer on the proposal it admits, which it has just judged without). */
static const char *weak_evidence(const json_t *doc);

static json_t *unsanitized_prior(const judge_ctx *j, char hex[KL_HASH_HEX])
{
    const char *all = kl_strbuf_str(&j->stages);
    const char *at = strstr(all, ",sanitize");
    if (!at || !j->gate->store) return NULL;
    kl_strbuf st = KL_STRBUF_INIT;
    kl_strbuf_add(&st, all, (size_t)(at - all));
    kl_strbuf_adds(&st, at + strlen(",sanitize"));
    key_of(j, kl_strbuf_str(&st), hex);
    kl_strbuf_release(&st);
    char *json = NULL;
    kl_error ignore;
    if (kl_store_get(j->gate->store, "verdict", hex, &json, &ignore) != KL_OK) return NULL;
    json_t *doc = json_loads(json, 0, NULL);
    free(json);
    if (!json_is_object(doc) || strcmp(json_string_value(json_object_get(doc, "key")) ? json_string_value(json_object_get(doc, "key")) : "", hex) != 0 ||
        !json_is_object(json_object_get(doc, "stages")) || weak_evidence(doc)) {
        /* (a pass on weaker evidence than today's gate asks for is judged again, whole: reused,
         * the sanitized verdict would not be stored, and a walk could not be replayed) */
        json_decref(doc);
        return NULL;
    }
    return doc;
}

/* Why a passing verdict must not be stored: its determinism evidence is weaker than the gate's
 * standard (shared memory poisoned before the trials, the smaller shapes run right after a large
 * one). NULL when it may be. */
static const char *weak_evidence(const json_t *doc)
{
    if (!json_is_true(json_object_get(doc, "pass"))) return NULL;
    const json_t *det = json_object_get(json_object_get(doc, "stages"), "determinism");
    const json_t *ev = json_object_get(det, "evidence");
    if (!json_is_object(ev)) return "the determinism stage reported no evidence";
    if (!json_is_true(json_object_get(ev, "smem_poisoned"))) return "shared memory was not poisoned before the trials";
    if (!json_is_true(json_object_get(ev, "complete")))
        return "fewer smaller shapes ran right after a large one than the gate asks for";
    return NULL;
}

/* A stored verdict names the files it was judged with; served again, it names the ones given
 * now (the key covers their text, not their names). */
static void name_files(judge_ctx *j, kl_verdict *v)
{
    json_t *doc = kl_verdict_document(v);
    json_t *c = json_object_get(doc, "candidate"), *b = json_object_get(doc, "baseline");
    if (json_is_object(c) && j->cand_name) {
        json_object_set_new(c, "name", json_string(j->cand_name));
        v->candidate = json_string_value(json_object_get(c, "name"));
    }
    if (json_is_object(b) && j->base_name) {
        json_object_set_new(b, "name", json_string(j->base_name));
        v->baseline = json_string_value(json_object_get(b, "name"));
    }
}

static kl_status from_store(judge_ctx *j, kl_verdict **out, kl_error *err)
{
    char *json = NULL;
    kl_status st = kl_store_get(j->gate->store, "verdict", j->key, &json, err);
    if (st != KL_OK) return st;
    st = kl_verdict_parse(json, out, err);
    free(json);
    if (st != KL_OK) return kl_error_prefix(err, "the stored verdict %s", j->key);
    if (!(*out)->key || strcmp((*out)->key, j->key) != 0) {
        kl_verdict_free(*out);
        *out = NULL;
        return kl_error_set(err, KL_ERR_INVALID, "the stored verdict under %s names another key (%s)", j->key,
                            "a corrupted store or archive");
    }
    name_files(j, *out);
    return KL_OK;
}

/* "check[1] (rows=3, cols=1023)" */
static void shape_text(const kl_task *t, const char *label, kl_strbuf *sb)
{
    kl_strbuf_adds(sb, label ? label : "?");
    const kl_shape *s = label ? kl_task_shape(t, label) : NULL;
    if (!s) return;
    kl_strbuf_adds(sb, " (");
    for (unsigned i = 0; i < t->nsizes; i++)
        kl_strbuf_addf(sb, "%s%s=%lld", i ? ", " : "", t->sizes[i], (long long)s->values[i]);
    kl_strbuf_addc(sb, ')');
}

static json_t *stage_fail(const char *reason)
{
    return json_pack("{s:b, s:s}", "ok", 0, "reason", reason ? reason : "failed");
}

static json_t *stage_skip(const char *why) { return json_pack("{s:s}", "skipped", why); }

/* The correct stage from the worker's "correct" array. */
static json_t *correct_stage(const judge_ctx *j, json_t *trials)
{
    if (!json_is_array(trials) || !json_array_size(trials)) return stage_fail("the worker reported no correctness trial");
    bool ok = true;
    kl_strbuf reason = KL_STRBUF_INIT;
    for (size_t i = 0; i < json_array_size(trials) && ok; i++) {
        json_t *t = json_array_get(trials, i);
        if (json_is_true(json_object_get(t, "ok"))) continue;
        ok = false;
        kl_strbuf_adds(&reason, "wrong at ");
        shape_text(j->task, json_string_value(json_object_get(t, "shape")), &reason);
        kl_strbuf_addf(&reason, ", seed %lld", (long long)json_integer_value(json_object_get(t, "seed")));
        json_t *outs = json_object_get(t, "outputs");
        for (size_t k = 0; k < json_array_size(outs); k++) {
            json_t *o = json_array_get(outs, k);
            if (json_is_true(json_object_get(o, "ok"))) continue;
            const char *arg = json_string_value(json_object_get(o, "arg"));
            const char *detail = json_string_value(json_object_get(o, "detail"));
            kl_strbuf_addf(&reason, ": %s: ", arg ? arg : "?");
            if (detail && *detail) kl_strbuf_addf(&reason, "%s; ", detail);
            kl_strbuf_addf(&reason, "rel_l2 %.3g, max_abs %.3g, first bad index %lld, %lld NaN, %lld Inf, %lld unwritten of %lld",
                           json_number_value(json_object_get(o, "rel_l2")), json_number_value(json_object_get(o, "max_abs")),
                           (long long)json_integer_value(json_object_get(o, "first_bad")),
                           (long long)json_integer_value(json_object_get(o, "nan")),
                           (long long)json_integer_value(json_object_get(o, "inf")),
                           (long long)json_integer_value(json_object_get(o, "unwritten")),
                           (long long)json_integer_value(json_object_get(o, "count")));
            break;
        }
        const char *tdetail = json_string_value(json_object_get(t, "detail"));
        if (tdetail && *tdetail) kl_strbuf_addf(&reason, " (%s)", tdetail);
    }
    json_t *s = json_pack("{s:b, s:O}", "ok", ok, "trials", trials);
    if (!ok) json_object_set_new(s, "reason", json_string(kl_strbuf_str(&reason)));
    kl_strbuf_release(&reason);
    return s;
}

/* determinism / integrity / stream: the worker's object, with a reason when it failed. */
static json_t *simple_stage(json_t *w)
{
    if (!json_is_object(w)) return NULL;
    json_t *s = json_deep_copy(w);
    if (!json_is_true(json_object_get(s, "ok")) && !json_object_get(s, "reason")) {
        const char *d = json_string_value(json_object_get(s, "detail"));
        json_object_set_new(s, "reason", json_string(d && *d ? d : "failed"));
    }
    return s;
}

static json_t *profile_stage(const judge_ctx *j, json_t *w)
{
    if (!json_is_object(w)) return NULL;
    json_t *s = json_deep_copy(w);
    json_t *cand = json_object_get(s, "candidate"), *base = json_object_get(s, "baseline");
    json_object_del(cand, "times_ms"); /* the verdict keeps the statistics, not every sample */
    json_object_del(base, "times_ms");
    double cm = json_number_value(json_object_get(cand, "median_ms"));
    if (!(cm > 0) || !isfinite(cm)) {
        json_object_set_new(s, "ok", json_false());
        json_object_set_new(s, "reason", json_string("the worker reported no positive candidate median"));
        return s;
    }
    if (json_is_object(base)) {
        if (j->base_name) json_object_set_new(base, "name", json_string(j->base_name));
        double bm = json_number_value(json_object_get(base, "median_ms"));
        if (bm > 0 && isfinite(bm)) json_object_set_new(s, "speedup", json_real(bm / cm));
    }
    const kl_task *t = j->task;
    int64_t bytes = -1, flops = -1;
    kl_error ignore;
    double secs = cm * 1e-3;
    if (t->cost_bytes && kl_task_eval(t, &t->bench, t->cost_bytes, &bytes, &ignore) == KL_OK && bytes >= 0)
        json_object_set_new(s, "gbps", json_real((double)bytes / secs / 1e9));
    if (t->cost_flops && kl_task_eval(t, &t->bench, t->cost_flops, &flops, &ignore) == KL_OK && flops >= 0)
        json_object_set_new(s, "tflops", json_real((double)flops / secs / 1e12));
    ceilings c = device_ceilings(j->gate->gpu);
    bool low_precision = false;
    for (unsigned i = 0; i < t->nargs; i++)
        if (t->args[i].dtype == KL_DTYPE_F16 || t->args[i].dtype == KL_DTYPE_BF16) low_precision = true;
    double compute_ceiling = low_precision ? c.tensor_tflops : c.fma_tflops;
    double highest = c.fma_tflops > c.tensor_tflops ? c.fma_tflops : c.tensor_tflops;
    json_t *frac = json_object();
    json_t *ceil = json_object();
    if (c.copy_gbps > 0) json_object_set_new(ceil, "copy_gbps", json_real(c.copy_gbps));
    if (c.fma_tflops > 0) json_object_set_new(ceil, "fma_f32_tflops", json_real(c.fma_tflops));
    if (c.tensor_tflops > 0) json_object_set_new(ceil, "tensor_bf16_tflops", json_real(c.tensor_tflops));
    json_object_set_new(s, "ceilings", ceil);
    double gbps = bytes >= 0 ? (double)bytes / secs / 1e9 : -1;
    double tflops = flops >= 0 ? (double)flops / secs / 1e12 : -1;
    if (gbps >= 0 && c.copy_gbps > 0) json_object_set_new(frac, "bandwidth", json_real(gbps / c.copy_gbps));
    if (tflops >= 0 && compute_ceiling > 0) {
        json_object_set_new(frac, "compute", json_real(tflops / compute_ceiling));
        json_object_set_new(frac, "compute_ceiling", json_string(low_precision ? "bf16 tensor" : "f32 FMA"));
    }
    json_object_set_new(s, "fraction", frac);
    if (json_is_false(json_object_get(s, "ok"))) { /* the worker's own verdict on the timing */
        if (!json_object_get(s, "reason")) {
            const char *d = json_string_value(json_object_get(s, "detail"));
            json_object_set_new(s, "reason", json_string(d && *d ? d : "the worker rejected the timing"));
        }
        return s;
    }
    json_object_set_new(s, "ok", json_true());
    char why[512];
    if (gbps > 0 && c.copy_gbps > 0 && gbps > CEILING_SLACK * c.copy_gbps) {
        kl_snprintf(why, sizeof why,
                    "faster than the device allows: %.4g GB/s against a measured copy ceiling of %.4g GB/s (the "
                    "kernel skipped work, or its work was hidden from the timer)",
                    gbps, c.copy_gbps);
        json_object_set_new(s, "ok", json_false());
        json_object_set_new(s, "reason", json_string(why));
    } else if (tflops > 0 && highest > 0 && tflops > CEILING_SLACK * highest) {
        kl_snprintf(why, sizeof why,
                    "faster than the device allows: %.4g TFLOP/s against a measured peak of %.4g TFLOP/s (the kernel "
                    "skipped work, or its work was hidden from the timer)",
                    tflops, highest);
        json_object_set_new(s, "ok", json_false());
        json_object_set_new(s, "reason", json_string(why));
    }
    return s;
}

static bool requested(const judge_ctx *j, const char *stage)
{
    if (!strcmp(stage, "compile")) return true;
    if (!strcmp(stage, "profile")) return !j->opt->no_profile;
    if (!strcmp(stage, "sanitize")) return j->opt->sanitize;
    return true;
}

/* Fill the run stages of `stages` from the worker's end and result. */
static void worker_stages(judge_ctx *j, const kl_child *c, json_t *res, json_t *stages)
{
    if (json_is_object(res)) {
        json_t *s;
        if (json_object_get(res, "correct")) json_object_set_new(stages, "correct", correct_stage(j, json_object_get(res, "correct")));
        const char *simple[] = {"determinism", "integrity", "stream"};
        for (int i = 0; i < 3; i++)
            if ((s = simple_stage(json_object_get(res, simple[i]))) != NULL) json_object_set_new(stages, simple[i], s);
        if (!j->opt->no_profile && (s = profile_stage(j, json_object_get(res, "profile"))) != NULL)
            json_object_set_new(stages, "profile", s);
        /* the worker's hygiene check (threads started, harness symbols interposed) is part of
         * integrity: a failure there fails integrity with its detail */
        json_t *hyg = json_object_get(res, "hygiene");
        if (json_is_object(hyg)) {
            json_t *integ = json_object_get(stages, "integrity");
            if (!integ) {
                integ = json_object();
                json_object_set_new(integ, "ok", json_true());
                json_object_set_new(stages, "integrity", integ);
            }
            json_object_set(integ, "hygiene", hyg);
            if (json_is_false(json_object_get(hyg, "ok")) && json_is_true(json_object_get(integ, "ok"))) {
                const char *d = json_string_value(json_object_get(hyg, "detail"));
                json_object_set_new(integ, "ok", json_false());
                json_object_set_new(integ, "reason", json_string(d && *d ? d : "the candidate broke the harness's hygiene"));
            }
        }
    }
    /* A worker error: a CUDA failure named by stage. */
    json_t *error = json_object_get(res, "error");
    char how[128];
    kl_gate_child_reason(c, how, sizeof how);
    const char *first_missing = NULL;
    for (unsigned i = 1; i < kl_gate_stage_count; i++) {
        const char *name = kl_gate_stage_names[i];
        if (!strcmp(name, "sanitize") || !requested(j, name)) continue;
        if (!json_object_get(stages, name)) {
            first_missing = name;
            break;
        }
    }
    if (json_is_object(error)) {
        char *reason = kl_gate_cuda_reason(error);
        const char *st = json_string_value(json_object_get(error, "stage"));
        const char *where = NULL;
        for (unsigned i = 1; st && i < kl_gate_stage_count; i++)
            if (!strcmp(st, kl_gate_stage_names[i])) where = kl_gate_stage_names[i];
        /* an error outside the stages (the final synchronize): work the candidate left behind */
        if (!where) where = first_missing ? first_missing : "stream";
        json_t *old = json_object_get(stages, where);
        if (old) { /* keep what the stage reported; the CUDA error is the reason, named first */
            const char *was = json_is_true(json_object_get(old, "ok")) ? NULL
                                                                        : json_string_value(json_object_get(old, "reason"));
            kl_strbuf r = KL_STRBUF_INIT;
            kl_strbuf_adds(&r, reason ? reason : "CUDA error");
            if (was && *was) kl_strbuf_addf(&r, "; %s", was);
            json_object_set_new(old, "ok", json_false());
            json_object_set_new(old, "reason", json_string(kl_strbuf_str(&r)));
            kl_strbuf_release(&r);
            json_object_set(old, "error", error);
        } else {
            json_t *f = stage_fail(reason);
            json_object_set(f, "error", error);
            json_object_set_new(stages, where, f);
        }
        free(reason);
    } else if (c->exit_code != 0 || !json_is_object(res)) {
        char line[512], why[1024];
        const char *tail = last_line(kl_strbuf_str(&c->err), line, sizeof line);
        if (c->exit_code == 0)
            kl_snprintf(why, sizeof why, "the worker's result is not JSON (does the kernel write to stdout?)%s%s",
                        *tail ? ": " : "", tail);
        else if (c->timed_out || c->term_signal)
            kl_snprintf(why, sizeof why, "the worker was %s%s%s", how, *tail ? "; its last words: " : "", tail);
        else
            kl_snprintf(why, sizeof why, "the worker ended with %s%s%s", how, *tail ? ": " : "", tail);
        json_object_set_new(stages, first_missing ? first_missing : "correct", stage_fail(why));
    }
    /* Stages asked for and not reported (after a failure the worker stops): skipped or missing. */
    bool failed = false;
    for (unsigned i = 1; i < kl_gate_stage_count; i++) {
        const char *name = kl_gate_stage_names[i];
        if (!strcmp(name, "sanitize")) continue;
        json_t *s = json_object_get(stages, name);
        if (s) {
            if (!json_is_true(json_object_get(s, "ok"))) failed = true;
            continue;
        }
        if (!requested(j, name)) json_object_set_new(stages, name, stage_skip("not asked for"));
        else if (failed) json_object_set_new(stages, name, stage_skip("an earlier stage failed"));
        else {
            json_object_set_new(stages, name, stage_fail("the worker did not report this stage"));
            failed = true;
        }
    }
}

/* 32 bits of the key as a number: seeds no candidate can know before it is written. */
static uint64_t hex_prefix(const char *hex, int off)
{
    char buf[9];
    memcpy(buf, hex + off, 8);
    buf[8] = '\0';
    return strtoull(buf, NULL, 16);
}

static json_t *worker_job(const judge_ctx *j, const kl_compiled *cand, const kl_compiled *base, bool sanitize_run)
{
    const kl_task *t = j->task;
    json_t *shapes = json_array();
    uint64_t seed_a = hex_prefix(j->key, 0), seed_b = hex_prefix(j->key, 8);
    if (seed_b == seed_a) seed_b++;
    json_t *seeds = json_pack("[I, I]", (json_int_t)seed_a, (json_int_t)seed_b);
    json_t *stages;
    if (sanitize_run) {
        /* the smallest check shape: the fewest tensor elements in all */
        int best = -1;
        int64_t best_total = 0;
        for (unsigned s = 0; s < t->nchecks; s++) {
            int64_t total = 0, n = 0;
            kl_error ignore;
            for (unsigned a = 0; a < t->nargs; a++)
                if (t->args[a].dtype != KL_DTYPE_NONE && kl_task_arg_count(t, &t->checks[s], a, &n, &ignore) == KL_OK)
                    total += n;
            if (best < 0 || total < best_total) best = (int)s, best_total = total;
        }
        json_array_append_new(shapes, json_string(best >= 0 ? t->checks[best].label : t->bench.label));
        json_array_remove(seeds, 1);
        stages = json_pack("{s:b, s:b, s:b, s:b, s:b}", "correct", 1, "determinism", 0, "integrity", 0, "stream", 0,
                           "profile", 0);
    } else {
        for (unsigned s = 0; s < t->nchecks; s++) json_array_append_new(shapes, json_string(t->checks[s].label));
        if (j->opt->bench_against_baseline)
            json_array_append_new(shapes, json_pack("{s:s, s:b, s:i}", "label", t->bench.label, "reference", 0, "seeds", 1));
        else
            json_array_append_new(shapes, json_string(t->bench.label));
        json_t *prof = j->opt->no_profile ? json_false()
                                          : json_pack("{s:s, s:i, s:i, s:f, s:i, s:b}", "shape", t->bench.label,
                                                      "min_reps", 20, "max_reps", 200, "max_seconds", 1.5, "warmup",
                                                      3, "flush_l2", 1);
        stages = json_pack("{s:b, s:b, s:b, s:b, s:o}", "correct", 1, "determinism", 1, "integrity", 1, "stream", 1,
                           "profile", prof);
    }
    json_t *job = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s?, s:o, s:o, s:o}", "job", "gate", "runtime", j->gate->runtime,
                     "task_dir", t->dir, "cache_dir", j->gate->cache_dir, "candidate", cand->object, "baseline",
                     (!sanitize_run && base &&
                      (!j->opt->no_profile || t->reference_max_flops > 0 || j->opt->bench_against_baseline))
                         ? base->object
                         : NULL,
                     "shapes", shapes, "seeds", seeds, "stages", stages);
    if (job && j->builtin && !sanitize_run) json_object_set_new(job, "baseline_builtin", json_string(j->builtin));
    /* under a sanitizer each tensor ends where its allocation ends (a read past it is reported) */
    if (job && sanitize_run) json_object_set_new(job, "tight", json_true());
    /* the worker's own deadline, before the parent's kill: waiting past it on a reference is the
     * task's limit and ends as a harness error, never as the candidate's timeout */
    double timeout = sanitize_run ? j->gate->sanitize_timeout_s
                                  : j->opt->timeout_s > 0 ? j->opt->timeout_s : j->gate->run_timeout_s;
    double margin = timeout * 0.1 > 5 ? timeout * 0.1 : 5;
    if (job && timeout - margin >= 1) json_object_set_new(job, "deadline_s", json_real(timeout - margin));
    if (job && t->reference_max_flops > 0)
        json_object_set_new(job, "reference_max_flops", json_real(t->reference_max_flops));
    /* the measured ceilings, so the worker can refuse timings past them as well */
    ceilings c = device_ceilings(j->gate->gpu);
    if (job && !sanitize_run && c.copy_gbps > 0 && c.fma_tflops > 0 && c.tensor_tflops > 0)
        json_object_set_new(job, "ceilings", json_pack("{s:f, s:f, s:f}", "copy_gbs", c.copy_gbps, "fma_tflops",
                                                       c.fma_tflops, "tensor_tflops", c.tensor_tflops));
    return job;
}

static void finish_doc(judge_ctx *j, json_t *doc, json_t *stages)
{
    const char *failed = NULL, *reason = NULL;
    for (unsigned i = 0; i < kl_gate_stage_count && !failed; i++) {
        json_t *s = json_object_get(stages, kl_gate_stage_names[i]);
        if (!s) {
            json_object_set_new(stages, kl_gate_stage_names[i],
                                stage_skip(requested(j, kl_gate_stage_names[i]) ? "an earlier stage failed" : "not asked for"));
            continue;
        }
        if (json_object_get(s, "skipped")) continue;
        if (!json_is_true(json_object_get(s, "ok"))) {
            failed = kl_gate_stage_names[i];
            reason = json_string_value(json_object_get(s, "reason"));
        }
    }
    for (unsigned i = 0; i < kl_gate_stage_count; i++)
        if (!json_object_get(stages, kl_gate_stage_names[i]))
            json_object_set_new(stages, kl_gate_stage_names[i],
                                stage_skip(requested(j, kl_gate_stage_names[i]) ? "an earlier stage failed" : "not asked for"));
    json_object_set_new(doc, "pass", json_boolean(!failed));
    json_object_set_new(doc, "failed_stage", failed ? json_string(failed) : json_null());
    json_object_set_new(doc, "reason", failed ? json_string(reason ? reason : "failed") : json_null());
}

static json_t *new_doc(judge_ctx *j)
{
    char stamp[32], ch[KL_HASH_HEX], bh[KL_HASH_HEX] = "";
    kl_utc_stamp(stamp, sizeof stamp);
    kl_hash_hex(j->cand_text, strlen(j->cand_text), ch);
    if (j->builtin)
        kl_snprintf(bh, sizeof bh, "builtin:%s", j->builtin);
    else if (j->base_text)
        kl_hash_hex(j->base_text, strlen(j->base_text), bh);
    json_t *dev = json_deep_copy(json_object_get(j->gate->gpu, "device"));
    if (!json_is_object(dev)) {
        json_decref(dev);
        dev = json_object();
    }
    json_object_set_new(dev, "name", json_string(j->gate->gpu_key));
    json_t *shapes = json_array();
    for (unsigned i = 0; i < j->task->nchecks; i++) json_array_append_new(shapes, json_string(j->task->checks[i].label));
    json_array_append_new(shapes, json_string(j->task->bench.label));
    return json_pack("{s:s, s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s}, s:o, s:o, s:{s:s?, s:s, s:s}, s:o, s:s, s:{}}",
                     "format", KL_VERDICT_FORMAT, "key", j->key, "date", stamp, "task", "name",
                     j->task->name ? j->task->name : "?", "dir", j->task->dir ? j->task->dir : "?", "candidate", "name",
                     j->cand_name, "hash", ch, "baseline",
                     j->base_name ? json_pack("{s:s, s:s}", "name", j->base_name, "hash", bh) : json_null(), "device",
                     dev, "toolchain", "nvcc", j->gate->nvcc_version, "arch", j->arch, "text", j->toolchain, "shapes",
                     shapes, "stages_asked", kl_strbuf_str(&j->stages), "stages");
}

/* The run stages of `doc` from how the worker ended and what it wrote (c->out). An error,
 * and no verdict, when the worker's end is not the candidate's doing. */
static kl_status run_stages(judge_ctx *j, const kl_child *c, json_t *doc, kl_error *err)
{
    json_t *stages = json_object_get(doc, "stages");
    json_t *res = NULL;
    kl_status st = KL_OK;
    json_error_t je;
    res = json_loads(kl_strbuf_str(&c->out), 0, &je);
    if (res && !json_is_object(res)) json_decref(res), res = NULL;
    /* the worker's own failures carry its result with an "error"; the same exit code with no
     * result is a process that ended abruptly — a candidate calling exit(4) is judged, not
     * taken for the harness */
    if (!c->timed_out && !c->term_signal && json_is_object(json_object_get(res, "error")) &&
        (c->exit_code == KL_WORKER_EXIT_JOB || c->exit_code == KL_WORKER_EXIT_NO_GPU || c->exit_code == KL_WORKER_EXIT_HARNESS)) {
        /* not the candidate's doing: no verdict */
        char line[512];
        const char *why = json_string_value(json_object_get(json_object_get(res, "error"), "detail"));
        st = kl_error_set(err, c->exit_code == KL_WORKER_EXIT_NO_GPU ? KL_ERR_NO_GPU : KL_ERR_CHILD, "the worker %s: %s",
                          c->exit_code == KL_WORKER_EXIT_JOB      ? "rejected the gate's job"
                          : c->exit_code == KL_WORKER_EXIT_NO_GPU ? "found no GPU"
                                                                 : "failed in its harness (not the candidate)",
                          why ? why : last_line(kl_strbuf_str(&c->err), line, sizeof line));
        goto cleanup;
    }
    worker_stages(j, c, res, stages);
    char how[128];
    kl_gate_child_reason(c, how, sizeof how);
    const char *elog = kl_strbuf_str(&c->err);
    size_t elen = strlen(elog);
    json_t *run = json_pack("{s:s, s:f, s:s}", "worker", how, "seconds", c->wall_s, "log",
                            elen > LOG_KEEP ? elog + elen - LOG_KEEP : elog);
    /* where the worker's time went (its own clock; the rest of seconds is its start and exit) */
    json_t *timings = json_object_get(res, "timings");
    if (run && json_is_object(timings)) json_object_set(run, "timings", timings);
    /* what the worker ran under: said on every verdict, and loudly once when it was not there */
    json_t *sandbox = json_object_get(res, "sandbox");
    if (run && json_is_object(sandbox)) json_object_set(run, "sandbox", sandbox);
    if (json_is_object(sandbox) && j->gate->sandbox != KL_SANDBOX_OFF && !j->gate->sandbox_warned &&
        (!json_is_true(json_object_get(sandbox, "landlock")) || !json_is_true(json_object_get(sandbox, "seccomp")))) {
        j->gate->sandbox_warned = true;
        kl_log(KL_LOG_WARN, "the candidate ran WITHOUT the full sandbox: %s (docs/gate.md; KLINEAGE_SANDBOX=require "
                            "makes this an error)",
               json_string_value(json_object_get(sandbox, "detail")) ? json_string_value(json_object_get(sandbox, "detail"))
                                                                     : "?");
    }
    json_object_set_new(doc, "run", run);
    if (json_is_object(json_object_get(res, "device")))
        json_object_update_missing(json_object_get(doc, "device"), json_object_get(res, "device"));
cleanup:
    json_decref(res);
    return st;
}

/* The sanitize stage of `stages` for the compiled candidate (compiled, the rest passed). */
static kl_status sanitize_stage(judge_ctx *j, const kl_compiled *cand, json_t *stages, kl_error *err)
{
    char *scratch = NULL;
    kl_status st = kl_gate_scratch(j->gate, &scratch, err);
    if (st != KL_OK) return st;
    json_t *sjob = worker_job(j, cand, NULL, true);
    kl_gate_job_sandbox(j->gate, sjob, j->task, scratch, true);
    char *sjob_text = sjob ? json_dumps(sjob, JSON_COMPACT) : NULL;
    json_t *sstage = NULL;
    if (!sjob_text) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    else st = kl_gate_sanitize(j->gate, sjob_text, scratch, &sstage, err);
    kl_gate_scratch_done(scratch);
    if (sstage) json_object_set(sstage, "shape", json_array_get(json_object_get(sjob, "shapes"), 0));
    json_decref(sjob);
    free(sjob_text);
    if (st == KL_OK) json_object_set_new(stages, "sanitize", sstage);
    else json_decref(sstage);
    return st;
}

static bool stages_passed(json_t *stages)
{
    for (unsigned i = 0; i < kl_gate_stage_count; i++) {
        json_t *s = json_object_get(stages, kl_gate_stage_names[i]);
        if (s && !json_object_get(s, "skipped") && !json_is_true(json_object_get(s, "ok"))) return false;
    }
    return true;
}

/* prior: the stored verdict of the same judgement without the sanitize stage (owned here), or
 * NULL: its stages are taken as they are and only the sanitizer runs. */
static kl_status live_judge(judge_ctx *j, json_t *prior, const char *prior_key, kl_verdict **out, kl_error *err)
{
    kl_gate *gate = j->gate;
    kl_status st = KL_OK;
    kl_compiled *objs[2] = {NULL, NULL};
    json_t *doc = NULL;
    char *job_text = NULL, *scratch = NULL;
    kl_child c;
    kl_child_init(&c);
    kl_gate_source srcs[2] = {{j->cand_name, j->cand_text}, {j->base_name, j->base_text}};
    double t_start = kl_now(), t_compile = 0, t_runtime = 0;
    unsigned ncompile = prior ? 1 : j->base_text && !j->builtin ? 2 : 1;
    KL_TRY(kl_gate_compile_many(gate, j->task, ncompile, srcs, objs, err));
    t_compile = kl_now() - t_start;
    if (objs[1] && !objs[1]->ok) {
        st = kl_error_set(err, KL_ERR_COMPILE, "the baseline does not compile: %s",
                          objs[1]->error ? objs[1]->error : "nvcc failed");
        goto cleanup;
    }
    json_t *stages;
    if (prior) {
        /* the stored judgement's stages, under this judgement's key and date */
        char stamp[32];
        kl_utc_stamp(stamp, sizeof stamp);
        doc = prior;
        prior = NULL;
        json_object_set_new(doc, "reused_from", json_pack("{s:s, s:O}", "key", prior_key, "date",
                                                          json_object_get(doc, "date") ? json_object_get(doc, "date")
                                                                                       : json_null()));
        json_object_set_new(doc, "key", json_string(j->key));
        json_object_set_new(doc, "date", json_string(stamp));
        json_object_set_new(doc, "stages_asked", json_string(kl_strbuf_str(&j->stages)));
        json_object_set_new(json_object_get(doc, "candidate"), "name", json_string(j->cand_name));
        json_object_del(doc, "stored");
        json_object_del(doc, "not_stored");
        stages = json_object_get(doc, "stages");
        json_object_del(stages, "sanitize");
        if (stages_passed(stages)) {
            if (!objs[0]->ok) { /* the stored verdict compiled; this toolchain's object check says no */
                json_t *cj = json_object_get(stages, "compile");
                json_object_set_new(cj, "ok", json_false());
                json_object_set_new(cj, "reason", json_string(objs[0]->error ? objs[0]->error : "nvcc failed"));
                goto finish;
            }
            KL_TRY(ensure_runtime(gate, j->arch, err));
            KL_TRY(sanitize_stage(j, objs[0], stages, err));
        }
        goto finish;
    }
    doc = new_doc(j);
    if (!doc) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    stages = json_object_get(doc, "stages");
    json_t *cj = kl_compiled_json(objs[0]);
    json_object_set_new(cj, "log", json_stringn(objs[0]->log ? objs[0]->log : "",
                                                objs[0]->log && strlen(objs[0]->log) > LOG_KEEP ? LOG_KEEP
                                                                                                : strlen(objs[0]->log ? objs[0]->log : "")));
    if (objs[1]) json_object_set_new(cj, "baseline", kl_compiled_json(objs[1]));
    json_object_set_new(stages, "compile", cj);
    if (!objs[0]->ok) {
        json_object_set_new(cj, "reason", json_string(objs[0]->error ? objs[0]->error : "nvcc failed"));
        goto finish;
    }
    double t = kl_now();
    KL_TRY(ensure_runtime(gate, j->arch, err));
    t_runtime = kl_now() - t;
    KL_TRY(kl_gate_scratch(gate, &scratch, err));
    json_t *job = worker_job(j, objs[0], objs[1], false);
    kl_gate_job_sandbox(gate, job, j->task, scratch, false);
    job_text = job ? json_dumps(job, JSON_COMPACT) : NULL;
    json_decref(job);
    if (!job_text) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    double timeout = j->opt->timeout_s > 0 ? j->opt->timeout_s : gate->run_timeout_s;
    t = kl_now();
    KL_TRY(run_worker(gate, job_text, timeout, scratch, &c, err));
    double t_worker = kl_now() - t;
    KL_TRY(run_stages(j, &c, doc, err));
    json_t *run = json_object_get(doc, "run");
    if (json_is_object(run))
        json_object_set_new(run, "parent",
                            json_pack("{s:f, s:f, s:f, s:f}", "compile", t_compile,
                                      "runtime", t_runtime, "worker", t_worker, "until_worker_done",
                                      kl_now() - t_start));
    json_t *placed = gate->exec ? kl_executor_placement() : NULL; /* which GPU, where (docs/cluster.md) */
    if (placed && json_is_object(run)) json_object_set_new(run, "placement", placed);
    else json_decref(placed);
    if (j->opt->sanitize) {
        if (!stages_passed(stages)) json_object_set_new(stages, "sanitize", stage_skip("an earlier stage failed"));
        else KL_TRY(sanitize_stage(j, objs[0], stages, err));
    }
finish:
    finish_doc(j, doc, stages);
    /* a pass made on weaker evidence than the gate's standard is answered, not kept */
    const char *weak = weak_evidence(doc);
    if (weak) {
        json_object_set_new(doc, "stored", json_false());
        kl_strbuf why = KL_STRBUF_INIT;
        kl_strbuf_addf(&why, "not stored: %s", weak);
        json_object_set_new(doc, "not_stored", json_string(kl_strbuf_str(&why)));
        kl_strbuf_release(&why);
        kl_log(KL_LOG_WARN, "%s: the verdict is not stored: %s", j->cand_name, weak);
    }
    if (gate->store && !weak) {
        char *text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
        if (!text) {
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        st = kl_store_put(gate->store, "verdict", j->key, text, err);
        free(text);
        if (st != KL_OK) goto cleanup;
    }
    st = kl_verdict_from_json(doc, out, err);
    doc = NULL;
cleanup:
    kl_child_release(&c);
    kl_gate_scratch_done(scratch);
    json_decref(doc);
    json_decref(prior);
    free(job_text);
    kl_compiled_free(objs[0]);
    kl_compiled_free(objs[1]);
    return st;
}

kl_status kl_gate_judge(kl_gate *gate, const kl_task *task, const kl_gate_source *candidate,
                        const kl_gate_source *baseline, const kl_judge_options *opt, kl_verdict **out, kl_error *err)
{
    *out = NULL;
    kl_judge_options defaults = {0};
    judge_ctx j = {0};
    j.gate = gate;
    j.task = task;
    j.opt = opt ? opt : &defaults;
    kl_strbuf_init(&j.shapes, 0);
    kl_strbuf_init(&j.stages, 0);
    kl_status st = judge_inputs(&j, candidate, baseline, err);
    if (st != KL_OK) goto cleanup;

    if (gate->stand_in) { /* standin.c: figures from the text, keyed on the stand-in "device" */
        kl_snprintf(j.toolchain, sizeof j.toolchain, "%s", KL_STAND_IN_TOOLCHAIN);
        judge_key(&j);
        st = kl_stand_in_judge(gate, task, j.key, j.cand_name, j.cand_text, j.base_name, j.base_text,
                               kl_strbuf_str(&j.shapes), kl_strbuf_str(&j.stages), j.opt, out, err);
        goto cleanup;
    }
    if (gate->mode == KL_GATE_REPLAY) {
        st = replay_device(gate, err);
        if (st == KL_ERR_UNMEASURED) {
            kl_error e2;
            kl_status st2 = kl_verdict_unmeasured("", j.cand_name, NULL, NULL, err->message, out, &e2);
            if (st2 != KL_OK) st = st2, *err = e2;
            else (*out)->replayed = true;
            goto cleanup;
        }
        if (st != KL_OK) goto cleanup;
        json_t *tc = json_object_get(gate->gpu, "toolchain");
        const char *nv = json_string_value(json_object_get(tc, "nvcc"));
        const char *arch = gate->arch ? gate->arch : json_string_value(json_object_get(tc, "arch"));
        if (!nv || !arch) {
            st = kl_error_set(err, KL_ERR_INVALID, "the recorded device \"%s\" has no toolchain (nvcc, arch)",
                              gate->gpu_key);
            goto cleanup;
        }
        toolchain_text(nv, arch, j.toolchain, sizeof j.toolchain);
        judge_key(&j);
        st = from_store(&j, out, err);
        if (st == KL_OK) {
            (*out)->replayed = true;
        } else if (st == KL_ERR_NOT_FOUND) {
            char why[1024];
            kl_snprintf(why, sizeof why, "unmeasured: no recorded verdict for %s on %s with %s (key %s)", j.cand_name,
                        gate->gpu_key, j.toolchain, j.key);
            st = kl_verdict_unmeasured(j.key, j.cand_name, gate->gpu_key, j.toolchain, why, out, err);
            if (st == KL_OK) {
                (*out)->replayed = true;
                st = kl_error_set(err, KL_ERR_UNMEASURED, "%s", why);
            }
        }
        goto cleanup;
    }

    KL_TRY(live_device(gate, false, err));
    KL_TRY(kl_gate_nvcc(gate, err));
    KL_TRY(kl_gate_arch(gate, &j.arch, err));
    toolchain_text(gate->nvcc_version, j.arch, j.toolchain, sizeof j.toolchain);
    /* the device document names the toolchain that replay will key on */
    json_t *tc = json_object_get(gate->gpu, "toolchain");
    const char *rec = json_string_value(json_object_get(tc, "text"));
    if (gate->store && (!rec || strcmp(rec, j.toolchain) != 0)) {
        json_object_set_new(gate->gpu, "toolchain", json_pack("{s:s, s:s, s:s}", "nvcc", gate->nvcc_version, "arch",
                                                              j.arch, "text", j.toolchain));
        char *text = json_dumps(gate->gpu, JSON_COMPACT | JSON_SORT_KEYS);
        if (!text) {
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        st = kl_store_put(gate->store, "gpu", gate->gpu_key, text, err);
        free(text);
        if (st != KL_OK) goto cleanup;
    }
    judge_key(&j);
    if (gate->store && !j.opt->refresh) {
        st = from_store(&j, out, err);
        const char *weak = st == KL_OK ? weak_evidence(kl_verdict_document(*out)) : NULL;
        if (weak) {
            /* stored before the gate asked for today's evidence: judged again, live */
            kl_log(KL_LOG_INFO, "%s: the stored pass was made on weaker evidence (%s): judged again", j.cand_name, weak);
            kl_verdict_free(*out);
            *out = NULL;
            st = KL_ERR_NOT_FOUND;
        }
        if (st == KL_OK) {
            (*out)->cached = true;
            goto cleanup;
        }
        if (st != KL_ERR_NOT_FOUND) goto cleanup;
        kl_error_clear(err);
        st = KL_OK;
    }
    char prior_key[KL_HASH_HEX] = "";
    json_t *prior = j.opt->sanitize && !j.opt->refresh ? unsanitized_prior(&j, prior_key) : NULL;
    st = live_judge(&j, prior, prior_key, out, err);
cleanup:
    judge_release(&j);
    return st;
}

kl_status kl_gate_verdict_of_run(kl_gate *gate, const kl_task *task, const kl_gate_source *candidate,
                                 const kl_judge_options *opt, const kl_child *worker, kl_verdict **out, kl_error *err)
{
    *out = NULL;
    kl_judge_options defaults = {0};
    judge_ctx j = {0};
    j.gate = gate;
    j.task = task;
    j.opt = opt ? opt : &defaults;
    json_t *doc = NULL;
    kl_status st = judge_inputs(&j, candidate, NULL, err);
    if (st != KL_OK) goto cleanup;
    if (!gate->gpu || !gate->gpu_key || !gate->nvcc_version) {
        st = kl_error_set(err, KL_ERR_INVALID, "the gate has no device document or toolchain yet");
        goto cleanup;
    }
    KL_TRY(kl_gate_arch(gate, &j.arch, err));
    toolchain_text(gate->nvcc_version, j.arch, j.toolchain, sizeof j.toolchain);
    judge_key(&j);
    doc = new_doc(&j);
    if (!doc) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    json_t *stages = json_object_get(doc, "stages");
    json_object_set_new(stages, "compile", json_pack("{s:b, s:[]}", "ok", 1, "kernels"));
    KL_TRY(run_stages(&j, worker, doc, err));
    finish_doc(&j, doc, stages);
    st = kl_verdict_from_json(doc, out, err);
    doc = NULL;
cleanup:
    json_decref(doc);
    judge_release(&j);
    return st;
}
