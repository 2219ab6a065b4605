/* klineage task check TASK_DIR: validate a task, probe its reference (docs/cli/task.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "cli.h"
#include "klineage/gate.h"
#include "klineage/task.h"
#include "measure.h"

/* Seeds of the weak-reference probe: any two distinct values do; fixed so runs repeat. */
#define PROBE_SEED_A 1
#define PROBE_SEED_B 2

static void print_faults(const kl_task_faults *faults, unsigned from)
{
    for (unsigned i = from; i < faults->count; i++) {
        char *text = kl_task_fault_text(&faults->items[i]);
        cli_error("%s", text ? text : faults->items[i].reason);
        free(text);
    }
}

static json_t *faults_json(const kl_task_faults *faults)
{
    json_t *arr = json_array();
    for (unsigned i = 0; arr && i < faults->count; i++) {
        const kl_task_fault *f = &faults->items[i];
        json_t *o = json_pack("{s:s, s:i, s:i, s:s, s:s}", "file", f->file, "line", (int)f->line, "column",
                              (int)f->column, "key", f->key, "reason", f->reason);
        if (o) json_array_append_new(arr, o);
    }
    return arr;
}

/* A check shape is timed for the reference's speed when its cost.flops is at most this. */
#define SPEED_PROBE_FLOPS 5e7
/* … and at least this: a smaller run times the call, not the reference. */
#define SPEED_PROBE_MIN_FLOPS 1e5

/* The reference's speed on this host (cost.flops per second), from one run at the largest check
 * shape of at most SPEED_PROBE_FLOPS; then every shape whose reference would take longer than
 * the gate's budget is warned about (stderr, and in *doc when not NULL). */
static void reference_time(kl_reference *ref, const kl_task *task, json_t *doc)
{
    const kl_shape *probe = NULL;
    int64_t probe_flops = -1, f;
    kl_error err = {0};
    if (!task->cost_flops) return;
    for (unsigned c = 0; c < task->nchecks; c++)
        if (kl_task_eval(task, &task->checks[c], task->cost_flops, &f, &err) == KL_OK && f <= SPEED_PROBE_FLOPS &&
            f > probe_flops)
            probe = &task->checks[c], probe_flops = f;
    if (!probe || probe_flops < SPEED_PROBE_MIN_FLOPS) return; /* too small to time */
    void **args = calloc(task->nargs, sizeof *args);
    double **outs = calloc(task->nargs, sizeof *outs);
    bool ok = args && outs;
    for (unsigned a = 0; ok && a < task->nargs; a++) {
        int64_t n = 0;
        if (task->args[a].dtype == KL_DTYPE_NONE) continue;
        if (kl_task_arg_count(task, probe, a, &n, &err) != KL_OK || n < 0) ok = false;
        else if (!(args[a] = malloc(n ? (size_t)n * kl_dtype_size(task->args[a].dtype) : 1))) ok = false;
        else if (task->args[a].role != KL_ROLE_OUT && kl_task_fill(task, probe, a, PROBE_SEED_A, args[a], n, &err) != KL_OK)
            ok = false;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (ok && kl_reference_run(ref, task, probe, args, outs, &err) != KL_OK) ok = false;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (unsigned a = 0; args && outs && a < task->nargs; a++) free(args[a]), free(outs[a]);
    free(args);
    free(outs);
    if (!ok) return;
    double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (dt < 1e-4) dt = 1e-4;
    double speed = (double)probe_flops / dt;
    json_t *warn = json_array();
    const kl_shape *all[65];
    unsigned n = 0;
    for (unsigned c = 0; c < task->nchecks && n < 64; c++) all[n++] = &task->checks[c];
    all[n++] = &task->bench;
    for (unsigned i = 0; i < n; i++) {
        if (kl_task_eval(task, all[i], task->cost_flops, &f, &err) != KL_OK) continue;
        double predicted = (double)f / speed;
        if (predicted <= KL_REFERENCE_BUDGET_S) continue;
        if (task->reference_max_flops > 0 && (double)f > task->reference_max_flops) continue; /* already chosen */
        char *text = NULL;
        if (asprintf(&text,
                     "shapes.%s: the float64 reference would take about %.0f s there (%.3g flops at %.3g flop/s measured "
                     "here at %s), past the gate's %.0f s: the gate checks this shape against %s instead%s",
                     all[i]->label, predicted, (double)f, speed, probe->label, KL_REFERENCE_BUDGET_S,
                     task->naive ? "the naive kernel's outputs (twice the tolerance)" : "a baseline, and the task has none",
                     task->naive ? "; set reference_max_flops in task.json to choose the limit yourself"
                                 : ": a judgement fails with an error; add a naive kernel or set reference_max_flops") < 0)
            continue;
        fprintf(stderr, "warning: %s/task.json: %s\n", task->dir ? task->dir : ".", text);
        json_array_append_new(warn, json_string(text));
        free(text);
    }
    if (doc)
        json_object_set_new(doc, "reference_time",
                            json_pack("{s:s, s:f, s:f, s:f, s:o}", "shape", probe->label, "seconds", dt, "flops_per_s",
                                      speed, "budget_s", KL_REFERENCE_BUDGET_S, "warnings", warn));
    else
        json_decref(warn);
}

static int task_check(const char *dir, kl_cli *cli)
{
    kl_task_faults faults = KL_TASK_FAULTS_INIT;
    kl_task *task = NULL;
    kl_reference *ref = NULL;
    kl_error err = {0};
    int rc = KL_EXIT_FAILED;
    const char *ref_state = "not run";
    char *ref_error = NULL;

    kl_status st = kl_task_validate(dir, &task, &faults, &err);
    if (st != KL_OK && st != KL_ERR_INVALID) {
        cli_error("%s", err.message);
        goto cleanup;
    }
    unsigned nspec = faults.count;
    if (st == KL_OK) {
        cli_note(cli, "%s: task.json is valid (%u args, %u check shapes); building the reference\n", dir, task->nargs,
                 task->nchecks);
        st = kl_reference_load(task, NULL, &ref, &err);
        if (st != KL_OK) {
            ref_state = "does not build";
            ref_error = strdup(err.message);
        } else {
            st = kl_reference_probe(ref, task, PROBE_SEED_A, PROBE_SEED_B, &faults, &err);
            if (st != KL_OK) {
                ref_state = "failed to run";
                ref_error = strdup(err.message);
            } else {
                ref_state = faults.count > nspec ? "weak" : "ok";
            }
        }
    }
    bool valid = faults.count == 0 && ref_error == NULL && task != NULL;
    json_t *doc = cli->json ? json_object() : NULL;
    /* how long the float64 reference would take at each shape, here: warnings for shapes past
     * the gate's budget (the gate checks those against the baseline) */
    if (valid) reference_time(ref, task, doc);

    print_faults(&faults, 0);
    if (ref_error) cli_error("%s", ref_error);
    if (!cli->json && !cli->quiet) {
        if (valid) {
            printf("%s: valid\n", dir);
            printf("reference: %s (outputs change with the inputs and are not constant)\n", ref_state);
        } else {
            if (ref_error) fprintf(stderr, "%s: invalid: the reference %s\n", dir, ref_state);
            else fprintf(stderr, "%s: invalid (%u fault%s)\n", dir, faults.count, faults.count == 1 ? "" : "s");
        }
    }
    rc = valid ? KL_EXIT_OK : KL_EXIT_FAILED;

    /* ---- the gate (cmd_gate.c): the naive and expert kernels, by the one rule of measure.h —
     * live on this GPU, replayed where there is none (said so), an error for --measure live or
     * record without one. With --json their verdicts are the document's "kernels". */
    json_t *kernels = NULL;
    const char *kernels_note = "not gated: the task is invalid";
    if (valid) {
        int mrc = cli_measure_resolve(cli);
        if (mrc != KL_EXIT_OK) {
            rc = mrc;
            kernels_note = "not gated: --measure live or record without a GPU (see the error)";
        } else {
            if (!cli->json && !cli->quiet)
                printf("kernels: %s\n", cli->stand_in ? "judged by the stand-in judge (nothing below is a measurement)"
                                         : cli->measure == KL_MEASURE_REPLAY
                                             ? "replayed from the archive (no figure below was measured now)"
                                             : "gated on this machine's GPU");
            kernels = cli->json ? json_array() : NULL;
            int gate_rc = cli_gate_task_kernels(cli, dir, task, kernels);
            if (gate_rc != KL_EXIT_OK) rc = gate_rc;
        }
    }
    if (cli->json) {
        json_object_set_new(doc, "task", json_string(dir));
        json_object_set_new(doc, "valid", json_boolean(valid));
        json_object_set_new(doc, "faults", faults_json(&faults));
        json_object_set_new(doc, "reference", json_string(ref_state));
        if (ref_error) json_object_set_new(doc, "reference_error", json_string(ref_error));
        json_object_set_new(doc, "measure", json_string(cli->measure == KL_MEASURE_REPLAY ? "replay"
                                                       : cli->measure == KL_MEASURE_RECORD ? "record"
                                                                                          : "live"));
        json_object_set_new(doc, "kernels", kernels ? kernels : json_string(kernels_note));
        kernels = NULL;
        char *text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (text) printf("%s\n", text);
        free(text);
    }
    json_decref(kernels);
    json_decref(doc);
cleanup:
    free(ref_error);
    kl_reference_free(ref);
    kl_task_free(task);
    kl_task_faults_release(&faults);
    return rc;
}

KL_CMD(task)
{
    if (cli_wants_help(argc, argv, cli)) return KL_EXIT_OK;
    if (argc < 2) return cli_usage_error(cli, "'task' needs an action: task check TASK_DIR");
    const char *action = argv[1];
    if (strcmp(action, "check") != 0) return cli_usage_error(cli, "unknown action 'task %s' (expected: check)", action);
    const char *dir = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            if (i + 1 < argc && !dir) dir = argv[i + 1];
            if (i + 2 < argc) return cli_usage_error(cli, "'task check' takes one TASK_DIR");
            break;
        }
        if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error(cli, "unknown option '%s'", argv[i]);
        if (dir) return cli_usage_error(cli, "'task check' takes one TASK_DIR, not also '%s'", argv[i]);
        dir = argv[i];
    }
    if (!dir) return cli_usage_error(cli, "'task check' needs a TASK_DIR");
    return task_check(dir, cli);
}
