/*
 * klineage-worker: runs one gate job in its own process (docs/gate-worker.md).
 * Reads one JSON job from stdin, writes one JSON result to stdout, logs to stderr.
 * The exit code says how it ended (KL_WORKER_EXIT_*); the result is written in every case.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate/executor.h" /* the stand-in's job and the Slurm task runner */
#include "gate/worker.h"

#define JOB_MAX ((size_t)16 << 20)

static void log_to_stderr(kl_log_level level, const char *msg, void *user)
{
    (void)user;
    static const char *const names[] = {"error", "warning", "info", "debug"};
    if (level == KL_LOG_DEBUG && !getenv("KLINEAGE_WORKER_DEBUG")) return;
    fprintf(stderr, "klineage-worker: %s: %s\n", names[level], msg);
}

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        puts("usage: klineage-worker < JOB.json > RESULT.json\n"
             "Runs one gate job (docs/gate-worker.md); started by klineage, not by people.");
        return 0;
    }
    kl_log_set_sink(log_to_stderr, NULL);
    if (argc > 2 && !strcmp(argv[1], "--spool-task")) return kl_slurm_task_main(argv[2]); /* docs/cluster.md */
    kl_strbuf job = KL_STRBUF_INIT;
    kl_strbuf_init(&job, JOB_MAX);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) kl_strbuf_add(&job, buf, n);
    if (ferror(stdin) || job.truncated || job.failed) {
        fprintf(stderr, "klineage-worker: error: cannot read the job from stdin%s\n",
                job.truncated ? " (larger than 16 MiB)" : "");
        kl_strbuf_release(&job);
        return KL_WORKER_EXIT_JOB;
    }
    char *result = NULL;
    int code = kl_stand_in_is_job(kl_strbuf_str(&job)) ? kl_stand_in_worker_run(kl_strbuf_str(&job), &result)
                                                       : kl_worker_run(kl_strbuf_str(&job), job.len, &result);
    kl_strbuf_release(&job);
    if (result) {
        fputs(result, stdout);
        fputc('\n', stdout);
        free(result);
    }
    if (fflush(stdout) != 0) return KL_WORKER_EXIT_HARNESS;
    /* after a CUDA error, skip the exit handlers: the CUDA runtime's can hang or crash on a
     * lost context, and the result is already out; after a harness failure too (a reference
     * may still be running on the pool, past the worker's deadline); and in the sandbox, where
     * an exit handler (a leak checker's) may need what it forbids */
    if (code == KL_WORKER_EXIT_CUDA || code == KL_WORKER_EXIT_HARNESS || kl_worker_sandboxed()) {
        fflush(stderr);
        _exit(code);
    }
    return code;
}
