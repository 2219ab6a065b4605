/*
 * Skill cards (docs/skill-card.md): what an optimization does, where it sits, when it is
 * valid and what it gained — learned from lineages. Plain data with its checks; cards
 * know no search.
 *
 * One handle, opaque: kl_skill — a card that parsed and validated (kl_skill_parse,
 * kl_skill_free). Everything else is a plain value or a new string the caller frees.
 *
 * What is here:
 *   - the card model: parse and validate (errors name the key: "preconditions[1].predicate:
 *     expected a string"), render as JSON (a fixed key order) and as Markdown;
 *   - preconditions: parse a predicate ("cols % 4 == 0"), evaluate it against an environment
 *     (a JSON object of named values: a kernel's features and a task's sizes), and match a
 *     whole card (its preconditions and its `requires`) against a kernel;
 *   - the library in the store (kind "skill", key the id): put with merge, get by id or
 *     unique prefix, list, import a file, export as JSON, Markdown or agent-skill folders;
 *   - forward: the observables of a site of any kernel and task (sizes by role, computed
 *     through the index analysis) and ONE call that matches a card against a candidate site
 *     (kl_skill_match_site: what `skills match` and the optimizer use); the library without
 *     one task's lineages (kl_skill_list_load_excluding); admission records.
 *
 * The skills stage reads tasks (its neighbour on the ladder: plain data) to evaluate sizes by
 * role at a task's shapes; it knows no gate, rewriter or search.
 */
#ifndef KLINEAGE_SKILLS_H
#define KLINEAGE_SKILLS_H

#include <stdbool.h>
#include <stdint.h>
#include "klineage/klineage.h"
#include "klineage/store.h"
#include "klineage/syntax.h"
#include "klineage/task.h"

#ifdef __cplusplus
extern "C" {
#endif

/* jansson's value type; include <jansson.h> to use the functions that take or give one. */
struct json_t;

/* The card format this build reads and writes ("format" in a card; absent means 1). */
#define KL_SKILL_FORMAT 1

/* ---- the card ------------------------------------------------------------------------- */

typedef struct kl_skill kl_skill;

/* Parse and validate a card from JSON text. `origin` names where it came from in messages
 * (a file name, "skill vectorize-3fa2c1"; NULL: "skill card"). Errors name the key and what
 * was expected: "cards.json: preconditions[1].predicate: expected a string",
 * "…: preconditions[0].predicate: \"cols % 4 = 0\": column 10: expected an operator (…)".
 * Unknown keys are errors, except those starting with "x-" (kept as they are) and inside
 * `params`, `anchor.pattern.site_features` and shapes, which are free. On KL_OK *out is
 * owned by the caller (kl_skill_free). KL_ERR_PARSE for text that is not JSON,
 * KL_ERR_INVALID for a card that breaks the format. */
kl_status kl_skill_parse(const char *json_text, const char *origin, kl_skill **out, kl_error *err);
/* The same from a JSON value (borrowed; the card keeps its own copy). */
kl_status kl_skill_from_json(const struct json_t *doc, const char *origin, kl_skill **out, kl_error *err);
void kl_skill_free(kl_skill *card);

/* Fields, owned by the card (valid until kl_skill_free). Never NULL ("" when absent). */
const char *kl_skill_id(const kl_skill *card);
const char *kl_skill_transform(const kl_skill *card);
const char *kl_skill_intent(const kl_skill *card);
/* The whole card as a JSON object, owned by the card: read it, do not change it. */
const struct json_t *kl_skill_doc(const kl_skill *card);

/* What `skills list` shows of a card. Strings are owned by the card. */
typedef struct kl_skill_summary {
    const char *id, *transform, *intent;
    unsigned npreconditions;  /* conditions with a predicate */
    unsigned nprobed;         /* of those, learned by probing (kind probed or probed-perf) */
    unsigned nrisks, nlineages, ncontradictions, nrequires;
    unsigned probes;          /* probes.count (0 when absent) */
    unsigned probe_failures;  /* probes.failures (0 when absent) */
    double best_gain;         /* the highest gain where the step was measured in its walk: at the
                                 bench shape, or at the shape that runs its path (effect labels
                                 "bench", "path"); < 0 when none was measured */
    double best_probe;        /* the highest gain at a probe shape (label "probe"); < 0 when none */
    unsigned nslower;         /* risks that are slowdowns (broke: slower) */
    const char *admission;    /* admission.status: "admitted", "rejected" or "untried" (absent) */
} kl_skill_summary;
void kl_skill_summarize(const kl_skill *card, kl_skill_summary *out);

/* The card as JSON text in the fixed key order of docs/skill-card.md, indented by two, reals
 * with 15 significant digits, with a final newline. New string (free()); NULL when out of memory. */
char *kl_skill_to_json(const kl_skill *card);

/* The card as Markdown for a kernel engineer: a heading (at `heading_level`, 1–4) with the id
 * and intent, then "Where it sits", "When it is valid", "What it gained", "What broke where
 * the conditions failed", "Requires" and, when any, "Contradictions". New string (free());
 * NULL when out of memory. */
char *kl_skill_markdown(const kl_skill *card, unsigned heading_level);

/* The card as an agent skill's SKILL.md: YAML front matter (name, a one-line description of
 * what it does and when to use it), then when to use it, when not to, how to apply it and
 * the evidence. New string (free()); NULL when out of memory. */
char *kl_skill_agent_markdown(const kl_skill *card);
/* The agent skill's name (and folder name) for a card: the id in lowercase with every run of
 * characters other than a-z, 0-9 and '-' turned into one '-', at most 64 characters.
 * Written into buf (>= 65 bytes). */
void kl_skill_agent_name(const kl_skill *card, char *buf, size_t size);

/* ---- preconditions ----------------------------------------------------------------------- */

/* Whether a condition holds. */
typedef enum kl_truth {
    KL_TRUTH_HOLDS = 0,
    KL_TRUTH_FAILS = 1,
    KL_TRUTH_UNKNOWN = 2      /* a name it needs is not in the environment, or cannot be compared */
} kl_truth;
/* "holds", "fails", "unknown". Never NULL. */
const char *kl_truth_name(kl_truth truth);

typedef enum kl_pred_op { KL_PRED_EQ, KL_PRED_NE, KL_PRED_LT, KL_PRED_LE, KL_PRED_GT, KL_PRED_GE } kl_pred_op;
typedef enum kl_pred_kind { KL_PRED_INT, KL_PRED_STRING, KL_PRED_BOOL } kl_pred_kind;

#define KL_PRED_NAME_MAX 64
#define KL_PRED_STRING_MAX 128

/* A parsed predicate: NAME OP VALUE, or NAME % MODULUS OP VALUE. */
typedef struct kl_predicate {
    char name[KL_PRED_NAME_MAX];     /* [A-Za-z_][A-Za-z0-9_.]* */
    int64_t modulus;                 /* > 0 for "NAME % M OP VALUE"; 0 for a plain comparison */
    kl_pred_op op;
    kl_pred_kind kind;               /* the type of VALUE */
    int64_t integer;                 /* KL_PRED_INT */
    bool boolean;                    /* KL_PRED_BOOL */
    char string[KL_PRED_STRING_MAX]; /* KL_PRED_STRING, unescaped */
} kl_predicate;

/* Parse a predicate (docs/skill-card.md, "Predicates"): `NAME OP VALUE` or `NAME % M OP VALUE`,
 * OP one of == != < <= > >=, VALUE a decimal integer, a "quoted string" (\" and \\ escape)
 * or true/false. Strings and booleans take only == and !=; a modulus needs an integer VALUE.
 * KL_ERR_INVALID with the column and what was expected:
 * "\"cols % 4 = 0\": column 10: expected an operator (== != < <= > >=)". */
kl_status kl_predicate_parse(const char *text, kl_predicate *out, kl_error *err);

/* Evaluate a predicate in an environment: a JSON object whose members are named values
 * (integers, strings, booleans; reals compare as numbers). UNKNOWN when the name is absent,
 * null, or of a type the value cannot be compared with (a string against an integer); a
 * boolean compares with an integer as 0/1. When why is not NULL it receives what was
 * compared ("cols = 1023") or why it is unknown ("cols is not in the environment"). */
kl_truth kl_predicate_eval(const kl_predicate *pred, const struct json_t *env, char *why, size_t why_size);

/* One precondition of a card, evaluated. Strings are owned by the card. */
typedef struct kl_skill_check {
    const char *predicate;
    const char *kind;         /* "static", "probed", "probed-perf" */
    kl_truth truth;
    char why[160];
    char shape[128];          /* kl_skill_match_site: where it was decided — "" for a static
                                 condition; "bench {rows=8192, cols=8192}" for a speed condition;
                                 for a correctness condition the first check shape where it fails
                                 (or is unknown), else "every check shape and the bench shape" */
} kl_skill_check;

/* A card matched against a kernel. Release with kl_skill_match_release. */
typedef struct kl_skill_match_result {
    kl_truth truth;           /* FAILS if a check fails or a required transform is absent;
                                 else UNKNOWN if a check (or requires) is unknown; else HOLDS */
    kl_skill_check *checks;   /* every precondition with a predicate, in the card's order */
    unsigned nchecks;
    const char **missing;     /* required transforms not present (strings owned by the card) */
    unsigned nmissing;
    bool requires_unknown;    /* the card requires something and no present list was given */
    struct json_t *observables; /* kl_skill_match_site: the site's observables at the bench shape
                                   with the site's features over them (owned; NULL otherwise) */
} kl_skill_match_result;

/* Match a card: each precondition against env (as kl_predicate_eval), and `requires`
 * against the transforms present in the kernel (present[0..npresent); present NULL means
 * "not known": then requires counts as unknown). Conditions of kind "unexplained" (failures
 * no predicate explains) are not checks: read them from the card. The card's predicates were
 * validated when it was parsed, so this fails only when out of memory. */
kl_status kl_skill_match(const kl_skill *card, const struct json_t *env, const char *const *present,
                         unsigned npresent, kl_skill_match_result *out, kl_error *err);
void kl_skill_match_release(kl_skill_match_result *result); /* accepts NULL */

/* ---- forward: observables and matching at a candidate site --------------------------------- */

/* The observables of a site (docs/skill-card.md, "Observables"): the function `kernel`'s
 * statement at `line` (0: the function as a whole) in src, at `shape` of task — the static ones
 * (dtype, elem_bytes, access, loop_access, trip_known, reduction, atomics, dispatch, …) and,
 * with a task, the sizes by role at that shape (contiguous_extent, reduced_extent,
 * independent_rows, grid_blocks, block_threads, elements, bytes_moved, arithmetic_intensity).
 * task NULL: the static ones only; shape NULL: the task's bench shape. A new object on KL_OK
 * (json_decref). KL_ERR_NOT_FOUND when the file has no function `kernel`. */
kl_status kl_skill_observe(const kl_source *src, const kl_task *task, const kl_shape *shape, const char *kernel,
                           unsigned line, struct json_t **out, kl_error *err);

/* Whether function `fn` of src (a kernel, a __device__ helper through the kernels that call it;
 * host code always runs) runs when launch() is called at `shape` of task: 1 it runs, 0 not
 * known (a condition on the way cannot be decided), -1 it does not run there. */
int kl_skill_runs_at(const kl_source *src, const kl_task *task, const kl_shape *shape, const char *fn);

/* Whether name is one of the observables (docs/skill-card.md, "Observables"): a site feature
 * of the rules with the same name ("dtype") yields to the observable, in cards and in matching. */
bool kl_observable_name(const char *name);

/* A candidate site in a kernel file, as the rules rewriter reports an applicable site
 * (kl_rules_list: direction "applicable"). */
typedef struct kl_skill_site {
    const char *kernel;        /* the function the site is in (the rules' "kernel") */
    unsigned line;             /* its line (the rules' "line"); 0: the function as a whole */
    const char *features_json; /* the site's features as the rules report them (a JSON object), or NULL */
} kl_skill_site;

/* Match a card forward at a candidate site: every condition of the card is evaluated —
 *  - static ones on the site's own features (features_json) and its observables at the bench
 *    shape over them (an observable wins over a feature of the same name), and `extra` (named
 *    values the caller knows: the device's "arch", a user's features; may be NULL) over both;
 *  - speed conditions (probed-perf) at the task's bench shape;
 *  - correctness conditions (probed) at every check shape and the bench shape: one that fails
 *    anywhere fails, and its check names the shape;
 * and `requires` against present[0..npresent) (the transforms the kernel already has; present
 * NULL: not known, and a card that requires something is then unknown). Each check says holds,
 * fails or unknown and why; out->truth is FAILS if any fails, else UNKNOWN if any is unknown,
 * else HOLDS (unknown never passes as holds). out->observables holds the site's observables.
 * task may be NULL (then sizes by role are unknown). Release with kl_skill_match_release. */
kl_status kl_skill_match_site(const kl_skill *card, const kl_source *src, const kl_task *task,
                              const kl_skill_site *site, const struct json_t *extra, const char *const *present,
                              unsigned npresent, kl_skill_match_result *out, kl_error *err);

/* ---- merge and the library in the store -------------------------------------------------- */

/* Merge two cards of the same id (JSON texts) into a new one (*out: free()): evidence and
 * effects add up, risks are unioned, a precondition stays only where both agree, and a
 * precondition held by one and not the other is listed under "contradictions". */
kl_status kl_skill_merge(const char *a_json, const char *b_json, char **out, kl_error *err);

/* Put a card into the store (kind "skill", key its id), merging with a stored card of the
 * same id. The card is validated first (kl_skill_parse) and stored in the fixed key order.
 * A card from the same single lineage as the stored one replaces it. */
kl_status kl_skill_put(kl_store *store, const char *card_json, kl_error *err);

/* Get a card by id, or by a prefix of exactly one id. On KL_OK *out is owned by the caller
 * (kl_skill_free). KL_ERR_NOT_FOUND when nothing matches; KL_ERR_INVALID when the prefix is
 * ambiguous (the message lists the first few ids it matches). */
kl_status kl_skill_get(kl_store *store, const char *id_or_prefix, kl_skill **out, kl_error *err);

/* Every card in the store, sorted by transform then id. Owned by the caller
 * (kl_skill_list_release). A stored card that does not validate is an error naming it. */
typedef struct kl_skill_list {
    kl_skill **items;
    unsigned count;
} kl_skill_list;
#define KL_SKILL_LIST_INIT {NULL, 0}
kl_status kl_skill_list_load(kl_store *store, kl_skill_list *out, kl_error *err);
void kl_skill_list_release(kl_skill_list *list); /* accepts NULL */

/* The library as it would be without the lineages of task `task_name` (leave-one-out): every
 * card rebuilt from its stored parts (kind "skill-part") whose evidence.task is not task_name,
 * merged as kl_skill_put merges them; a card with no other part is left out; its admission
 * keeps only the trials on other tasks (the status recomputed from them). Exact: a card with
 * no part of that task is the stored card. The store is not modified. Sorted as
 * kl_skill_list_load. task_name NULL or "": the whole library. */
kl_status kl_skill_list_load_excluding(kl_store *store, const char *task_name, kl_skill_list *out, kl_error *err);

/* Keep only the cards whose admission.status is "admitted" (the others are freed). */
void kl_skill_list_keep_admitted(kl_skill_list *list);

/* ---- admission ------------------------------------------------------------------------------ */

/* The tolerance of a roundtrip: a trial reproduces a card when its gain is >= 1.0 and within
 * this factor of the effect the card recorded in that lineage (g / e in [1/1.25, 1.25]), or
 * above it. */
#define KL_ADMIT_TOLERANCE 1.25

/* A trial's verdict from its gain and the card's recorded gain (recorded <= 0: unknown, then
 * only g >= 1.0 counts): "reproduced" or "lost". */
const char *kl_admission_verdict(double gain, double recorded);

/* Store a card's admission (a JSON object {status, tolerance, date, trials: [{task, site, gain,
 * verdict, recorded, detail, key, own}]}; status is recomputed from the trials: "admitted" when
 * one reproduced the gain, "rejected" when trials were made and none did, "untried" when there
 * are none) beside the card (kind "skill-admission", key the id), and set it on the stored card.
 * It stays when the card's lineages are stored again. KL_ERR_NOT_FOUND for an unknown id. */
kl_status kl_skill_admission_put(kl_store *store, const char *id, const char *admission_json, kl_error *err);

/* Import a JSON file holding one card or an array of cards: every card is validated before
 * any is stored (errors name the file and the element: "cards.json: [2].risks[0].broke: …"),
 * then each is put (kl_skill_put) in one transaction: all land or none. *count: cards
 * imported; *merged (may be NULL): of those, how many met a stored card of the same id (and
 * merged with it, or replaced it when both come from the same single lineage). A card whose id
 * differs from another's (stored, or earlier in the file) only in case or punctuation, so that
 * both would be the same agent-skill folder ("Vec-4" and "vec_4"), is refused, naming both. */
kl_status kl_skill_import(kl_store *store, const char *path, unsigned *count, unsigned *merged, kl_error *err);
/* Delete the card with exactly this id and the parts it was merged from, in one transaction.
 * KL_ERR_NOT_FOUND when no card has that id. *parts (may be NULL): how many parts went with it. */
kl_status kl_skill_delete(kl_store *store, const char *id, unsigned *parts, kl_error *err);

/* ---- export -------------------------------------------------------------------------------- */

typedef enum kl_skill_format {
    KL_SKILL_FORMAT_JSON = 0,     /* one JSON array of cards, each in the fixed key order */
    KL_SKILL_FORMAT_MARKDOWN = 1, /* one document: a short index, then every card */
    KL_SKILL_FORMAT_AGENT = 2     /* one folder per card holding SKILL.md */
} kl_skill_format;
/* "json", "md" (or "markdown"), "agent-skills". KL_ERR_INVALID for another name. */
kl_status kl_skill_format_parse(const char *name, kl_skill_format *out, kl_error *err);

/* Render cards as one JSON array or one Markdown document. *out new string (free()).
 * KL_ERR_INVALID for KL_SKILL_FORMAT_AGENT (use kl_skills_write_agent). */
kl_status kl_skills_render(const kl_skill *const *cards, unsigned n, kl_skill_format format, char **out,
                           kl_error *err);
/* Write one folder per card under dir (created as needed): dir/<agent name>/SKILL.md. Two
 * cards whose agent names coincide are an error naming both. */
kl_status kl_skills_write_agent(const kl_skill *const *cards, unsigned n, const char *dir, kl_error *err);

#ifdef __cplusplus
}
#endif
#endif
