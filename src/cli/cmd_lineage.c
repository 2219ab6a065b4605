/* klineage lineage TASK_DIR: the backward walk and its skill cards. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "klineage/gate.h"
#include "klineage/lineage.h"
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
    cli_measure *m;
} progress_ctx;

static void on_progress(void *user, kl_walk_event ev, unsigned version, unsigned index, unsigned n, const char *text)
{
    progress_ctx *p = user;
    /* Recording, every step reaches the archive as it is stored: a walk killed later (a device
     * call's limit, SIGKILL after a judgement that would not stop) keeps its steps and verdicts.
     * The archive is renamed into place whole, so a kill during the export loses nothing. */
    if (ev == KL_WALK_STORED) {
        cli_measure_finish(p->cli, p->m);
        return;
    }
    if (p->cli->quiet) return;
    switch (ev) {
    case KL_WALK_JUDGED:
        cli_measure_printf(p->m, stderr, "  v%u [%u/%u] %s\n", version, index, n, text);
        break;
    case KL_WALK_PROBE:
        cli_measure_printf(p->m, stderr, "  v%u %s\n", version, text);
        break;
    default:
        cli_measure_printf(p->m, stderr, "%s\n", text);
        break;
    }
}

static const char *value_of(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (!strncmp(argv[*i], name, n) && argv[*i][n] == '=') return argv[*i] + n + 1;
    if (!strcmp(argv[*i], name) && *i + 1 < argc) return argv[++*i];
    return NULL;
}

static bool parse_uint(const char *s, unsigned *out)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (*s == '\0' || *end || v > 100000) return false;
    *out = (unsigned)v;
    return true;
}

KL_CMD(lineage)
{
    if (cli_wants_help(argc, argv, cli)) return KL_EXIT_OK;
    const char *task_dir = NULL, *expert = NULL, *backend = "rules", *rw_config = NULL;
    unsigned probes = 4, max_steps = 0, bisect = 0;
    double probe_min_gain = 1.02;
    bool restart = false, restart_older = false, reopen = false, no_skills = false, full = false, probes_given = false,
         gain_given = false, bisect_given = false;
    cli_measure m = CLI_MEASURE_INIT;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r = cli_measure_option(cli, argc, argv, &i, &m);
        if (r < 0) return KL_EXIT_USAGE;
        if (r > 0) { /* it moved i past its option; the loop's i++ must not skip one more */
            i--;
            continue;
        }
        if ((v = value_of(argc, argv, &i, "--expert"))) {
            expert = v;
        } else if ((v = value_of(argc, argv, &i, "--rewriter"))) {
            backend = v;
        } else if ((v = value_of(argc, argv, &i, "--rewriter-config"))) {
            rw_config = v;
        } else if ((v = value_of(argc, argv, &i, "--probes"))) {
            if (!parse_uint(v, &probes)) return cli_usage_error(cli, "--probes takes a count, not '%s'", v);
            probes_given = true;
        } else if ((v = value_of(argc, argv, &i, "--probe-min-gain"))) {
            char *end;
            probe_min_gain = strtod(v, &end);
            if (*v == '\0' || *end || probe_min_gain < 0 || probe_min_gain > 100)
                return cli_usage_error(cli, "--probe-min-gain takes a ratio such as 1.02, not '%s'", v);
            gain_given = true;
        } else if ((v = value_of(argc, argv, &i, "--bisect"))) {
            if (!parse_uint(v, &bisect) || bisect > 16)
                return cli_usage_error(cli, "--bisect takes a count of probes (0 to 16), not '%s'", v);
            bisect_given = true;
        } else if ((v = value_of(argc, argv, &i, "--max-steps"))) {
            if (!parse_uint(v, &max_steps)) return cli_usage_error(cli, "--max-steps takes a count, not '%s'", v);
        } else if ((v = value_of(argc, argv, &i, "--strategy"))) {
            if (strcmp(v, "lazy") && strcmp(v, "full"))
                return cli_usage_error(cli, "--strategy is lazy or full, not '%s'", v);
            full = !strcmp(v, "full");
        } else if (!strcmp(argv[i], "--restart")) {
            restart = true;
        } else if (!strcmp(argv[i], "--restart-older")) {
            restart_older = true;
        } else if (!strcmp(argv[i], "--continue")) {
            reopen = true;
        } else if (!strcmp(argv[i], "--no-skills")) {
            no_skills = true;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage_error(cli, "unknown option '%s'", argv[i]);
        } else if (!task_dir) {
            task_dir = argv[i];
        } else {
            return cli_usage_error(cli, "one task folder, not '%s' too", argv[i]);
        }
    }
    if (!task_dir) return cli_usage_error(cli, "which task? give its folder");

    int rc = KL_EXIT_FAILED;
    kl_error err = {0};
    kl_task *task = NULL;
    kl_gate *gate = NULL;
    kl_rewriter *rw = NULL;
    char *doc = NULL;
    if (kl_task_load(task_dir, &task, &err) != KL_OK) {
        fprintf(stderr, "error: %s\n", err.message);
        return KL_EXIT_FAILED;
    }
    if (expert && access(expert, R_OK) != 0) {
        kl_task_free(task);
        return cli_error("--expert %s: cannot read: %s", expert, strerror(errno));
    }
    rc = cli_measure_resolve(cli); /* the one rule (measure.h): live needs a GPU */
    if (rc == KL_EXIT_OK) rc = cli_measure_open(cli, &m, task_dir);
    if (rc != KL_EXIT_OK) goto cleanup;
    rc = KL_EXIT_FAILED;
    kl_gate_options go = cli_measure_gate_options(cli, &m);
    go.interrupt = &stop_requested; /* waiting judgements stop; Slurm jobs are cancelled */
    if (kl_gate_open(&go, &gate, &err) != KL_OK) {
        cli_measure_error(&m, "%s", err.message);
        goto cleanup;
    }
    /* In replay, a rewriter that caches (llm) must serve recorded answers only. */
    char *cfg = NULL;
    if (m.replay && !strcmp(backend, "llm")) {
        json_t *c = rw_config ? json_loads(rw_config, 0, NULL) : json_object();
        if (!c) {
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

    /* A stored walk keeps the probing options it was made with unless the command line gives
     * others: resumed or recomputed from recorded verdicts, it then asks for the same shapes. */
    if (!probes_given || !gain_given || !bisect_given) {
        char *stored = NULL;
        kl_error ignore = {0};
        if (kl_lineage_load(m.store, task, expert, kl_rewriter_name(rw), full, &stored, &ignore) == KL_OK) {
            unsigned p = probes, b = bisect;
            double g = probe_min_gain;
            kl_lineage_recorded_options(stored, &p, &g, &b);
            if (!probes_given) probes = p;
            if (!gain_given) probe_min_gain = g;
            if (!bisect_given) bisect = b;
            /* the options taken from the stored walk, and only those */
            char taken[96] = "";
            size_t n = 0;
            if (!probes_given) n += (size_t)snprintf(taken + n, sizeof taken - n, " --probes %u", probes);
            if (!gain_given && n < sizeof taken)
                n += (size_t)snprintf(taken + n, sizeof taken - n, " --probe-min-gain %.2f", probe_min_gain);
            if (!bisect_given && bisect && n < sizeof taken)
                n += (size_t)snprintf(taken + n, sizeof taken - n, " --bisect %u", bisect);
            if (!cli->quiet && n) cli_measure_printf(&m, stderr, "the stored walk's options:%s\n", taken);
        }
        free(stored);
    }

    progress_ctx pc = {cli, &m};
    kl_lineage_options lo = {0};
    lo.expert_path = expert;
    lo.rewriter = rw;
    lo.store = m.store;
    lo.judge = kl_gate_search_judge;
    lo.judge_user = gate;
    if (!m.replay) lo.prepare = kl_gate_search_prepare; /* compile each version's proposals in parallel */
    lo.judge_many = kl_gate_search_judge_many;          /* and judge them at once where there are several workers */
    lo.max_steps = max_steps;
    lo.probes = probes;
    lo.probe_min_gain = probe_min_gain;
    lo.bisect = bisect;
    lo.full = full;
    lo.restart = restart;
    lo.restart_older = restart_older;
    lo.reopen = reopen;
    lo.interrupt = &stop_requested;
    lo.progress = on_progress;
    lo.progress_user = &pc;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, &old);
    kl_status st = kl_lineage_walk(task, &lo, &doc, &err);
    sigaction(SIGINT, &old, NULL);

    if (st == KL_ERR_INTERRUPTED) {
        cli_measure_error(&m, "%s; the walk is stored: run the same command to resume", err.message);
        /* what was measured before the interruption is kept in the archive too */
        cli_measure_finish(cli, &m);
        rc = KL_EXIT_INTERRUPTED;
        goto cleanup;
    }
    /* replayed, a walk recorded unfinished (cut at its time limit) is shown as far as it went,
     * with no cards (as a walk cut while recording): going on is a GPU's work, and the note says so */
    bool unfinished = false;
    if (st == KL_ERR_UNMEASURED && m.replay && !restart && doc) {
        json_t *d = json_loads(doc, 0, NULL);
        size_t nsteps = json_array_size(json_object_get(d, "steps"));
        size_t nversions = json_array_size(json_object_get(d, "versions"));
        json_decref(d);
        if (nsteps > 0) {
            unfinished = true;
            cli_measure_printf(&m, stderr,
                               "the recorded walk is unfinished: it ends at version %zu, after %zu step(s) (it was cut "
                               "when it was recorded); the archive has no verdict for what comes next (%s). The "
                               "recorded part follows, and gives no cards until the walk ends (as a walk cut while "
                               "recording gives none); going on needs a GPU ('klineage --measure record lineage %s').",
                               nversions ? nversions - 1 : 0, nsteps, err.message, task_dir);
            err = (kl_error){0};
            st = KL_OK;
        }
    }
    if (st != KL_OK) {
        cli_measure_error(&m, "%s", err.message);
        if (st == KL_ERR_UNMEASURED)
            cli_measure_printf(&m, stderr,
                               "hint: the archive holds no verdict for this judgement: the walk's proposals (the rules, "
                               "the expert or the task) changed since it was recorded. The recorded walk itself is "
                               "replayed as it was ('klineage --measure replay lineage %s', without --restart); a walk "
                               "of today's proposals needs a GPU ('klineage --measure record lineage %s' there).",
                               task_dir, task_dir);
        goto cleanup;
    }
    if (cli->json) {
        /* JSON stays JSON in replay: the document says it was replayed instead of a prefix */
        json_t *d = m.replay ? json_loads(doc, 0, NULL) : NULL;
        if (d) json_object_set_new(d, "replayed", json_true());
        if (d && unfinished) json_object_set_new(d, "unfinished", json_true());
        char *text = d ? json_dumps(d, JSON_SORT_KEYS | JSON_INDENT(2)) : NULL;
        printf("%s\n", text ? text : doc);
        free(text);
        json_decref(d);
    } else {
        char *md = kl_lineage_markdown(doc);
        cli_measure_printf(&m, stdout, "%s", md ? md : "");
        free(md);
    }
    if (!no_skills && !unfinished) {
        kl_extract_stats xs;
        if (kl_lineage_extract_skills(m.store, task, doc, &xs, &err) != KL_OK) {
            cli_measure_error(&m, "skills: %s", err.message);
            goto cleanup;
        }
        if (!cli->json)
            cli_measure_printf(&m, stdout,
                               "%u step(s) gave %u distinct card(s): %u new to the library, %u merged with the "
                               "evidence of other lineages; see 'klineage skills list'.\n",
                               xs.steps, xs.cards, xs.new_cards, xs.merged_cards);
    }
    rc = cli_measure_finish(cli, &m);
cleanup:
    if (rw && !cli->quiet) { /* what the rewriter spent (requests and tokens for llm) */
        kl_rewriter_usage u;
        kl_rewriter_usage_get(rw, &u);
        cli_measure_printf(&m, stderr,
                           "rewriter %s: %u proposal request(s), %u endpoint/program call(s), %u from the cache, "
                           "%llu tokens in, %llu out, %.1f s\n",
                           kl_rewriter_name(rw), u.proposals, u.requests, u.cached, (unsigned long long)u.tokens_in,
                           (unsigned long long)u.tokens_out, u.wall_s);
    }
    free(doc);
    kl_rewriter_free(rw);
    cli_cluster_report(cli, gate);
    kl_gate_close(gate);
    kl_task_free(task);
    cli_measure_close(&m);
    return rc;
}
