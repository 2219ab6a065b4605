/*
 * Private to src/gate: where worker processes run (docs/cluster.md). Every child that runs a
 * worker — the gate's job, gpu-info, the sanitizer around a worker — goes through
 * kl_gate_run_child; without an executor that is kl_child_run here, as it always was. With one,
 * the child runs on a slot: a GPU of this machine (executor.c: CUDA_VISIBLE_DEVICES set to the
 * GPU's UUID, one child at a time per GPU) or a task of a Slurm job array (slurm.c).
 *
 * Concurrency: kl_executor_parallel runs several calls at once; each holds the executor's big
 * lock except while it waits for a child, so everything the calls share (the gate, the store,
 * a rewriter) is touched by one thread at a time.
 */
#ifndef KL_GATE_EXECUTOR_H
#define KL_GATE_EXECUTOR_H

#include <jansson.h>
#include <signal.h>

#include "klineage/gate.h"
#include "util/util.h"

typedef struct kl_executor kl_executor;

/* Open an executor. stand_in: the slots need no GPU (the stand-in judge's workers).
 * *out: kl_executor_close. */
kl_status kl_executor_open(const kl_executor_options *opt, bool stand_in, volatile sig_atomic_t *interrupt,
                           kl_executor **out, kl_error *err);
/* Cancels what is still outstanding (Slurm jobs), then frees. NULL is fine. */
void kl_executor_close(kl_executor *e);
/* How many children can run at once. */
unsigned kl_executor_width(const kl_executor *e);
/* Slurm: the GPUs are on other machines (this one need not have any). */
bool kl_executor_remote(const kl_executor *e);
/* Run c (argv, env, stdin, timeout, output bounds as for kl_child_run) on a slot; on return c
 * holds its end as kl_child_run gives it. A local child whose end is not clearly the candidate's
 * (killed, timed out, no GPU, a harness failure) is run once more on another GPU when there is
 * one; a GPU whose failures the other GPUs do not repeat is dropped after two. */
kl_status kl_executor_run(kl_executor *e, kl_child *c, kl_error *err);
/* Where the calling thread's last child ran, for the verdict's provenance: {"executor",
 * "slot", "gpu": {"index", "uuid", "model"}, "host", "attempts", "job"} — new reference, or NULL
 * when the last child ran without an executor. */
json_t *kl_executor_placement(void);
kl_status kl_executor_parallel(kl_executor *e, unsigned n, kl_gate_task_fn fn, void *arg, kl_status *sts,
                               kl_error *errs, kl_error *err);
char *kl_executor_report(kl_executor *e);
/* Add a line to what kl_executor_report says (printf-style; thread-safe). */
void kl_executor_note(kl_executor *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The executor's big lock, for the Slurm side: release it while waiting, take it back after.
 * Both do nothing in a thread that does not hold it. */
void kl_executor_unlock_for_wait(kl_executor *e, bool *held);
void kl_executor_relock(kl_executor *e, bool held);
/* Set the calling thread's placement (steals `where`). */
void kl_executor_set_placement(json_t *where);

/* ---- slurm.c ----------------------------------------------------------------------------- */

typedef struct kl_slurm kl_slurm;
kl_status kl_slurm_open(kl_executor *e, const kl_executor_options *opt, bool stand_in,
                        volatile sig_atomic_t *interrupt, kl_slurm **out, kl_error *err);
/* scancel every job still outstanding, then free. */
void kl_slurm_close(kl_slurm *s);
/* Queue c as a task of the next job array; wait for its result. The array is submitted once
 * every running call of a parallel section is waiting (so a batch is one array). */
kl_status kl_slurm_run(kl_slurm *s, kl_child *c, kl_error *err);
/* A parallel section starts (n calls) or one of its calls ends: the submission rule counts them. */
void kl_slurm_section(kl_slurm *s, int delta);

/* The node side of one Slurm task (klineage-worker --spool-task DIR): run the child that
 * DIR/spec.json describes and write DIR/stdout, DIR/stderr and, last, DIR/result.json.
 * Returns the process's exit code (0 when a result was written). */
int kl_slurm_task_main(const char *dir);

/* ---- standin.c ----------------------------------------------------------------------------- */

#define KL_STAND_IN_DEVICE "stand-in"
#define KL_STAND_IN_TOOLCHAIN "stand-in-1 (no nvcc, no GPU: not a measurement)"
#define KL_STAND_IN_MARK "klineage-stand-in:"

/* Is this worker job a stand-in one ({"job": "stand-in", …})? */
bool kl_stand_in_is_job(const char *job);
/* The worker side: the stand-in's figures for one job. *result: new JSON text (free()).
 * Returns the worker's exit code. Honors the test markers (crash, hang, sleep=S, crash-on=I). */
int kl_stand_in_worker_run(const char *job, char **result);

#endif
