/* The search (search.c, search_evidence.c): what its two files share. Private to
 * src/optimize/search*.c: the names are search__*. search.c holds the run, the proposals, the
 * document, the rounds, the final check and the entry; search_evidence.c the run's own evidence
 * for the skills policy (stale transforms, the ranking's calibration, the tiers, the pick and the
 * judgements made ahead). */
#ifndef KL_OPTIMIZE_SEARCH_INT_H
#define KL_OPTIMIZE_SEARCH_INT_H
#include "optimize/optimize_int.h"

typedef struct search__run {
    const kl_task *task;
    const kl_optimize_options *opt;
    kl_error *err;
    char key[KL_HASH_HEX];
    char *start_path, *start_name;
    json_t *doc;               /* the stored document, rebuilt from the state after every round */
    json_t *stored_rounds;     /* judgements of an earlier, interrupted run of the same key */
    json_t *rounds, *skipped, *finals;
    opt_version *versions;
    unsigned nversions, cap;
    unsigned used;             /* gate calls spent */
    unsigned since_best;       /* judgements since the last new best */
    int best;                  /* the version with the highest cum */
    opt_policy_ctx pc;
    json_t *memory;
    kl_skill_list own_library; /* loaded here when opt->library is NULL */
    unsigned budget, beam;
    double min_gain;
    double t0;
    json_t *ahead;             /* judgements made ahead: "version:candidate hash" -> judgement */
    unsigned ahead_made, ahead_used;
    /* skills: the transforms this run's own judgements advise against now (see run_stale) */
    char stale[OPT_STALE_MAX][64];
    unsigned stale_n[OPT_STALE_MAX]; /* how many times each failed since the last new best */
    unsigned ranking;          /* skills: the ranking's revision (2 to 5) */
    unsigned nstale;
    /* skills, ranking 4: what each transform this run judged gained here (run_calibrate) */
    char cal[OPT_STALE_MAX][64];
    double cal_log[OPT_STALE_MAX]; /* the sum of the logs of its passing gains */
    unsigned cal_n[OPT_STALE_MAX], ncal;
    char turn[OPT_STALE_MAX][64]; /* ranking 4: the transforms judged since the last new best */
    unsigned turn_n[OPT_STALE_MAX], nturn;
} search__run;

/* Skills, ranking 4: what version v's judgements of one step (c's transform at c's site, any
 * parameters) say about its parameters. n: how many were judged; flat: all passed, gaining alike
 * (the highest less than OPT_PAYS over the lowest: the parameters made no difference); misses:
 * how many were judged after the one that gained most. */
typedef struct search__step_tally {
    unsigned n, misses;
    bool flat;
    double lo, hi;
} search__step_tally;

/* ---- search.c ---- */

void search__cand_name(const kl_task *task, const char *hash, char *buf, size_t size);
kl_status search__expand(search__run *r, unsigned vi);
json_t *search__judgement_json(const kl_judgement *j);

/* ---- search_evidence.c ---- */

bool search__is_stale(const search__run *r, const char *transform);
void search__run_stale(search__run *r);
search__step_tally search__tally_step(const opt_version *v, const opt_cand *c);
int search__cand_tier(const search__run *r, const opt_version *v, const opt_cand *c);
double search__expect_here(const search__run *r, const opt_version *v, const opt_cand *c);
void search__run_calibrate(search__run *r);
kl_status search__pick(search__run *r, int *pv, int *pc);
void search__ahead_key(unsigned vi, const char *hash, char *buf, size_t size);
kl_status search__judge_ahead(search__run *r, unsigned vi, unsigned ci);
kl_status search__prepare(search__run *r, unsigned vi);

#endif
