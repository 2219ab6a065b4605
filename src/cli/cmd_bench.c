/* klineage bench: the suite's naive and expert kernels against the vendor, as a table. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "klineage/bench.h"
#include "klineage/gate.h"
#include "measure.h"

typedef struct bench_ctx {
    const kl_cli *cli;
    const cli_measure *m;
} bench_ctx;

static void on_progress(void *user, const char *task, const char *text)
{
    bench_ctx *b = user;
    if (!b->cli->quiet) cli_measure_printf(b->m, stderr, "%s: %s\n", task, text);
}

KL_CMD(bench)
{
    if (cli_wants_help(argc, argv, cli)) return KL_EXIT_OK;
    const char *suite = NULL, *vendor = NULL, *out_path = NULL;
    bool expert = false;
    const char *only[64];
    unsigned nonly = 0;
    cli_measure m = CLI_MEASURE_INIT;
    for (int i = 1; i < argc; i++) {
        int r = cli_measure_option(cli, argc, argv, &i, &m);
        if (r < 0) return KL_EXIT_USAGE;
        if (r > 0) { /* it moved i past its option; the loop's i++ must not skip one more */
            i--;
            continue;
        }
        const char *a = argv[i];
        if (!strcmp(a, "--expert")) {
            expert = true;
        } else if ((!strcmp(a, "--suite") || !strcmp(a, "--vendor") || !strcmp(a, "--task") || !strcmp(a, "-o")) &&
                   i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(a, "--suite")) suite = v;
            else if (!strcmp(a, "--vendor")) vendor = v;
            else if (!strcmp(a, "-o")) out_path = v;
            else if (nonly < 63) only[nonly++] = v;
            else return cli_usage_error(cli, "at most 63 --task options");
        } else if (!strcmp(a, "--suite") || !strcmp(a, "--vendor") || !strcmp(a, "--task") || !strcmp(a, "-o")) {
            return cli_usage_error(cli, "option %s needs a value", a);
        } else {
            return cli_usage_error(cli, "unknown argument '%s'", a);
        }
    }
    if (!expert)
        return cli_usage_error(cli, "say what to benchmark: --expert (the suite's naive and expert kernels)");
    only[nonly] = NULL;
    if (!suite) suite = "tasks";
    /* the arguments first: nothing is opened or created for a command line that cannot run */
    char suite_json[4096];
    snprintf(suite_json, sizeof suite_json, "%s/suite.json", suite);
    if (access(suite_json, R_OK) != 0) return cli_error("%s: cannot read: %s (--suite names a folder holding suite.json)",
                                                        suite_json, strerror(errno));
    if (vendor && access(vendor, R_OK) != 0) return cli_error("--vendor %s: cannot read: %s", vendor, strerror(errno));
    /* the one rule (measure.h): live measures now or fails; no --measure replays without a GPU */
    int rc = cli_measure_resolve(cli);
    if (rc != KL_EXIT_OK) return rc;
    rc = cli_measure_open(cli, &m, suite);
    if (rc != KL_EXIT_OK) return rc;
    rc = KL_EXIT_FAILED;
    kl_error err = {0};
    kl_gate *gate = NULL;
    char *rows = NULL, *md = NULL;
    kl_gate_options go = cli_measure_gate_options(cli, &m);
    if (kl_gate_open(&go, &gate, &err) != KL_OK) {
        cli_measure_error(&m, "%s", err.message);
        goto cleanup;
    }
    bench_ctx bc = {cli, &m};
    kl_bench_options bo = {0};
    bo.suite_dir = suite;
    bo.only = nonly ? only : NULL;
    bo.gate = gate;
    bo.store = m.store;
    bo.vendor_json = vendor;
    bo.progress = on_progress;
    bo.progress_user = &bc;
    kl_status st = kl_bench_experts(&bo, &rows, &err);
    if (st != KL_OK && !rows) {
        cli_measure_error(&m, "%s", err.message);
        goto cleanup;
    }
    if (cli->json) {
        cli_measure_printf(&m, stdout, "%s\n", rows);
    } else {
        md = kl_bench_markdown(rows);
        cli_measure_printf(&m, stdout, "%s", md ? md : "");
    }
    if (out_path) {
        const char *body = cli->json ? rows : md;
        FILE *f = fopen(out_path, "w");
        if (!f || fputs(body ? body : "", f) < 0 || fclose(f) != 0) {
            if (f) fclose(f);
            cli_measure_error(&m, "%s: cannot write", out_path);
            goto cleanup;
        }
    }
    if (st != KL_OK) {
        cli_measure_error(&m, "%s", err.message);
        goto cleanup;
    }
    rc = cli_measure_finish(cli, &m);
cleanup:
    free(rows);
    free(md);
    kl_gate_close(gate);
    cli_measure_close(&m);
    return rc;
}
