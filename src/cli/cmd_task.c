/* klineage task check TASK_DIR: validate a task, probe its reference (docs/cli/task.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "klineage/gate.h"
#include "klineage/task.h"

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
    /* The kernels are compiled and gated after this report (cli_gate_task_kernels, below) when
     * a GPU or replay is there; the JSON report is one document, so --json leaves them out. */
    const char *kernels = cli->json ? "not gated (without --json, task check gates them)"
                          : cli->measure != KL_MEASURE_REPLAY && !cli->stand_in && !kl_gate_gpu_available()
                              ? "not gated (no GPU on this machine; --measure replay checks recorded verdicts)"
                              : "see below";

    if (cli->json) {
        json_t *o = json_pack("{s:s, s:b, s:o, s:s, s:s}", "task", dir, "valid", valid, "faults", faults_json(&faults),
                              "reference", ref_state, "kernels", kernels);
        if (o && ref_error) json_object_set_new(o, "reference_error", json_string(ref_error));
        char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        if (text) printf("%s\n", text);
        free(text);
        json_decref(o);
    }
    print_faults(&faults, 0);
    if (ref_error) cli_error("%s", ref_error);
    if (!cli->json && !cli->quiet) {
        if (valid) {
            printf("%s: valid\n", dir);
            printf("reference: %s (outputs change with the inputs and are not constant)\n", ref_state);
            printf("kernels: %s\n", kernels);
        } else {
            if (ref_error) fprintf(stderr, "%s: invalid: the reference %s\n", dir, ref_state);
            else fprintf(stderr, "%s: invalid (%u fault%s)\n", dir, faults.count, faults.count == 1 ? "" : "s");
        }
    }
    rc = valid ? KL_EXIT_OK : KL_EXIT_FAILED;

    /* ---- the gate (cmd_gate.c): compile and gate the naive and expert kernels when a GPU,
     * or replay, is available; says so and leaves rc alone when neither is. Not with --json,
     * whose output is the one document above. */
    if (valid && !cli->json) {
        int gate_rc = cli_gate_task_kernels(cli, dir, task);
        if (gate_rc != KL_EXIT_OK) rc = gate_rc;
    }
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
