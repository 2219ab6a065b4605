/* klineage bench: the suite's naive and expert kernels against the vendor, as a table. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <signal.h>

#include <jansson.h>

#include "cli.h"
#include "klineage/bench.h"
#include "klineage/gate.h"
#include "klineage/optimize.h"
#include "klineage/rewrite.h"
#include "measure.h"

static volatile sig_atomic_t stop_requested;

static void on_sigint(int sig)
{
    (void)sig;
    stop_requested = 1;
}

typedef struct bench_ctx {
    const kl_cli *cli;
    const cli_measure *m;
} bench_ctx;

static void on_progress(void *user, const char *task, const char *text)
{
    bench_ctx *b = user;
    if (!b->cli->quiet) cli_measure_printf(b->m, stderr, "%s: %s\n", task, text);
}

/* The optimizer's evaluation: leave-one-out over a suite, or any task folders (--tasks). */
typedef struct optimize_args {
    const char *task_dirs[128];
    unsigned ntasks;
    bool tasks_given;
    kl_policy policies[KL_POLICY_COUNT];
    unsigned npolicies;
    unsigned budget, seed, ranking;
    const char *plot;
    bool no_compare, restart_older;
} optimize_args;

static int bench_optimize(kl_cli *cli, cli_measure *m, const char *suite, const char *const *only, unsigned nonly,
                          optimize_args *a, const char *out_path);

static bool parse_count(const char *s, unsigned long max, unsigned *out)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (*s == '\0' || *s == '-' || *end || v > max) return false;
    *out = (unsigned)v;
    return true;
}

KL_CMD(bench)
{
    if (cli_wants_help(argc, argv, cli)) return KL_EXIT_OK;
    const char *suite = NULL, *vendor = NULL, *out_path = NULL;
    bool expert = false, optimize = false;
    const char *only[64];
    unsigned nonly = 0;
    optimize_args oa;
    memset(&oa, 0, sizeof oa);
    oa.budget = KL_OPTIMIZE_BUDGET;
    oa.seed = 1;
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
        } else if (!strcmp(a, "--optimize")) {
            optimize = true;
        } else if (!strcmp(a, "--no-compare")) {
            oa.no_compare = true;
        } else if (!strcmp(a, "--restart-older")) {
            oa.restart_older = true;
        } else if (!strcmp(a, "--tasks")) {
            oa.tasks_given = true;
            while (i + 1 < argc && argv[i + 1][0] != '-') {
                if (oa.ntasks == 128) return cli_usage_error(cli, "at most 128 task folders");
                oa.task_dirs[oa.ntasks++] = argv[++i];
            }
            if (!oa.ntasks) return cli_usage_error(cli, "--tasks needs one or more task folders");
        } else if ((!strcmp(a, "--suite") || !strcmp(a, "--vendor") || !strcmp(a, "--task") || !strcmp(a, "-o") ||
                    !strcmp(a, "--policies") || !strcmp(a, "--budget") || !strcmp(a, "--seed") ||
                    !strcmp(a, "--plot") || !strcmp(a, "--ranking")) &&
                   i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(a, "--suite")) suite = v;
            else if (!strcmp(a, "--vendor")) vendor = v;
            else if (!strcmp(a, "-o")) out_path = v;
            else if (!strcmp(a, "--plot")) oa.plot = v;
            else if (!strcmp(a, "--budget")) {
                if (!parse_count(v, 100000, &oa.budget) || oa.budget < 2)
                    return cli_usage_error(cli, "--budget takes a count of gate calls, 2 or more, not '%s'", v);
            } else if (!strcmp(a, "--ranking")) {
                if (!parse_count(v, 5, &oa.ranking) || oa.ranking < 2)
                    return cli_usage_error(cli, "--ranking takes the skills ranking's revision, 2, 3, 4 or 5, not '%s'", v);
            } else if (!strcmp(a, "--seed")) {
                if (!parse_count(v, 0xffffffffUL, &oa.seed)) return cli_usage_error(cli, "--seed takes a number, not '%s'", v);
            } else if (!strcmp(a, "--policies")) {
                char buf[128];
                snprintf(buf, sizeof buf, "%s", v);
                oa.npolicies = 0;
                for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                    kl_error e = {0};
                    kl_policy p;
                    if (kl_policy_parse(tok, &p, &e) != KL_OK) return cli_usage_error(cli, "--policies: %s", e.message);
                    if (oa.npolicies < KL_POLICY_COUNT) oa.policies[oa.npolicies++] = p;
                }
            } else if (nonly < 63) only[nonly++] = v;
            else return cli_usage_error(cli, "at most 63 --task options");
        } else if (!strcmp(a, "--suite") || !strcmp(a, "--vendor") || !strcmp(a, "--task") || !strcmp(a, "-o") ||
                   !strcmp(a, "--policies") || !strcmp(a, "--budget") || !strcmp(a, "--seed") || !strcmp(a, "--plot") ||
                   !strcmp(a, "--ranking")) {
            return cli_usage_error(cli, "option %s needs a value", a);
        } else {
            return cli_usage_error(cli, "unknown argument '%s'", a);
        }
    }
    if (expert == optimize)
        return cli_usage_error(cli, "say what to benchmark: --expert (the suite's naive and expert kernels) or "
                                    "--optimize (the forward optimizer's policies)");
    if (expert && (oa.tasks_given || oa.plot || oa.npolicies || oa.ranking))
        return cli_usage_error(cli, "--tasks, --plot, --policies and --ranking go with --optimize");
    if (optimize) {
        only[nonly] = NULL;
        if (!suite) suite = "tasks";
        /* the arguments first: nothing is opened or created for a command line that cannot run */
        if (!oa.tasks_given) {
            char sj[4096];
            snprintf(sj, sizeof sj, "%s/suite.json", suite);
            if (access(sj, R_OK) != 0)
                return cli_error("%s: cannot read: %s (--suite names a folder holding suite.json)", sj, strerror(errno));
        }
        for (unsigned t = 0; t < oa.ntasks; t++) {
            char tj[4096];
            snprintf(tj, sizeof tj, "%s/task.json", oa.task_dirs[t]);
            if (access(tj, R_OK) != 0) return cli_error("%s: cannot read: %s (--tasks names task folders)", tj, strerror(errno));
        }
        int orc = cli_measure_resolve(cli); /* the one rule (measure.h) */
        if (orc != KL_EXIT_OK) return orc;
        return bench_optimize(cli, &m, suite, only, nonly, &oa, out_path);
    }
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
    go.interrupt = &stop_requested; /* waiting judgements stop; Slurm jobs are cancelled */
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
    cli_cluster_report(cli, gate);
    kl_gate_close(gate);
    cli_measure_close(&m);
    return rc;
}

typedef struct bench_opt_ctx {
    const kl_cli *cli;
    const cli_measure *m;
} bench_opt_ctx;

/* The suite's task folders (suite.json's order), or the --task subset of them. */
static int suite_dirs(const kl_cli *cli, const cli_measure *m, const char *suite, const char *const *only,
                      unsigned nonly, optimize_args *a, char **owned)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/suite.json", suite);
    FILE *f = fopen(path, "r");
    if (!f) return cli_measure_error(m, "%s: cannot read the suite (%s)", path, strerror(errno));
    json_error_t je;
    json_t *s = json_loadf(f, 0, &je);
    fclose(f);
    if (!json_is_array(json_object_get(s, "tasks"))) {
        json_decref(s);
        return cli_measure_error(m, "%s:%d: expected {\"tasks\": [...]} (%s)", path, je.line, s ? "no tasks array" : je.text);
    }
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(s, "tasks"), i, e) {
        const char *name = json_string_value(json_object_get(e, "task"));
        if (!name) continue;
        bool want = nonly == 0;
        for (unsigned k = 0; k < nonly; k++) want |= !strcmp(only[k], name);
        if (!want || a->ntasks == 128) continue;
        char *dir = NULL;
        if (asprintf(&dir, "%s/%s", suite, name) < 0) break;
        owned[a->ntasks] = dir;
        a->task_dirs[a->ntasks++] = dir;
    }
    json_decref(s);
    (void)cli;
    if (!a->ntasks) return cli_measure_error(m, "%s: no task of the suite matched", path);
    return KL_EXIT_OK;
}

static void on_opt_progress(void *user, const char *task, const char *text)
{
    bench_opt_ctx *b = user;
    if (!b->cli->quiet) cli_measure_printf(b->m, stderr, "%s: %s\n", task, text);
}

static int bench_optimize(kl_cli *cli, cli_measure *m, const char *suite, const char *const *only, unsigned nonly,
                          optimize_args *a, const char *out_path)
{
    char *owned[128] = {0};
    int rc = cli_measure_open(cli, m, a->tasks_given ? a->task_dirs[0] : suite);
    if (rc != KL_EXIT_OK) return rc;
    rc = KL_EXIT_FAILED;
    kl_error err = {0};
    kl_gate *gate = NULL;
    kl_rewriter *rw = NULL;
    char *json = NULL, *md = NULL;
    if (!a->tasks_given && suite_dirs(cli, m, suite, only, nonly, a, owned) != KL_EXIT_OK) goto cleanup;
    kl_gate_options go = cli_measure_gate_options(cli, m);
    go.interrupt = &stop_requested; /* waiting judgements stop; Slurm jobs are cancelled */
    if (kl_gate_open(&go, &gate, &err) != KL_OK || kl_rewriter_open("rules", NULL, &rw, &err) != KL_OK) {
        cli_measure_error(m, "%s", err.message);
        goto cleanup;
    }
    bench_opt_ctx bc = {cli, m};
    kl_bench_optimize_options bo = {0};
    bo.task_dirs = a->task_dirs;
    bo.ntask_dirs = a->ntasks;
    bo.leave_one_out = !a->tasks_given;
    bo.policies = a->policies;
    bo.npolicies = a->npolicies;
    bo.budget = a->budget;
    bo.seed = a->seed;
    bo.no_compare = a->no_compare;
    bo.restart_older = a->restart_older;
    bo.ranking = a->ranking;
    bo.replay = m->replay;
    bo.gate = gate;
    bo.store = m->store;
    bo.rewriter = rw;
    bo.interrupt = &stop_requested;
    bo.progress = on_opt_progress;
    bo.progress_user = &bc;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, &old);
    kl_status st = kl_bench_optimize(&bo, &json, &err);
    sigaction(SIGINT, &old, NULL);
    if (st != KL_OK) {
        cli_measure_error(m, "%s%s", err.message,
                          st == KL_ERR_INTERRUPTED ? "; every run so far is stored: run the same command to go on" : "");
        if (st == KL_ERR_INTERRUPTED) {
            cli_measure_finish(cli, m);
            rc = KL_EXIT_INTERRUPTED;
        }
        goto cleanup;
    }
    md = kl_bench_optimize_markdown(json);
    if (cli->json)
        printf("%s\n", json);
    else
        cli_measure_printf(m, stdout, "%s", md ? md : "");
    if (out_path) {
        const char *body = cli->json ? json : md;
        FILE *f = fopen(out_path, "w");
        if (!f || fputs(body ? body : "", f) < 0 || fclose(f) != 0) {
            if (f) fclose(f);
            cli_measure_error(m, "%s: cannot write", out_path);
            goto cleanup;
        }
    }
    if (a->plot) {
        char svg[4096], png[4096];
        snprintf(svg, sizeof svg, "%s.svg", a->plot);
        snprintf(png, sizeof png, "%s.png", a->plot);
        if (kl_bench_optimize_plot(json, svg, png, &err) != KL_OK) {
            cli_measure_error(m, "%s", err.message);
            goto cleanup;
        }
        cli_note(cli, "%sdrew %s and %s\n", m->replay ? "[replay] " : "", svg, png);
    }
    rc = cli_measure_finish(cli, m);
cleanup:
    for (unsigned i = 0; i < 128; i++) free(owned[i]);
    free(json);
    free(md);
    kl_rewriter_free(rw);
    cli_cluster_report(cli, gate);
    kl_gate_close(gate);
    cli_measure_close(m);
    return rc;
}
