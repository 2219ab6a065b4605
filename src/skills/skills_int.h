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

#endif
