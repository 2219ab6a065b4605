/* klineage gate TASK_DIR FILE.cu: one verdict (docs/cli/gate.md). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "klineage/gate.h"
#include "klineage/task.h"
#include "measure.h"

static const char *state_word(kl_stage_state s)
{
    return s == KL_STAGE_PASSED ? "ok" : s == KL_STAGE_FAILED ? "FAILED" : "skipped";
}

/* The readable verdict: a headline, one line per stage, the figures. */
static void print_verdict(const cli_measure *m, const kl_verdict *v, const char *task_name)
{
    const char *cand = v->candidate ? v->candidate : "?";
    if (v->status == KL_ERR_UNMEASURED) {
        cli_measure_printf(m, stdout, "UNMEASURED %s: %s", cand, v->reason ? v->reason : "no recorded verdict");
        return;
    }
    if (v->pass)
        cli_measure_printf(m, stdout, "PASS %s on task %s", cand, task_name);
    else
        cli_measure_printf(m, stdout, "REJECTED %s on task %s at %s: %s", cand, task_name,
                           v->failed_stage ? v->failed_stage : "?", v->reason ? v->reason : "?");
    for (unsigned i = 0; i < v->nstages; i++)
        cli_measure_printf(m, stdout, "  %-12s %-8s %s", v->stages[i].name, state_word(v->stages[i].state),
                           v->stages[i].summary);
    if (v->speedup > 0)
        cli_measure_printf(m, stdout, "  speedup      %.3gx over %s", v->speedup, v->baseline ? v->baseline : "the baseline");
    cli_measure_printf(m, stdout, "  measured on  %s with %s, %s%s", v->device ? v->device : "?",
                       v->toolchain ? v->toolchain : "?", v->date ? v->date : "?",
                       v->replayed ? " (recorded)" : v->cached ? " (from the store)" : "");
    cli_measure_printf(m, stdout, "  key          %s", v->key ? v->key : "?");
}

static int parse_seconds(const kl_cli *cli, const char *opt, const char *val, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(val, &end);
    if (errno || *end || !(d > 0) || !isfinite(d) || d > 86400)
        return cli_usage_error(cli, "%s takes a number of seconds from 0 to 86400, not '%s'", opt, val);
    *out = d;
    return KL_EXIT_OK;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --compile-only: every file through nvcc, --jobs at a time; one line per file. */
static int compile_files(const kl_cli *cli, const cli_measure *m, kl_gate *gate, const kl_task *task, unsigned n,
                         const char **files)
{
    kl_gate_source *srcs = calloc(n, sizeof *srcs);
    kl_compiled **objs = calloc(n, sizeof *objs);
    kl_error err = {0};
    int rc = KL_EXIT_FAILED;
    if (!srcs || !objs) {
        cli_measure_error(m, "out of memory");
        goto cleanup;
    }
    for (unsigned i = 0; i < n; i++) srcs[i] = (kl_gate_source){files[i], NULL};
    double t0 = now_s();
    if (kl_gate_compile_many(gate, task, n, srcs, objs, &err) != KL_OK) {
        cli_measure_error(m, "%s", err.message);
        goto cleanup;
    }
    double wall = now_s() - t0, nvcc = 0;
    rc = KL_EXIT_OK;
    for (unsigned i = 0; i < n; i++) {
        const kl_compiled *c = objs[i];
        nvcc += c->seconds;
        if (!c->ok) rc = KL_EXIT_FAILED;
        if (cli->json) { /* one line per file: {"file", "ok", "error", "kernels", …} */
            char *doc = kl_compiled_to_json(c);
            json_t *o = doc ? json_loads(doc, 0, NULL) : NULL;
            free(doc);
            if (o) json_object_set_new(o, "file", json_string(files[i]));
            char *line = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
            json_decref(o);
            if (!line) {
                rc = cli_measure_error(m, "out of memory");
                goto cleanup;
            }
            puts(line);
            free(line);
            continue;
        }
        if (!c->ok) {
            cli_measure_printf(m, stdout, "%s: FAILED: %s", files[i], c->error ? c->error : "nvcc failed");
            continue;
        }
        cli_measure_printf(m, stdout, "%s: ok, %s %s, %s", files[i], c->arch, c->cached ? "cached" : "compiled",
                           c->hash);
        for (unsigned k = 0; k < c->nkernels; k++)
            cli_measure_printf(m, stdout, "  %s: %d regs, %d B smem, %d/%d B spills, %d B stack", c->kernels[k].demangled,
                               c->kernels[k].registers, c->kernels[k].smem_static, c->kernels[k].spill_stores,
                               c->kernels[k].spill_loads, c->kernels[k].stack);
    }
    cli_note(cli, "%u file%s in %.2f s wall (%.2f s of nvcc, --jobs %d)\n", n, n == 1 ? "" : "s", wall, nvcc, cli->jobs);
cleanup:
    for (unsigned i = 0; objs && i < n; i++) kl_compiled_free(objs[i]);
    free(objs);
    free(srcs);
    return rc;
}

/* Files judged at once (--gpus, Slurm): one call per file. */
typedef struct gate_batch {
    kl_gate *gate;
    const kl_task *task;
    const char **files;
    const kl_gate_source *base;
    const kl_judge_options *jo;
    kl_verdict **vs;
    kl_status *sts;
    kl_error *errs;
} gate_batch;

static kl_status gate_one(void *arg, unsigned i, kl_error *err)
{
    gate_batch *b = arg;
    kl_gate_source cand = {b->files[i], NULL};
    return kl_gate_judge(b->gate, b->task, &cand, b->base, b->jo, &b->vs[i], err);
}

KL_CMD(gate)
{
    if (cli_wants_help(argc, argv, cli)) return KL_EXIT_OK;
    const char **pos = calloc((size_t)argc + 1, sizeof *pos);
    unsigned npos = 0;
    bool compile_only = false;
    if (!pos) return cli_error("out of memory");
    const char *baseline = NULL, *arch = NULL;
    kl_judge_options jo = {0};
    cli_measure m = CLI_MEASURE_INIT;
    for (int i = 1; i < argc;) {
        const char *a = argv[i];
        int r = cli_measure_option(cli, argc, argv, &i, &m);
        if (r < 0) {
            free(pos);
            return KL_EXIT_USAGE;
        }
        if (r > 0) continue;
        const char *val = NULL;
        const char *valued[] = {"--baseline", "--arch", "--timeout"};
        int which = -1;
        for (int k = 0; k < 3; k++) {
            size_t n = strlen(valued[k]);
            if (!strncmp(a, valued[k], n) && (a[n] == '\0' || a[n] == '=')) {
                which = k;
                if (a[n] == '=') val = a + n + 1;
                else if (i + 1 < argc) val = argv[++i];
                else {
                    free(pos);
                    return cli_usage_error(cli, "option %s needs a value", valued[k]);
                }
            }
        }
        i++;
        if (which == 0) baseline = val;
        else if (which == 1) arch = val;
        else if (which == 2) {
            if (parse_seconds(cli, "--timeout", val, &jo.timeout_s) != KL_EXIT_OK) {
                free(pos);
                return KL_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--sanitize")) jo.sanitize = true;
        else if (!strcmp(a, "--no-profile")) jo.no_profile = true;
        else if (!strcmp(a, "--refresh")) jo.refresh = true;
        else if (!strcmp(a, "--compile-only")) compile_only = true;
        else if (!strcmp(a, "--")) {
            for (; i < argc; i++) pos[npos++] = argv[i];
        } else if (a[0] == '-' && a[1]) {
            free(pos);
            return cli_usage_error(cli, "unknown option '%s'", a);
        } else pos[npos++] = a;
    }
    if (npos < 2) {
        free(pos);
        return cli_usage_error(cli, "'gate' needs a task folder and a kernel file");
    }
    if (arch && (strncmp(arch, "sm_", 3) != 0 || strlen(arch) < 5)) {
        free(pos);
        return cli_usage_error(cli, "--arch takes sm_XY (sm_90, sm_90a …), not '%s'", arch);
    }

    int rc = KL_EXIT_FAILED;
    kl_error err = {0};
    kl_task *task = NULL;
    kl_gate *gate = NULL;
    kl_verdict *v = NULL;
    unsigned nfiles = npos - 1;
    /* the arguments first: nothing is opened or created for a command line that cannot run */
    gate_batch gb = {0};
    if (kl_task_load(pos[0], &task, &err) != KL_OK) {
        rc = cli_error("%s", err.message);
        goto cleanup;
    }
    for (unsigned f = 0; f <= nfiles; f++) {
        const char *file = f < nfiles ? pos[1 + f] : baseline;
        struct stat sb;
        if (!file) continue;
        if (stat(file, &sb) != 0 || access(file, R_OK) != 0) {
            rc = cli_error("%s: cannot read: %s", file, strerror(errno));
            goto cleanup;
        }
        if (!S_ISREG(sb.st_mode)) {
            rc = cli_error("%s: not a regular file (a kernel file is CUDA source text)", file);
            goto cleanup;
        }
    }
    if (compile_only) {
        /* nvcc only: no measurement, no store; the arch is --arch, else the device's */
        kl_gate_options go = {0};
        go.arch = arch;
        go.jobs = cli->jobs;
        if (!arch && !kl_gate_gpu_available()) {
            rc = cli_error("--compile-only without a GPU needs --arch sm_XY (the architecture to compile for)");
            goto cleanup;
        }
        if (kl_gate_open(&go, &gate, &err) != KL_OK) {
            rc = cli_error("%s", err.message);
            goto cleanup;
        }
        rc = compile_files(cli, &m, gate, task, nfiles, pos + 1);
        goto cleanup;
    }
    if ((rc = cli_measure_resolve(cli)) != KL_EXIT_OK) goto cleanup;
    m.replay = cli->measure == KL_MEASURE_REPLAY;
    if ((rc = cli_measure_open(cli, &m, pos[0])) != KL_EXIT_OK) goto cleanup;
    rc = KL_EXIT_FAILED;
    kl_gate_options go = cli_measure_gate_options(cli, &m);
    go.arch = arch;
    if (kl_gate_open(&go, &gate, &err) != KL_OK) {
        cli_measure_error(&m, "%s", err.message);
        goto cleanup;
    }
    if (nfiles > 1) {
        /* compile every file first, --jobs at a time; judging then finds the objects cached */
        kl_gate_source *srcs = calloc(nfiles, sizeof *srcs);
        kl_compiled **objs = calloc(nfiles, sizeof *objs);
        kl_status cst = srcs && objs ? KL_OK : KL_ERR_NOMEM;
        for (unsigned f = 0; srcs && f < nfiles; f++) srcs[f] = (kl_gate_source){pos[1 + f], NULL};
        if (cst == KL_OK && !m.replay && !cli->stand_in) cst = kl_gate_compile_many(gate, task, nfiles, srcs, objs, &err);
        for (unsigned f = 0; objs && f < nfiles; f++) kl_compiled_free(objs[f]);
        free(srcs);
        free(objs);
        if (cst != KL_OK) {
            cli_measure_error(&m, "%s", cst == KL_ERR_NOMEM ? "out of memory" : err.message);
            goto cleanup;
        }
    }
    kl_gate_source base = {baseline, NULL};
    bool all_pass = true;
    gb = (gate_batch){gate, task, pos + 1, baseline ? &base : NULL, &jo, NULL, NULL, NULL};
    if (nfiles > 1 && kl_gate_workers(gate) > 1) { /* --gpus / Slurm: judged at once, shown in order */
        gb.vs = calloc(nfiles, sizeof *gb.vs);
        gb.sts = calloc(nfiles, sizeof *gb.sts);
        gb.errs = calloc(nfiles, sizeof *gb.errs);
        if (!gb.vs || !gb.sts || !gb.errs) {
            cli_measure_error(&m, "out of memory");
            goto cleanup;
        }
        cli_note(cli, "gating %u files on task %s, %u at a time …\n", nfiles, task->name ? task->name : pos[0],
                 kl_gate_workers(gate));
        (void)kl_gate_parallel(gate, nfiles, gate_one, &gb, gb.sts, gb.errs, NULL);
    }
    for (unsigned f = 0; f < nfiles; f++) {
        kl_gate_source cand = {pos[1 + f], NULL};
        kl_status st;
        if (gb.vs) {
            st = gb.sts[f];
            v = gb.vs[f];
            gb.vs[f] = NULL;
            err = gb.errs[f];
        } else {
            if (!m.replay) cli_note(cli, "gating %s on task %s …\n", cand.name, task->name ? task->name : pos[0]);
            st = kl_gate_judge(gate, task, &cand, baseline ? &base : NULL, &jo, &v, &err);
        }
        if (st != KL_OK && !(st == KL_ERR_UNMEASURED && v)) {
            cli_measure_error(&m, "%s", err.message);
            goto cleanup;
        }
        if (cli->json) {
            char *json = kl_verdict_json(v, !m.replay && nfiles == 1); /* replay or many: one line each */
            if (!json) {
                cli_measure_error(&m, "out of memory");
                goto cleanup;
            }
            puts(json);
            free(json);
        } else {
            print_verdict(&m, v, task->name ? task->name : pos[0]);
        }
        if (!(v->pass && v->status == KL_OK)) all_pass = false;
        kl_verdict_free(v);
        v = NULL;
    }
    if (cli_measure_finish(cli, &m) != KL_EXIT_OK) goto cleanup;
    rc = all_pass ? KL_EXIT_OK : KL_EXIT_FAILED;
cleanup:
    kl_verdict_free(v);
    for (unsigned f = 0; gb.vs && f < npos - 1; f++) kl_verdict_free(gb.vs[f]);
    free(gb.vs);
    free(gb.sts);
    free(gb.errs);
    cli_cluster_report(cli, gate);
    kl_gate_close(gate);
    cli_measure_close(&m);
    kl_task_free(task);
    free(pos);
    return rc;
}

int cli_gate_task_kernels(kl_cli *cli, const char *task_dir, const kl_task *task, json_t *results)
{
    const char *files[2] = {task->naive, task->expert};
    const char *keys[2] = {"naive", "expert"};
    cli_measure m = CLI_MEASURE_INIT;
    kl_gate *gate = NULL;
    kl_error err = {0};
    int rc = KL_EXIT_OK;
    m.replay = cli->measure == KL_MEASURE_REPLAY;
    if ((rc = cli_measure_open(cli, &m, task_dir)) != KL_EXIT_OK) goto cleanup;
    kl_gate_options go = cli_measure_gate_options(cli, &m);
    if (kl_gate_open(&go, &gate, &err) != KL_OK) {
        rc = cli_measure_error(&m, "%s", err.message);
        goto cleanup;
    }
    for (int k = 0; k < 2; k++) {
        if (!files[k]) continue;
        char *path = kl_task_path(task, files[k]);
        if (!path) {
            rc = cli_measure_error(&m, "out of memory");
            goto cleanup;
        }
        kl_gate_source src = {path, NULL};
        kl_verdict *v = NULL;
        kl_status st = kl_gate_judge(gate, task, &src, NULL, NULL, &v, &err);
        json_t *o = results ? json_pack("{s:s, s:s, s:b}", "role", keys[k], "file", path, "replayed", m.replay) : NULL;
        if (st != KL_OK && !(st == KL_ERR_UNMEASURED && v)) {
            if (o) {
                json_object_set_new(o, "result", json_string("error"));
                json_object_set_new(o, "reason", json_string(err.message));
            } else {
                cli_measure_error(&m, "%s (%s): %s", keys[k], path, err.message);
            }
            rc = KL_EXIT_FAILED;
        } else if (v->status == KL_ERR_UNMEASURED) {
            if (o) {
                json_object_set_new(o, "result", json_string("unmeasured"));
                json_object_set_new(o, "reason", json_string(v->reason ? v->reason : ""));
            } else {
                cli_measure_printf(&m, stdout, "%s %s: unmeasured (%s)", keys[k], path, v->reason ? v->reason : "");
            }
            rc = KL_EXIT_FAILED;
        } else {
            if (o) {
                json_object_set_new(o, "result", json_string(v->pass ? "pass" : "rejected"));
                if (!v->pass) {
                    json_object_set_new(o, "failed_stage", json_string(v->failed_stage ? v->failed_stage : "?"));
                    json_object_set_new(o, "reason", json_string(v->reason ? v->reason : "?"));
                }
                if (v->median_ms > 0) json_object_set_new(o, "median_ms", json_real(v->median_ms));
                if (v->speedup > 0) json_object_set_new(o, "speedup", json_real(v->speedup));
                json_object_set_new(o, "device", json_string(v->device ? v->device : ""));
                json_object_set_new(o, "date", json_string(v->date ? v->date : ""));
            } else if (v->pass) {
                if (!cli->quiet)
                    cli_measure_printf(&m, stdout, "%s %s: passes the gate%s", keys[k], path,
                                       v->median_ms > 0 ? "" : " (not profiled)");
            } else {
                cli_measure_printf(&m, stdout, "%s %s: REJECTED at %s: %s", keys[k], path,
                                   v->failed_stage ? v->failed_stage : "?", v->reason ? v->reason : "?");
            }
            if (!v->pass) rc = KL_EXIT_FAILED;
        }
        if (o && v && v->key) json_object_set_new(o, "key", json_string(v->key));
        if (o) json_array_append_new(results, o);
        kl_verdict_free(v);
        free(path);
    }
    /* record: what was measured is kept even when a kernel was rejected */
    if (cli_measure_finish(cli, &m) != KL_EXIT_OK) rc = KL_EXIT_FAILED;
cleanup:
    kl_gate_close(gate);
    cli_measure_close(&m);
    return rc;
}
