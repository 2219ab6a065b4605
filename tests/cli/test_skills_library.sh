#!/bin/bash
# docs/skills-library.md is the library the eight built-in lineages give: replay every walk
# from the archive into a fresh store, export the library as Markdown, and compare it with the
# file (below its generated-by comment). Replaying a second time must change nothing: storing
# a lineage's cards again is idempotent (docs/skill-card.md, "Merging").
set -u
: "${KLINEAGE:?}" "${KL_SOURCE_DIR:?}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/klineage-test-library-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export KLINEAGE_CACHE="$TMP/cache"
cd "$KL_SOURCE_DIR" || exit 1
fail() { echo "FAIL: $*" >&2; exit 1; }
tasks="transpose histogram reduce_sum softmax layernorm blur sgemm hgemm"
for t in $tasks; do
    "$KLINEAGE" --db "$TMP/lib.db" --measure replay lineage "tasks/$t" >"$TMP/$t.out" 2>&1 ||
        fail "lineage tasks/$t: exit $?: $(tail -3 "$TMP/$t.out")"
done
"$KLINEAGE" --db "$TMP/lib.db" skills export --format md >"$TMP/once.md" || fail "export: exit $?"
sed -n '/^# Skill library$/,$p' docs/skills-library.md >"$TMP/doc.md"
diff -u "$TMP/doc.md" "$TMP/once.md" >"$TMP/diff" ||
    fail "docs/skills-library.md is not the current library (regenerate it with the commands in its first lines):
$(head -40 "$TMP/diff")"
for t in transpose hgemm; do
    "$KLINEAGE" --db "$TMP/lib.db" --measure replay lineage "tasks/$t" >/dev/null 2>&1 || fail "second replay of $t"
done
"$KLINEAGE" --db "$TMP/lib.db" skills export --format md >"$TMP/twice.md" || fail "export: exit $?"
cmp -s "$TMP/once.md" "$TMP/twice.md" || fail "replaying again changed the library: $(diff "$TMP/once.md" "$TMP/twice.md" | head -10)"
echo ok
