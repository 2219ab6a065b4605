/* --measure live|replay|record for the subcommands: store, archive, and the replay prefix. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "klineage/skills.h"
#include "measure.h"

#define REPLAY_PREFIX "[replay] "
#define ARCHIVE_IN_REPO "archive/verdicts.jsonl"

int cli_measure_option(const kl_cli *cli, int argc, char **argv, int *i, cli_measure *m)
{
    static const char *const names[] = {"--archive", "--device"};
    const char *a = argv[*i];
    for (int k = 0; k < 2; k++) {
        size_t n = strlen(names[k]);
        if (strncmp(a, names[k], n) != 0 || (a[n] != '\0' && a[n] != '=')) continue;
        const char *val;
        if (a[n] == '=') {
            val = a + n + 1;
        } else if (*i + 1 < argc) {
            val = argv[++*i];
        } else {
            cli_usage_error(cli, "option %s needs a value", names[k]);
            return -1;
        }
        if (!*val) {
            cli_usage_error(cli, "option %s needs a non-empty value", names[k]);
            return -1;
        }
        if (k == 0) m->archive_opt = val;
        else m->device = val;
        ++*i;
        return 1;
    }
    return 0;
}

/* The repository root above `start` (a folder holding .git), new string, or NULL. */
static char *repo_root(const char *start)
{
    char *dir = realpath(start, NULL);
    while (dir) {
        char *git = malloc(strlen(dir) + 6);
        if (!git) break;
        memcpy(git, dir, strlen(dir) + 1);
        memcpy(git + strlen(dir), "/.git", 6);
        struct stat st;
        bool found = stat(git, &st) == 0;
        free(git);
        if (found) return dir;
        if (!strcmp(dir, "/")) break;
        char *up = strrchr(dir, '/');
        if (up == dir) up[1] = '\0';
        else *up = '\0';
    }
    free(dir);
    return NULL;
}

static char *find_archive(const cli_measure *m, const char *task_dir)
{
    if (m->archive_opt) return strdup(m->archive_opt);
    const char *e = getenv("KLINEAGE_ARCHIVE");
    if (e && *e) return strdup(e);
    char *root = task_dir ? repo_root(task_dir) : NULL;
    if (!root) root = repo_root(".");
    if (!root) return NULL;
    size_t n = strlen(root) + strlen(ARCHIVE_IN_REPO) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", root, ARCHIVE_IN_REPO);
    free(root);
    return p;
}

static bool have_gpu(void)
{
    return access("/dev/nvidia0", F_OK) == 0 || access("/proc/driver/nvidia/gpus", F_OK) == 0;
}

/* The judgements need no GPU here: the stand-in judge needs none, a Slurm cluster's GPUs are
 * on its nodes. */
static bool gpu_elsewhere(const kl_cli *cli)
{
    return cli->stand_in || (cli->exec_given && cli->exec.kind == KL_EXECUTOR_SLURM);
}

int cli_measure_resolve(kl_cli *cli)
{
    if (have_gpu() || gpu_elsewhere(cli) || cli->measure == KL_MEASURE_REPLAY) return KL_EXIT_OK;
    if (!cli->measure_given) {
        cli->measure = KL_MEASURE_REPLAY;
        cli_note(cli, "%sno GPU on this machine: replaying recorded measurements (as --measure replay; "
                      "--measure live to refuse)\n", REPLAY_PREFIX);
        return KL_EXIT_OK;
    }
    if (cli->measure == KL_MEASURE_RECORD)
        return cli_error("--measure record needs a GPU, and this machine has none (no NVIDIA driver: "
                         "/proc/driver/nvidia/gpus and /dev/nvidia0 are missing): nothing was measured, nothing "
                         "recorded, the archive is unchanged");
    return cli_error("--measure live measures now, on this machine's GPU, and this machine has none (no NVIDIA "
                     "driver: /proc/driver/nvidia/gpus and /dev/nvidia0 are missing); --measure replay serves the "
                     "recorded measurements instead");
}

void cli_measure_auto(kl_cli *cli)
{
    if (cli->measure_given || have_gpu() || gpu_elsewhere(cli)) return;
    (void)cli_measure_resolve(cli);
}

int cli_store_ready(const kl_cli *cli)
{
    const char *db = cli->db_path;
    if (!db || !strcmp(db, ":memory:")) return KL_EXIT_OK;
    char *dir = strdup(db);
    if (!dir) return cli_error("out of memory");
    char *slash = strrchr(dir, '/');
    int rc = KL_EXIT_OK;
    if (slash) {
        if (slash == dir) slash[1] = '\0';
        else *slash = '\0';
        struct stat st;
        if (stat(dir, &st) == 0) {
            if (!S_ISDIR(st.st_mode)) rc = cli_error("--db %s: %s is not a folder", db, dir);
        } else if (cli->db_given) {
            rc = cli_error("--db %s: the folder %s does not exist (create it first, or leave --db out for the "
                           "default store)", db, dir);
        } else {
            /* the default store, per user: its folder is made on first use */
            for (char *p = dir + 1; rc == KL_EXIT_OK && *p; p++) {
                if (*p != '/') continue;
                *p = '\0';
                if (mkdir(dir, 0755) != 0 && errno != EEXIST) rc = cli_error("%s: cannot create: %s", dir, strerror(errno));
                *p = '/';
            }
            if (rc == KL_EXIT_OK && mkdir(dir, 0755) != 0 && errno != EEXIST)
                rc = cli_error("%s: cannot create the store's folder: %s", dir, strerror(errno));
        }
    }
    free(dir);
    return rc;
}

int cli_measure_open(const kl_cli *cli, cli_measure *m, const char *task_dir)
{
    kl_error err = {0};
    m->replay = cli->measure == KL_MEASURE_REPLAY;
    if (cli_store_ready(cli) != KL_EXIT_OK) return KL_EXIT_FAILED;
    m->stand_in = cli->stand_in;
    if (cli->stand_in && cli->measure != KL_MEASURE_LIVE) {
        /* a dry run of a script that records or replays: the stand-in judges, nothing is read
         * from the archive and nothing goes to it */
        cli_note(cli, "[stand-in] --measure %s: the stand-in judge measures nothing; judging with it, the archive "
                      "untouched\n",
                 m->replay ? "replay" : "record");
        m->replay = false;
    }
    if (kl_store_open(cli->db_path, &m->store, &err) != KL_OK) return cli_measure_error(m, "%s", err.message);
    if (cli->measure == KL_MEASURE_LIVE || cli->stand_in) return KL_EXIT_OK;
    m->archive = find_archive(m, task_dir);
    if (!m->archive)
        return cli_measure_error(m, "no archive: no repository (.git) above %s or the working folder; pass --archive "
                                    "FILE or set $KLINEAGE_ARCHIVE",
                                 task_dir ? task_dir : ".");
    if (access(m->archive, F_OK) != 0) {
        if (m->replay)
            return cli_measure_error(m, "%s: no archive to replay (a run with --measure record writes it)", m->archive);
        return KL_EXIT_OK; /* record: the first export creates it */
    }
    unsigned count = 0;
    if (kl_store_import(m->store, m->archive, &count, &err) != KL_OK) return cli_measure_error(m, "%s", err.message);
    if (m->replay) {
        cli_note(cli, "%sserving %u recorded document%s from %s; no figure below was measured now\n", REPLAY_PREFIX,
                 count, count == 1 ? "" : "s", m->archive);
    }
    return KL_EXIT_OK;
}

kl_gate_options cli_measure_gate_options(const kl_cli *cli, const cli_measure *m)
{
    kl_gate_options o = {0};
    o.mode = cli->stand_in                       ? KL_GATE_LIVE /* measures nothing, records nothing */
             : cli->measure == KL_MEASURE_REPLAY ? KL_GATE_REPLAY
             : cli->measure == KL_MEASURE_RECORD ? KL_GATE_RECORD
                                                 : KL_GATE_LIVE;
    o.store = m->store;
    o.device = m->device;
    o.jobs = cli->jobs;
    o.stand_in = cli->stand_in;                        /* docs/cluster.md */
    o.executor = cli->exec_given ? &cli->exec : NULL;
    return o;
}

int cli_measure_library(const kl_cli *cli, cli_measure *m, const char *task_dir)
{
    /* replay and record import the archive whole; the stand-in judges live */
    if (m->replay || (cli->measure != KL_MEASURE_LIVE && !cli->stand_in)) return KL_EXIT_OK;
    kl_skill_list lib;
    kl_error err = {0};
    if (kl_skill_list_load(m->store, &lib, &err) != KL_OK) return cli_measure_error(m, "%s", err.message);
    unsigned have = lib.count;
    kl_skill_list_release(&lib);
    if (have) return KL_EXIT_OK;
    char *archive = find_archive(m, task_dir);
    if (!archive || access(archive, F_OK) != 0) {
        free(archive);
        return KL_EXIT_OK; /* the policy says the library is empty, and how to fill it */
    }
    static const char *const kinds[] = {"skill", "skill-part", "skill-admission", NULL};
    unsigned n = 0;
    kl_status st = kl_store_import_kinds(m->store, archive, kinds, &n, &err);
    if (st == KL_OK)
        cli_note(cli, "the store had no skill cards: the library recorded in %s taken (%u document(s): cards, not "
                      "measurements; no verdict is read from it)\n",
                 archive, n);
    free(archive);
    return st == KL_OK ? KL_EXIT_OK : cli_measure_error(m, "%s", err.message);
}

int cli_measure_finish(const kl_cli *cli, cli_measure *m)
{
    if (cli->measure != KL_MEASURE_RECORD || cli->stand_in) return KL_EXIT_OK; /* the stand-in: never archived */
    kl_error err = {0};
    char *dir = strdup(m->archive);
    char *slash = dir ? strrchr(dir, '/') : NULL;
    if (slash && slash != dir) {
        *slash = '\0';
        mkdir(dir, 0755); /* archive/ in the repository, on the first record */
    }
    free(dir);
    /* everything a machine without a GPU needs to replay: verdicts, the device, the vendor
     * timings, the walks and the cards they gave */
    static const char *const kinds[] = {"verdict", "skill", "skill-part", "skill-admission", "gpu", "vendor",
                                        "lineage", "optimize", NULL};
    if (kl_store_export(m->store, kinds, m->archive, &err) != KL_OK) return cli_measure_error(m, "%s", err.message);
    cli_note(cli, "recorded to %s\n", m->archive);
    return KL_EXIT_OK;
}

void cli_measure_close(cli_measure *m)
{
    kl_store_close(m->store);
    m->store = NULL;
    free(m->archive);
    m->archive = NULL;
}

static void print_prefixed(const cli_measure *m, FILE *f, const char *lead, const char *text)
{
    const char *p = text;
    bool first = true;
    while (*p || first) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        if (!eol && !n && !first) break;
        fprintf(f, "%s%s%.*s\n", m->replay ? REPLAY_PREFIX : m->stand_in ? "[stand-in] " : "", first ? lead : "",
                (int)n, p);
        first = false;
        p += n;
        if (*p == '\n') p++;
        if (!*p) break;
    }
}

void cli_measure_printf(const cli_measure *m, FILE *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *text = NULL;
    if (vasprintf(&text, fmt, ap) < 0) text = NULL;
    va_end(ap);
    if (text) print_prefixed(m, f, "", text);
    free(text);
}

int cli_measure_error(const cli_measure *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *text = NULL;
    if (vasprintf(&text, fmt, ap) < 0) text = NULL;
    va_end(ap);
    print_prefixed(m, stderr, "error: ", text ? text : "out of memory");
    free(text);
    return KL_EXIT_FAILED;
}
