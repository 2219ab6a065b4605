/*
 * The command-line tool. It uses only the public API (include/klineage/).
 * A subcommand is one file cmd_<name>.c with `int cmd_<name>(int argc, char **argv, kl_cli *cli)`,
 * an entry in the table in main.c, a page docs/cli/<name>.md (whose help block is what
 * `--help` prints) and a test in tests/cli/.
 */
#ifndef KL_CLI_H
#define KL_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "klineage/gate.h"
#include "klineage/klineage.h"

/* Exit codes (docs/cli/exit-codes.md). */
enum {
    KL_EXIT_OK = 0,       /* the work was done and passed */
    KL_EXIT_FAILED = 1,   /* the work failed: a rejected candidate, an invalid task, an error */
    KL_EXIT_USAGE = 2,    /* the command line was wrong */
    KL_EXIT_INTERRUPTED = 130
};

typedef enum { KL_MEASURE_LIVE, KL_MEASURE_REPLAY, KL_MEASURE_RECORD } kl_cli_measure;

/* Global options, accepted before or after the subcommand. */
typedef struct kl_cli {
    const char *db_path;     /* --db FILE, else $KLINEAGE_DB, else the per-user default
                                ($XDG_DATA_HOME/klineage/klineage.db, else ~/.local/share/klineage/klineage.db) */
    bool db_given;           /* --db or $KLINEAGE_DB chose it */
    kl_cli_measure measure;  /* --measure live|replay|record */
    bool measure_given;
    int jobs;                /* --jobs N (default: number of CPUs) */
    bool quiet;              /* --quiet */
    bool json;               /* --json */
    bool stand_in;           /* --judge stand-in: the CPU stand-in judge (docs/cluster.md) */
    kl_executor_options exec;/* --gpus, --executor, --spool, --slurm-* (cluster.c) */
    bool exec_given;
    const char *prog;        /* "klineage" */
    const char *cmd;         /* the subcommand's name */
} kl_cli;

/* Print "error: <msg>" to stderr; returns KL_EXIT_FAILED. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print "usage error" with a one-line hint; returns KL_EXIT_USAGE. */
int cli_usage_error(const kl_cli *cli, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print the subcommand's help (from its doc page) to f. Returns false if it has none. */
bool cli_print_help(const char *cmd, FILE *f);
/* Progress and notes for people: stderr, silenced by --quiet. */
void cli_note(const kl_cli *cli, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* True if s is "-h" or "--help". */
bool cli_is_help(const char *s);
/* Common case: argv[1..] holds "--help" anywhere: print help, return true. */
bool cli_wants_help(int argc, char **argv, const kl_cli *cli);

/* The help texts generated from docs/cli/ pages at build time (help_text.c). */
typedef struct cli_help_entry {
    const char *name;
    const char *text;
} cli_help_entry;
extern const cli_help_entry cli_help_texts[];
extern const unsigned cli_help_count;

/* cluster.c: --judge, --gpus, --executor, --spool, --slurm-*. cli_cluster_option: 1 taken (i
 * moved past its value), 0 not one of them, -1 after a usage error. cli_cluster_setup, after the
 * options: -1 after a usage error. */
void cli_cluster_env(kl_cli *cli);
int cli_cluster_option(kl_cli *cli, int argc, char **argv, int *i);
int cli_cluster_setup(kl_cli *cli, const char *default_db);
/* What the gate's executor has to say (GPUs dropped, Slurm tasks resubmitted), on stderr. */
void cli_cluster_report(const kl_cli *cli, kl_gate *gate);

#define KL_CMD(name) int cmd_##name(int argc, char **argv, kl_cli *cli)
KL_CMD(help);
KL_CMD(version);
KL_CMD(parse);
KL_CMD(task);      /* cmd_task.c: task check */
KL_CMD(gate);      /* cmd_gate.c: one verdict */
KL_CMD(gpu);       /* cmd_gpu.c: gpu info */
KL_CMD(lineage);   /* cmd_lineage.c: the backward walk */
KL_CMD(bench);     /* cmd_bench.c: suite tables */
KL_CMD(rewrite);   /* cmd_rewrite.c: the rules catalog by hand */
KL_CMD(skills);    /* cmd_skills.c: the skill library (list, show, export, import, match) */
KL_CMD(optimize);  /* cmd_optimize.c: the forward optimizer */

struct kl_task;
struct json_t;
/* cmd_gate.c, for `task check`: gate the task's naive and expert kernels (live on this GPU, or
 * replayed: the caller resolved the mode), one line each on stdout; with results (a JSON array)
 * one object each is appended there instead. Returns an exit code. */
int cli_gate_task_kernels(kl_cli *cli, const char *task_dir, const struct kl_task *task, struct json_t *results);

#endif
