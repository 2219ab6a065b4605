/* Private to src/optimize: the search's versions and candidates, and the policies. */
#ifndef KL_OPTIMIZE_INT_H
#define KL_OPTIMIZE_INT_H

#include <jansson.h>

#include "klineage/optimize.h"
#include "klineage/syntax.h"
#include "util/util.h"

#define KL_OPTIMIZE_FORMAT "klineage-optimize-1"
/* The search's revision, stored in a run (not in its key: a finished run is served as it was
 * stored, and says when an earlier search made it). 2 (2026-12-02): a version kept for a step
 * that did not pay does not propose again what its parent proposed, and a kept version that
 * is a same-step variant of a sibling no faster than it is not searched from. */
#define OPT_SEARCH_REVISION 5
/* 3 (2026-12-02, evening): the skills policy reads its own run too. A transform judged
 * OPT_STALE_AFTER times since the last new best without paying is deferred until a new best
 * (on softmax and layernorm the vectorize card's promise kept 30 of 40 calls on 1.00x steps
 * while row-parallel, with no card, waited; see docs/optimize.md).
 * 4 (2026-12-03): the catalog: smem-tile's stencil presets (outputs_x) apply after `specialize`
 * (the dispatch's launches share one grid; the specialized launch gets its own narrower one, and
 * a `#pragma unroll` stays with its loop), which every policy's blur runs can now reach; skills
 * ranking 3 puts proposals in a function the bench shape does not run last.
 * 5 (2026-12-03, evening): skills, ranking 3: a step that made a new best has its parent's best
 * untried variant (other parameters) tried next (mark_variant), the parent kept open until then
 * (prune_beam). */
#define OPT_STALE_AFTER 2
#define OPT_STALE_MAX 32
/* A gain a walk tells from noise: lineage's --probe-min-gain default. A card below it says
 * "this did not pay where it was measured"; under ranking 4 a step below it has no variant
 * tried next (ranking 5: below its square). */
#define OPT_PAYS 1.05

/* The search revision a stored run was made by (1: stored before runs said). */
json_int_t opt_search_revision(const json_t *doc);

/* One proposal of a version: a forward rewrite the rewriter answered. */
typedef struct opt_cand {
    char *source;             /* the whole new file (owned) */
    char *transform, *site;   /* owned */
    char *params;             /* compact JSON object, keys sorted (owned) */
    json_t *features;         /* the site's features as the rewriter gave them (owned), or NULL */
    char hash[KL_HASH_HEX];   /* of source */
    char id[96];              /* transform@site#hash12: stable for a version's text */
    /* what the policy says */
    double expect;            /* E: the expected gain over the version it applies to (> 0) */
    bool defer;               /* the policy expects it not to pay: tried after every other
                                 proposal of every open version (skills) */
    double order;             /* rank among equal scores, lower first (policy's order) */
    char card[136];           /* the card behind E ("" when none) */
    unsigned evidence;        /* how many gains that card's E averages (0: no card) */
    char why[256];            /* one line: how E was reached */
    bool door;                /* skills: a step from this version closed this transform's door
                                 (a child no longer proposes it): tried before the rest */
    bool variant;             /* skills: a variant (other parameters) of a step from this version
                                 that made a new best: tried after the doors, before the rest */
    bool off_path;            /* skills, ranking 3: its site is in a function the bench shape does not
                                 run (the general path of a dispatch): tried after everything else */
    bool tried;               /* judged, or skipped as a duplicate or as its parent's edit */
    bool judged;              /* judged by this run (a round of its own) */
    unsigned judged_at;       /* the round that judged it (1-based; 0 while not judged) */
    double gain;              /* what it gained over its version when judged (0: rejected) */
    bool prepared;            /* handed to prepare (compiled) */
} opt_cand;

/* One version of the kernel the search reached. */
typedef struct opt_version {
    char *source;             /* owned */
    char hash[KL_HASH_HEX];
    char name[128];           /* what the judge calls it */
    int parent;               /* index of the version it came from; -1 for the start */
    int round;                /* the round that made it; 0 for the start */
    double gain;              /* over its parent, same run; 1 for the start */
    double cum;               /* product of the gains along its path: speedup over the start */
    char transform[64], card[136], site[160];
    char *params;             /* owned, "{}" for the start */
    bool expanded;            /* its proposals were asked for and scored */
    bool open;                /* in the beam: the search may go on from it */
    bool kept;                /* made by a step that passed without a new best */
    opt_cand *cands;
    unsigned ncands;
} opt_version;

/* What the policies see of a run. */
typedef struct opt_policy_ctx {
    kl_policy policy;
    const kl_task *task;
    uint64_t seed;
    const kl_skill_list *library;  /* skills */
    bool admitted_only;
    json_t *memory;                /* memory: array of records (borrowed) */
    json_t *skipped;               /* skills: records of cards not tried, appended (borrowed) */
    unsigned ranking;              /* skills: the ranking's revision (2 to 5) */
} opt_policy_ctx;

/* The skills ranking's revision (kl_optimize_options.ranking), part of a skills run's key as
 * OPT_SKILLS_RANKING_PREFIX N: 5 (2026-12-04, later; the default, measured), evidence weighed by
 * how much of it there is and where it applies: a variant of a step another step overtook ranks
 * as any proposal (variant_live), a step under OPT_PAYS² has no variant, an alternative of a step
 * the version judged expects at most that step's gain (expect_here), among deferred proposals a
 * card measured fewer times gets more benefit of the doubt (expect_doubt), a vector width is
 * compared in bytes across element types (params_equal_bytes), and a card of another `shape` of
 * its transform does not speak for the site (other_shape); 4 (2026-12-04), the run's own evidence
 * weighed: a card's dtype is where it was measured (unlike, not failing), its admission trials
 * join its gain, the run's own gains calibrate E (expect_run), a step's parameters are searched
 * where its judgements differ and sampled where they agree (mark_spread, sampled), a new best
 * under OPT_PAYS has no variant, and deferred transforms take turns; 3 (2026-12-03), a step that closes
 * another transform's door (the child no longer proposes it) has that door tried at the parent
 * first, and among the transforms the run's own judgements defer, the one that failed fewer times
 * goes first (softmax: a vectorized row loop closed row-parallel's door; blur: smem-tile's preset
 * waited behind launch-bounds variants that had failed ten times), and a proposal in a function
 * the bench shape does not run goes after everything (search revision 4); 2 (2026-12-02), proposals no card
 * speaks for at E = 1.05 and what is not expected to pay deferred; 1 (no string): uncarded
 * proposals at E = 1, after every card, and a transform whose cards all fail dropped. */
#define OPT_SKILLS_RANKING_PREFIX "skills-ranking-"

/* Score the candidates of version v (E, order, card, why). versions[0..nversions)
 * for the path the version was reached by. Fails only when out of memory. */
kl_status opt_policy_score(opt_policy_ctx *pc, const opt_version *versions, unsigned nversions, unsigned v,
                           kl_error *err);

/* The site and kernel features of a candidate, flattened to one object of scalars
 * ("ops.expf": 2; kernel features under "kernel."), for conditions and for memory. New
 * object (json_decref). */
json_t *opt_candidate_features(const char *version_source, const opt_cand *c);

/* SplitMix64: the search's one source of pseudo-random order. */
uint64_t opt_mix64(uint64_t x);

#endif
