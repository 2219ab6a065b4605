/*
 * The sanitizer stage: the worker run under compute-sanitizer's memcheck, racecheck
 * (every hazard reported, warnings included), initcheck and synccheck, on the smallest
 * check shape. Any report fails the stage, with its text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate/gate_int.h"

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

kl_status kl_gate_sanitize(kl_gate *gate, const char *job, json_t **stage, kl_error *err)
{
    *stage = NULL;
    kl_status st = KL_OK;
    char *san = find_sanitizer(gate), *dir = NULL, *log_path = NULL;
    json_t *out = json_object(), *list = json_array();
    if (!san || !out || !list) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    KL_TRY(kl_gate_worker(gate, err));
    KL_TRY(kl_tempdir("sanitize", &dir, err));
    log_path = kl_path_join(dir, "report.txt");
    if (!log_path) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    bool ok = true;
    kl_strbuf reason = KL_STRBUF_INIT;
    for (size_t t = 0; t < sizeof tools / sizeof tools[0]; t++) {
        const char *tool = tools[t];
        char code[16];
        kl_snprintf(code, sizeof code, "%d", SANITIZER_EXIT);
        const char *argv[16];
        unsigned n = 0;
        argv[n++] = san;
        argv[n++] = "--tool";
        argv[n++] = tool;
        argv[n++] = "--log-file";
        argv[n++] = log_path;
        argv[n++] = "--error-exitcode";
        argv[n++] = code;
        argv[n++] = "--print-limit";
        argv[n++] = "50";
        if (!strcmp(tool, "racecheck")) argv[n++] = "--racecheck-report", argv[n++] = "all";
        argv[n++] = gate->worker;
        argv[n] = NULL;
        unlink(log_path);
        kl_child c;
        kl_child_init(&c);
        c.argv = argv;
        c.stdin_data = job;
        c.stdin_len = strlen(job);
        c.timeout_s = gate->sanitize_timeout_s;
        c.out_max = 1 << 20;
        c.err_max = 1 << 20;
        st = kl_gate_run_child(gate, &c, err); /* on the judgement's GPU (executor.h) */
        if (st != KL_OK) {
            kl_child_release(&c);
            kl_strbuf_release(&reason);
            kl_error_prefix(err, "compute-sanitizer (%s)", san);
            goto cleanup;
        }
        char *log = NULL;
        size_t len = 0;
        kl_error rerr = {0};
        if (kl_file_read(log_path, REPORT_MAX * 16, &log, &len, &rerr) != KL_OK) log = kl_strdup("");
        long count = kl_sanitizer_count(tool, log);
        bool tool_ok = !c.timed_out && !c.term_signal && c.exit_code == 0 && count == 0;
        json_t *tj = json_object();
        json_object_set_new(tj, "tool", json_string(tool));
        json_object_set_new(tj, "ok", json_boolean(tool_ok));
        json_object_set_new(tj, "count", json_integer(count));
        char how[128];
        kl_gate_child_reason(&c, how, sizeof how);
        json_object_set_new(tj, "exit", json_string(how));
        json_object_set_new(tj, "report", json_stringn(log ? log : "", log && len > REPORT_MAX ? REPORT_MAX : (log ? len : 0)));
        if (!tool_ok) {
            const char *w = kl_strbuf_str(&c.err);
            json_object_set_new(tj, "worker_log", json_stringn(w, strlen(w) > REPORT_MAX ? REPORT_MAX : strlen(w)));
            if (ok) { /* the first failing tool names the stage's reason */
                char *first = first_report_line(log);
                if (count > 0)
                    kl_strbuf_addf(&reason, "%s: %ld report%s%s%s", tool, count, count == 1 ? "" : "s",
                                   first ? ", first: " : "", first ? first : "");
                else if (count < 0 && !c.timed_out && !c.term_signal && c.exit_code != SANITIZER_EXIT)
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
        kl_child_release(&c);
    }
    json_object_set_new(out, "ok", json_boolean(ok));
    json_object_set_new(out, "tools", list);
    list = NULL;
    if (!ok) json_object_set_new(out, "reason", json_string(kl_strbuf_str(&reason)));
    kl_strbuf_release(&reason);
    *stage = out;
    out = NULL;
cleanup:
    if (dir) {
        kl_error ignore;
        kl_remove_tree(dir, &ignore);
    }
    json_decref(out);
    json_decref(list);
    free(san);
    free(dir);
    free(log_path);
    return st;
}
