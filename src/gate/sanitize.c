/*
 * The sanitizer stage: the worker run under compute-sanitizer's memcheck, racecheck
 * (every hazard reported, warnings included), initcheck and synccheck — the four at once, each
 * in a worker of its own — on the smallest check shape. Any report fails the stage, with its
 * text.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate/gate_int.h"
#include "gate/worker.h" /* the worker's exit codes */

#define REPORT_MAX ((size_t)64 << 10)
#define SANITIZER_EXIT 86

static const char *const tools[] = {"memcheck", "racecheck", "initcheck", "synccheck"};

static long count_after(const char *log, const char *marker)
{
    const char *p = NULL; /* the last summary */
    for (const char *q = strstr(log, marker); q; q = strstr(q + 1, marker)) p = q;
    if (!p) return -1;
    p += strlen(marker);
    while (*p == ' ') p++;
    char *end;
    long n = strtol(p, &end, 10);
    return end == p ? -1 : n;
}

long kl_sanitizer_count(const char *tool, const char *log)
{
    if (!log) return -1;
    if (!strcmp(tool, "racecheck")) {
        /* "RACECHECK SUMMARY: 3 hazards displayed (1 errors, 2 warnings)": every hazard counts */
        long hazards = count_after(log, "RACECHECK SUMMARY:");
        long errors = count_after(log, "ERROR SUMMARY:");
        if (hazards < 0) return errors;
        return errors > hazards ? errors : hazards;
    }
    return count_after(log, "ERROR SUMMARY:");
}

/* The first line of the report proper (after the banner), without the "========= " prefix. */
static char *first_report_line(const char *log)
{
    const char *p = log;
    while (p && *p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *s = p;
        while (s < p + len && (*s == '=' || *s == ' ')) s++;
        size_t rest = len - (size_t)(s - p);
        if (s != p && rest && !kl_str_starts(s, "COMPUTE-SANITIZER") && !kl_str_starts(s, "ERROR SUMMARY") &&
            !kl_str_starts(s, "RACECHECK SUMMARY") && !kl_str_starts(s, "Program hit") && !kl_str_starts(s, "Saved host"))
            return kl_strndup(s, rest);
        p = eol ? eol + 1 : NULL;
    }
    return NULL;
}

static char *find_sanitizer(kl_gate *gate)
{
    if (gate->sanitizer) return kl_strdup(gate->sanitizer);
    const char *e = getenv("KLINEAGE_COMPUTE_SANITIZER");
    if (e && *e) return kl_strdup(e);
    if (gate->nvcc) {
        char *bin = kl_path_dirname(gate->nvcc);
        const char *cands[] = {"compute-sanitizer", "../compute-sanitizer/compute-sanitizer"};
        for (size_t i = 0; bin && i < 2; i++) {
            char *p = kl_path_join(bin, cands[i]);
            if (p && access(p, X_OK) == 0) {
                free(bin);
                return p;
            }
            free(p);
        }
        free(bin);
    }
    const char *fixed[] = {"/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda/compute-sanitizer/compute-sanitizer"};
    for (size_t i = 0; i < 2; i++)
        if (access(fixed[i], X_OK) == 0) return kl_strdup(fixed[i]);
    return kl_strdup("compute-sanitizer"); /* PATH; a failure to run says so */
}

/* One tool's run: its own log file, its own child, on its own thread. */
typedef struct tool_run {
    kl_gate *gate;             /* with an executor (--gpus, Slurm), the child runs through it */
    const char *san, *tool, *job, *scratch, *worker;
    double timeout_s;
    char *log_path;
    kl_child c;
    kl_status st;
    kl_error err;
} tool_run;

static void *run_tool(void *arg)
{
    tool_run *r = arg;
    char code[16];
    kl_snprintf(code, sizeof code, "%d", SANITIZER_EXIT);
    const char *argv[16];
    unsigned n = 0;
    argv[n++] = r->san;
    argv[n++] = "--tool";
    argv[n++] = r->tool;
    argv[n++] = "--log-file";
    argv[n++] = r->log_path;
    argv[n++] = "--error-exitcode";
    argv[n++] = code;
    argv[n++] = "--print-limit";
    argv[n++] = "50";
    if (!strcmp(r->tool, "racecheck")) argv[n++] = "--racecheck-report", argv[n++] = "all";
    argv[n++] = r->worker;
    argv[n] = NULL;
    unlink(r->log_path);
    char tmpdir[4200];
    const char *env[] = {tmpdir, NULL};
    if (r->scratch) { /* the worker's working folder and $TMPDIR: the one place it may write */
        kl_snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", r->scratch);
        r->c.dir = r->scratch;
        r->c.env = env;
    }
    r->c.argv = argv;
    r->c.stdin_data = r->job;
    r->c.stdin_len = strlen(r->job);
    r->c.timeout_s = r->timeout_s;
    r->c.out_max = 1 << 20;
    r->c.err_max = 1 << 20;
    r->st = kl_gate_run_child(r->gate, &r->c, &r->err); /* on the judgement's GPU (executor.h) */
    r->c.argv = NULL;
    r->c.env = NULL;
    return NULL;
}

/* The four tools run at once, each on the same job in a worker of its own (they only read the
 * GPU's memory they allocate, so they do not disturb one another; one tool's wall time instead
 * of four), and their reports are read in the fixed order of `tools`. */
kl_status kl_gate_sanitize(kl_gate *gate, const char *job, const char *scratch, json_t **stage, kl_error *err)
{
    *stage = NULL;
    kl_status st = KL_OK;
    enum { NTOOLS = sizeof tools / sizeof tools[0] };
    char *san = find_sanitizer(gate), *dir = NULL;
    json_t *out = json_object(), *list = json_array();
    tool_run runs[NTOOLS];
    pthread_t threads[NTOOLS];
    bool started[NTOOLS] = {false};
    memset(runs, 0, sizeof runs);
    kl_strbuf reason = KL_STRBUF_INIT;
    if (!san || !out || !list) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    KL_TRY(kl_gate_worker(gate, err));
    KL_TRY(kl_tempdir("sanitize", &dir, err));
    for (size_t t = 0; t < NTOOLS; t++) {
        char name[64];
        kl_snprintf(name, sizeof name, "report-%s.txt", tools[t]);
        runs[t].gate = gate;
        runs[t].san = san;
        runs[t].tool = tools[t];
        runs[t].job = job;
        runs[t].scratch = scratch;
        runs[t].worker = gate->worker;
        runs[t].timeout_s = gate->sanitize_timeout_s;
        runs[t].log_path = kl_path_join(dir, name);
        kl_child_init(&runs[t].c);
        if (!runs[t].log_path) {
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
    }
    /* KLINEAGE_SANITIZE_SERIAL=1: one tool after another, as before (docs/gate.md) */
    const char *serial = getenv("KLINEAGE_SANITIZE_SERIAL");
    /* with an executor the judgement's GPU belongs to this thread: the tools go one by one */
    bool together = !(serial && *serial && strcmp(serial, "0")) && !gate->exec;
    for (size_t t = 0; together && t < NTOOLS; t++)
        started[t] = pthread_create(&threads[t], NULL, run_tool, &runs[t]) == 0;
    for (size_t t = 0; t < NTOOLS; t++) {
        if (started[t])
            pthread_join(threads[t], NULL);
        else
            run_tool(&runs[t]); /* no thread to be had: in this one */
    }
    bool ok = true;
    for (size_t t = 0; t < NTOOLS; t++) {
        tool_run *r = &runs[t];
        const char *tool = tools[t];
        if (r->st != KL_OK) {
            st = r->st;
            if (err) *err = r->err;
            kl_error_prefix(err, "compute-sanitizer (%s)", san);
            goto cleanup;
        }
        kl_child *c = &r->c;
        char *log = NULL;
        size_t len = 0;
        kl_error rerr = {0};
        if (kl_file_read(r->log_path, REPORT_MAX * 16, &log, &len, &rerr) != KL_OK) log = kl_strdup("");
        long count = kl_sanitizer_count(tool, log);
        /* the worker failed in its own harness under the tool (its job, no GPU, the runtime or
         * the reference): not the candidate's doing, so no verdict either */
        if (count <= 0 && !c->timed_out && !c->term_signal &&
            (c->exit_code == KL_WORKER_EXIT_JOB || c->exit_code == KL_WORKER_EXIT_NO_GPU ||
             c->exit_code == KL_WORKER_EXIT_HARNESS)) {
            const char *w = kl_strbuf_str(&c->err);
            size_t wn = strlen(w);
            while (wn && (w[wn - 1] == '\n' || w[wn - 1] == ' ')) wn--;
            size_t b = wn;
            while (b && w[b - 1] != '\n') b--;
            st = kl_error_set(err, c->exit_code == KL_WORKER_EXIT_NO_GPU ? KL_ERR_NO_GPU : KL_ERR_CHILD,
                              "compute-sanitizer %s: the worker failed in its harness (exit %d), not the "
                              "candidate: %.*s",
                              tool, c->exit_code, (int)(wn - b), w + b);
            free(log);
            goto cleanup;
        }
        bool tool_ok = !c->timed_out && !c->term_signal && c->exit_code == 0 && count == 0;
        json_t *tj = json_object();
        json_object_set_new(tj, "tool", json_string(tool));
        json_object_set_new(tj, "ok", json_boolean(tool_ok));
        json_object_set_new(tj, "count", json_integer(count));
        char how[128];
        kl_gate_child_reason(c, how, sizeof how);
        json_object_set_new(tj, "exit", json_string(how));
        json_object_set_new(tj, "report", json_stringn(log ? log : "", log && len > REPORT_MAX ? REPORT_MAX : (log ? len : 0)));
        if (!tool_ok) {
            const char *w = kl_strbuf_str(&c->err);
            json_object_set_new(tj, "worker_log", json_stringn(w, strlen(w) > REPORT_MAX ? REPORT_MAX : strlen(w)));
            if (ok) { /* the first failing tool names the stage's reason */
                char *first = first_report_line(log);
                if (count > 0)
                    kl_strbuf_addf(&reason, "%s: %ld report%s%s%s", tool, count, count == 1 ? "" : "s",
                                   first ? ", first: " : "", first ? first : "");
                else if (count < 0 && !c->timed_out && !c->term_signal && c->exit_code != SANITIZER_EXIT)
                    kl_strbuf_addf(&reason, "%s: the worker ended with %s and no summary%s%s", tool, how,
                                   first ? ": " : "", first ? first : "");
                else
                    kl_strbuf_addf(&reason, "%s: the worker ended with %s under the sanitizer%s%s", tool, how,
                                   first ? ": " : "", first ? first : "");
                free(first);
            }
            ok = false;
        }
        json_array_append_new(list, tj);
        free(log);
    }
    json_object_set_new(out, "ok", json_boolean(ok));
    json_object_set_new(out, "tools", list);
    list = NULL;
    if (!ok) json_object_set_new(out, "reason", json_string(kl_strbuf_str(&reason)));
    *stage = out;
    out = NULL;
cleanup:
    for (size_t t = 0; t < NTOOLS; t++) {
        kl_child_release(&runs[t].c);
        free(runs[t].log_path);
    }
    kl_strbuf_release(&reason);
    if (dir) {
        kl_error ignore;
        kl_remove_tree(dir, &ignore);
    }
    json_decref(out);
    json_decref(list);
    free(san);
    free(dir);
    return st;
}
