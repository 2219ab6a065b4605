/* Private to src/skills: the card handle and small JSON helpers shared by its files. */
#ifndef KL_SKILLS_INT_H
#define KL_SKILLS_INT_H

#include <jansson.h>

#include "klineage/skills.h"
#include "util/util.h"

struct kl_skill {
    json_t *doc;              /* the validated card (owned) */
    const char *id, *transform, *intent; /* into doc */
};

/* The agent-skill folder name of a card id (kl_skill_agent_name without a card). */
void kl_sk_agent_name_of(const char *id, char *buf, size_t size);

/* A string member, "" when absent or not a string. */
const char *kl_sk_str(const json_t *o, const char *key);
/* A number member, dflt when absent or not a number. */
double kl_sk_num(const json_t *o, const char *key, double dflt);

/* "rows=3, cols=1023" for a shape object (members in their order), into sb. "" for none. */
void kl_sk_shape_text(kl_strbuf *sb, const json_t *shape);
/* At most the first 8 characters of a hash (a verdict), into buf (>= 9 bytes). */
void kl_sk_short_hash(const char *hash, char *buf, size_t size);
/* The lineages of a card's evidence joined with ", " (new string, free()); NULL when none. */
char *kl_sk_lineages_text(const json_t *card);

/* kl_skill_from_json with a prefix before every key path in messages ("[2]": "[2].risks[0]"). */
kl_status kl_sk_from_json_at(const json_t *doc, const char *origin, const char *prefix, kl_skill **out, kl_error *err);

/* A copy of the card's document in the fixed key order (json_decref). */
json_t *kl_sk_ordered(const kl_skill *card);

/* Merge the parts of one card (JSON texts, in key order) into one card's text (*out: free()). */
kl_status kl_sk_merge_parts(const char *const *texts, size_t n, const char *id, char **out, kl_error *err);

/* Set on *card_json (a card's text, replaced by a new one) the admission stored for id (kind
 * "skill-admission"), leaving out the trials on task `without` (NULL: none) and recomputing the
 * status; a card with no stored admission is left as it is. */
kl_status kl_sk_apply_admission(kl_store *store, const char *id, const char *without, char **card_json, kl_error *err);

/* Every stored document of a kind whose key starts with prefix (NULL: all), as parallel arrays of
 * keys and texts (both JSON arrays of strings; json_decref). */
kl_status kl_sk_collect(kl_store *store, const char *kind, const char *prefix, json_t **keys, json_t **texts,
                        kl_error *err);

#endif
