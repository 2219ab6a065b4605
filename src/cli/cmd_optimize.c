/* klineage optimize TASK_DIR: make a kernel faster with the skill cards, under the gate. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "klineage/bench.h"
#include "klineage/gate.h"
#include "klineage/optimize.h"
#include "klineage/rewrite.h"
#include "klineage/task.h"
#include "measure.h"

static volatile sig_atomic_t stop_requested;

static void on_sigint(int sig)
{
    (void)sig;
    stop_requested = 1;
}

typedef struct progress_ctx {
    const kl_cli *cli;
    const cli_measure *m;
    bool tty;
    bool line_open;
} progress_ctx;

static void on_progress(void *user, kl_optimize_event ev, const kl_optimize_progress *p)
{
    progress_ctx *pc = user;
    if (pc->cli->quiet || !pc->tty) return; /* piped: nothing but the result */
    if (ev == KL_OPT_ROUND) {
        fprintf(stderr, "\r\033[K%sround %u · %u/%u gate calls · best %.2fx", pc->m->replay ? "[replay] " : "",
                p->round, p->used, p->budget, p->best);
        pc->line_open = true;
        return;
    }
    if (pc->line_open) fputc('\n', stderr);
    pc->line_open = false;
    cli_measure_printf(pc->m, stderr, "%s\n", p->text);
}

static const char *value_of(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (!strncmp(argv[*i], name, n) && argv[*i][n] == '=') return argv[*i] + n + 1;
    if (!strcmp(argv[*i], name) && *i + 1 < argc) return argv[++*i];
    return NULL;
}

static bool parse_uint(const char *s, unsigned long max, unsigned *out)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (*s == '\0' || *s == '-' || *end || v > max) return false;
    *out = (unsigned)v;
    return true;
}

static bool parse_real(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (*s == '\0' || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

/* Where the returned kernel goes when -o is not given: a folder klineage-runs beside the
 * store, the file named after the task and the run. New string. */
static char *default_output(const kl_cli *cli, const char *task, const char *key)
{
    const char *db = cli->db_path ? cli->db_path : "klineage.db";
    const char *slash = strrchr(db, '/');
    int dlen = slash ? (int)(slash - db) : 1;
    const char *dir = slash ? db : ".";
    if (slash == db) dlen = 1; /* "/x.db" */
    char *path = NULL;
    if (asprintf(&path, "%.*s/klineage-runs/%s-%.12s.cu", dlen, dir, task, key) < 0) return NULL;
    return path;
}

/* Write text to path, creating its folder; a temporary file renamed over it, so a reader
 * never sees half a kernel. Returns 0, or -1 with errno's message in why. */
static int write_file(const char *path, const char *text, char *why, size_t why_size)
{
    char *dir = strdup(path), *tmp = NULL;
    int rc = -1;
    if (!dir) goto done;
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        for (char *p = dir + 1; *p; p++)
            if (*p == '/') {
                *p = '\0';
                mkdir(dir, 0755);
                *p = '/';
            }
        mkdir(dir, 0755);
    }
    if (asprintf(&tmp, "%s.tmp%ld", path, (long)getpid()) < 0) {
        tmp = NULL;
        goto done;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) goto done;
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0) rc = 0;
    else unlink(tmp);
done:
    if (rc) snprintf(why, why_size, "cannot write it: %s", strerror(errno));
    free(dir);
    free(tmp);
    return rc;
}

static void print_figures(const cli_measure *m, const json_t *fig)
{
    const json_t *e = json_object_get(fig, "expert"), *v = json_object_get(fig, "vendor");
    if (json_is_number(json_object_get(e, "fraction")))
        cli_measure_printf(m, stdout, "Over the task's expert: %.2f of its speed (same run; not counted in the budget).\n",
                           json_number_value(json_object_get(e, "fraction")));
    else if (e)
        cli_measure_printf(m, stdout, "Over the task's expert: not measured (%s).\n",
                           json_string_value(json_object_get(e, "error")) ?: "?");
    if (json_is_number(json_object_get(v, "fraction")))
        cli_measure_printf(m, stdout, "Over the vendor (%s): %.2f of its speed (%s).\n",
                           json_string_value(json_object_get(v, "name")) ?: "?",
                           json_number_value(json_object_get(v, "fraction")),
                           json_is_true(json_object_get(v, "same_process")) ? "same process"
                                                                            : "its timing from a separate process");
    else if (v)
        cli_measure_printf(m, stdout, "Over the vendor (%s): not measured (%s).\n",
                           json_string_value(json_object_get(v, "name")) ?: "?",
                           json_string_value(json_object_get(v, "error")) ?: "?");
    /* one line: the measure's prefix goes before each printed piece */
    char dev[320] = "";
    int n = 0;
    if (json_is_number(json_object_get(fig, "copy_fraction")))
        n = snprintf(dev, sizeof dev, "Device: %.0f GB/s, %.2f of the copy ceiling", json_number_value(json_object_get(fig, "gbps")),
                     json_number_value(json_object_get(fig, "copy_fraction")));
    if (json_is_number(json_object_get(fig, "compute_fraction")) && n >= 0 && (size_t)n < sizeof dev)
        snprintf(dev + n, sizeof dev - (size_t)n, "%s%.1f TFLOP/s, %.2f of the %s ceiling", n ? "; " : "Device: ",
                 json_number_value(json_object_get(fig, "tflops")), json_number_value(json_object_get(fig, "compute_fraction")),
                 !strcmp(json_string_value(json_object_get(fig, "compute_ceiling")) ?: "", "tensor_tflops") ? "tensor (mma.sync)"
                                                                                                          : "f32 FMA");
    if (dev[0]) cli_measure_printf(m, stdout, "%s (the task's cost at the bench shape over the final check's median).\n", dev);
}

KL_CMD(optimize)
{
    if (cli_wants_help(argc, argv, cli)) return KL_EXIT_OK;
    const char *task_dir = NULL, *from = NULL, *backend = "rules", *rw_config = NULL, *out_path = NULL;
    const char *policy_name = "skills", *leave_out = NULL;
    unsigned budget = KL_OPTIMIZE_BUDGET, beam = KL_OPTIMIZE_BEAM, patience = 0, seed = 1, ranking = 0;
    double time_s = 0, min_gain = KL_OPTIMIZE_MIN_GAIN;
    bool restart = false, restart_older = false, admitted_only = false, no_sanitize = false, no_compare = false;
    cli_measure m = CLI_MEASURE_INIT;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r = cli_measure_option(cli, argc, argv, &i, &m);
        if (r < 0) return KL_EXIT_USAGE;
        if (r > 0) {
            i--;
            continue;
        }
        if ((v = value_of(argc, argv, &i, "--from"))) {
            from = v;
        } else if ((v = value_of(argc, argv, &i, "--budget"))) {
            if (!parse_uint(v, 100000, &budget) || budget < 2)
                return cli_usage_error(cli, "--budget takes a count of gate calls, 2 or more (one is kept for the "
                                            "final check), not '%s'",
                                       v);
        } else if ((v = value_of(argc, argv, &i, "--time"))) {
            if (!parse_real(v, 1, 1e7, &time_s)) return cli_usage_error(cli, "--time takes seconds, not '%s'", v);
        } else if ((v = value_of(argc, argv, &i, "--policy"))) {
            policy_name = v;
        } else if ((v = value_of(argc, argv, &i, "--rewriter"))) {
            backend = v;
        } else if ((v = value_of(argc, argv, &i, "--rewriter-config"))) {
            rw_config = v;
        } else if ((v = value_of(argc, argv, &i, "--leave-out"))) {
            leave_out = v;
        } else if ((v = value_of(argc, argv, &i, "--beam"))) {
            if (!parse_uint(v, 1000, &beam) || beam < 1) return cli_usage_error(cli, "--beam takes a count ≥ 1, not '%s'", v);
        } else if ((v = value_of(argc, argv, &i, "--patience"))) {
            if (!parse_uint(v, 100000, &patience)) return cli_usage_error(cli, "--patience takes a count, not '%s'", v);
        } else if ((v = value_of(argc, argv, &i, "--min-gain"))) {
            if (!parse_real(v, 1.0, 10.0, &min_gain))
                return cli_usage_error(cli, "--min-gain takes a ratio from 1 to 10 such as 1.02, not '%s'", v);
        } else if ((v = value_of(argc, argv, &i, "--ranking"))) {
            if (!parse_uint(v, 5, &ranking) || ranking < 2)
                return cli_usage_error(cli, "--ranking takes the skills ranking's revision, 2, 3, 4 or 5, not '%s'", v);
        } else if ((v = value_of(argc, argv, &i, "--seed"))) {
            if (!parse_uint(v, 0xffffffffUL, &seed)) return cli_usage_error(cli, "--seed takes a number, not '%s'", v);
        } else if ((v = value_of(argc, argv, &i, "-o")) || (v = value_of(argc, argv, &i, "--output"))) {
            out_path = v;
        } else if (!strcmp(argv[i], "--restart")) {
            restart = true;
        } else if (!strcmp(argv[i], "--restart-older")) {
            restart_older = true;
        } else if (!strcmp(argv[i], "--admitted-only")) {
            admitted_only = true;
        } else if (!strcmp(argv[i], "--no-sanitize")) {
            no_sanitize = true;
        } else if (!strcmp(argv[i], "--no-compare")) {
            no_compare = true;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage_error(cli, "unknown option '%s'", argv[i]);
        } else if (!task_dir) {
            task_dir = argv[i];
        } else {
            return cli_usage_error(cli, "one task folder, not '%s' too", argv[i]);
        }
    }
    if (!task_dir) return cli_usage_error(cli, "which task? give its folder");
    kl_policy policy;
    kl_error err = {0};
    if (kl_policy_parse(policy_name, &policy, &err) != KL_OK) return cli_usage_error(cli, "--policy: %s", err.message);
    if (strcmp(backend, "rules") && strcmp(backend, "llm") && strcmp(backend, "command"))
        return cli_usage_error(cli, "--rewriter is rules, llm or command, not '%s'", backend);
    {
        int mrc = cli_measure_resolve(cli); /* the one rule (measure.h): live needs a GPU */
        if (mrc != KL_EXIT_OK) return mrc;
    }

    int rc = KL_EXIT_FAILED;
    kl_task *task = NULL;
    kl_gate *gate = NULL;
    kl_rewriter *rw = NULL;
    char *doc = NULL, *best = NULL, *out_default = NULL, *fig_text = NULL;
    json_t *d = NULL, *fig = NULL;
    if (kl_task_load(task_dir, &task, &err) != KL_OK) {
        fprintf(stderr, "error: %s\n", err.message);
        return KL_EXIT_FAILED;
    }
    rc = cli_measure_open(cli, &m, task_dir);
    if (rc == KL_EXIT_OK && policy == KL_POLICY_SKILLS) rc = cli_measure_library(cli, &m, task_dir);
    if (rc != KL_EXIT_OK) goto cleanup;
    rc = KL_EXIT_FAILED;
    kl_gate_options go = cli_measure_gate_options(cli, &m);
    go.interrupt = &stop_requested; /* waiting judgements stop; Slurm jobs are cancelled */
    if (kl_gate_open(&go, &gate, &err) != KL_OK) {
        cli_measure_error(&m, "%s", err.message);
        goto cleanup;
    }
    char *cfg = NULL;
    if (m.replay && !strcmp(backend, "llm")) {
        json_t *c = rw_config ? json_loads(rw_config, 0, NULL) : json_object();
        if (!json_is_object(c)) {
            json_decref(c);
            cli_measure_error(&m, "--rewriter-config: not a JSON object");
            goto cleanup;
        }
        json_object_set_new(c, "replay", json_true());
        cfg = json_dumps(c, JSON_COMPACT);
        json_decref(c);
    }
    kl_status ost = kl_rewriter_open_ex(backend, cfg ? cfg : rw_config, m.store, &rw, &err);
    free(cfg);
    if (ost != KL_OK) {
        cli_measure_error(&m, "rewriter %s: %s", backend, err.message);
        goto cleanup;
    }

    progress_ctx pc = {cli, &m, isatty(STDERR_FILENO) != 0, false};
    kl_optimize_options o = {0};
    o.from_path = from;
    o.policy = policy;
    o.budget = budget;
    o.time_s = time_s;
    o.beam = beam;
    o.patience = patience;
    o.min_gain = min_gain;
    o.seed = seed;
    o.leave_out = leave_out;
    o.admitted_only = admitted_only;
    o.ranking = ranking;
    o.sanitize_final = !no_sanitize;
    o.rewriter = rw;
    o.store = m.store;
    o.judge = kl_gate_search_judge;
    o.judge_user = gate;
    if (!m.replay) o.prepare = kl_gate_search_prepare;
    if (kl_gate_workers(gate) > 1) { /* several GPUs: the next candidates judged at once */
        o.judge_many = kl_gate_search_judge_many;
        o.ahead = kl_gate_workers(gate);
    }
    o.restart = restart;
    o.restart_older = restart_older;
    o.interrupt = &stop_requested;
    o.progress = on_progress;
    o.progress_user = &pc;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, &old);
    kl_status st = kl_optimize_run(task, &o, &doc, &err);
    sigaction(SIGINT, &old, NULL);
    if (pc.line_open) fputc('\n', stderr);
    if (st == KL_ERR_INTERRUPTED) {
        cli_measure_error(&m, "%s; the run is stored: run the same command to resume", err.message);
        cli_measure_finish(cli, &m);
        rc = KL_EXIT_INTERRUPTED;
        goto cleanup;
    }
    if (st == KL_ERR_UNMEASURED) {
        cli_measure_error(&m, "%s (record this run on a machine with a GPU: --measure record)", err.message);
        goto cleanup;
    }
    if (st != KL_OK) {
        cli_measure_error(&m, "%s", err.message);
        goto cleanup;
    }
    d = json_loads(doc, 0, NULL);
    const char *state = json_string_value(json_object_get(d, "state"));
    bool done = state && !strcmp(state, "done");
    /* the returned kernel, written out */
    best = kl_optimize_best_source(doc);
    const char *key = json_string_value(json_object_get(d, "key")) ?: "run";
    if (!out_path) out_path = out_default = default_output(cli, task->name, key);
    if (done && best && out_path) {
        char why[256];
        if (write_file(out_path, best, why, sizeof why) != 0) {
            cli_measure_error(&m, "%s: %s", out_path, why);
            goto cleanup;
        }
    }
    /* how the returned kernel compares: expert, vendor, device (judgements outside the budget) */
    json_int_t bi = json_integer_value(json_object_get(d, "best"));
    if (done && bi > 0 && !no_compare) {
        double median = -1;
        size_t k;
        json_t *f;
        json_array_foreach(json_object_get(d, "finals"), k, f) if (json_integer_value(json_object_get(f, "version")) == bi)
            median = json_number_value(json_object_get(json_object_get(f, "judgement"), "cand_ms"));
        char name[160];
        snprintf(name, sizeof name, "%s/opt-%.12s.cu", task->name,
                    json_string_value(json_object_get(json_array_get(json_object_get(d, "versions"), (size_t)bi),
                                                      "hash")) ?: "");
        if (kl_bench_compare(gate, m.store, task, name, best, median, &fig_text, &err) == KL_OK)
            fig = json_loads(fig_text, 0, NULL);
    }
    if (cli->json) {
        json_t *x = json_deep_copy(d);
        if (m.replay) json_object_set_new(x, "replayed", json_true());
        if (fig) json_object_set(x, "figures", fig);
        if (done && out_path) json_object_set_new(x, "output", json_string(out_path));
        char *text = json_dumps(x, JSON_SORT_KEYS | JSON_INDENT(2));
        printf("%s\n", text ? text : doc);
        free(text);
        json_decref(x);
    } else {
        char *md = kl_optimize_markdown(doc);
        cli_measure_printf(&m, stdout, "%s", md ? md : "");
        free(md);
        if (fig) print_figures(&m, fig);
        if (done && out_path) cli_measure_printf(&m, stdout, "The returned kernel is in %s.\n", out_path);
    }
    rc = cli_measure_finish(cli, &m);
cleanup:
    json_decref(d);
    json_decref(fig);
    free(fig_text);
    free(doc);
    free(best);
    free(out_default);
    kl_rewriter_free(rw);
    cli_cluster_report(cli, gate);
    kl_gate_close(gate);
    kl_task_free(task);
    cli_measure_close(&m);
    return rc;
}
