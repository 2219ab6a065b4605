/*
 * The CLI's side of --measure live|replay|record, shared by every subcommand that judges
 * or shows measurements (gate, gpu, task check, and later lineage, optimize, bench):
 *  - open the store (--db);
 *  - find the archive: --archive FILE, else $KLINEAGE_ARCHIVE, else archive/verdicts.jsonl
 *    at the root of the repository holding the task folder (or the working directory);
 *  - replay: import the archive into the store first, and prefix every line printed with
 *    "[replay] " so no replayed figure passes for a live one;
 *  - record: import the archive too (so nothing recorded before is lost), and export the
 *    verdict and gpu documents to it when the work is done.
 */
#ifndef KL_CLI_MEASURE_H
#define KL_CLI_MEASURE_H

#include <stdio.h>

#include "cli.h"
#include "klineage/gate.h"
#include "klineage/store.h"

typedef struct cli_measure {
    const char *archive_opt;  /* --archive FILE */
    const char *device;       /* --device NAME (replay: which recorded device) */
    char *archive;            /* the archive path in use (replay/record), owned */
    kl_store *store;          /* owned */
    bool replay;
    bool stand_in;            /* --judge stand-in: every line says "[stand-in] " */
} cli_measure;

#define CLI_MEASURE_INIT {NULL, NULL, NULL, NULL, false, false}

/* If argv[*i] is --archive or --device (with its value, "--opt V" or "--opt=V"), take it,
 * advance *i past it and return 1; 0 when it is not one of ours; -1 after printing a usage
 * error. */
int cli_measure_option(const kl_cli *cli, int argc, char **argv, int *i, cli_measure *m);

/*
 * The one rule, for every subcommand that shows measurements (gate, gpu info, task check,
 * lineage, bench), called after the arguments were checked and before any store is opened:
 *  - no --measure (nor $KLINEAGE_MEASURE): live where this machine has a GPU; replay where it
 *    has none, said once on stderr;
 *  - --measure live or record without a GPU: an error (exit 1) — live means measured now, and
 *    record writes nothing it did not measure (the archive is left as it is);
 *  - --measure replay: replay, GPU or not.
 * Returns KL_EXIT_OK, or an exit code after printing the error.
 */
int cli_measure_resolve(kl_cli *cli);
/* The older half of the rule, kept for callers not yet moved to cli_measure_resolve: no
 * --measure and no GPU replays (said so); it cannot refuse live without a GPU, so new code
 * calls cli_measure_resolve and returns its exit code. */
void cli_measure_auto(kl_cli *cli);

/* The store's folder is there: the default store's (per user) is created; a --db in a folder
 * that does not exist is an error. Returns KL_EXIT_OK or an exit code after printing. */
int cli_store_ready(const kl_cli *cli);

/* Open the store and, in replay or record, find (and import) the archive. task_dir may be
 * NULL. Returns KL_EXIT_OK, or an exit code after printing the error. */
int cli_measure_open(const kl_cli *cli, cli_measure *m, const char *task_dir);

/* Gate options for this command line (mode, store, jobs, device); the caller adds its own. */
kl_gate_options cli_measure_gate_options(const kl_cli *cli, const cli_measure *m);

/* Record mode: export the verdict and gpu documents to the archive. Other modes: nothing.
 * Returns KL_EXIT_OK or KL_EXIT_FAILED after printing the error. */
int cli_measure_finish(const kl_cli *cli, cli_measure *m);
/* Live, with no skill card in the store: the cards recorded in the archive (kinds skill,
 * skill-part, skill-admission; no verdict) are taken, and said so. A no-op otherwise. */
int cli_measure_library(const kl_cli *cli, cli_measure *m, const char *task_dir);
void cli_measure_close(cli_measure *m);

/* Print to f, each line prefixed "[replay] " in replay mode. */
void cli_measure_printf(const cli_measure *m, FILE *f, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "error: …" on stderr (prefixed in replay); returns KL_EXIT_FAILED. */
int cli_measure_error(const cli_measure *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
