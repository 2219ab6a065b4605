#!/bin/bash
# klineage skills: import → list → show → export (json, md, agent-skills) → import again,
# each rendering against the goldens of tests/data/skills/golden; match against a kernel;
# errors exit 1 and usage errors exit 2.
set -u
: "${KLINEAGE:?}" "${KL_SOURCE_DIR:?}"
DATA="$KL_SOURCE_DIR/tests/data/skills"
GOLD="$DATA/golden"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/klineage-test-skills-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export KLINEAGE_CACHE="$TMP/cache"
DB="$TMP/k.db"
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# run NAME EXPECTED_EXIT ARGS...: output in $TMP/NAME.out and $TMP/NAME.err
run() {
    local name=$1 want=$2
    shift 2
    "$KLINEAGE" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
    local got=$?
    if [ "$got" != "$want" ]; then
        fail "$name: exit $got, expected $want"
        sed 's/^/    /' "$TMP/$name.out" "$TMP/$name.err" >&2
    fi
}
expect() { # expect NAME STREAM TEXT
    grep -qF -- "$3" "$TMP/$1.$2" || fail "$1: $2 lacks: $3"
}
same() { # same WANT_FILE GOT_FILE WHAT
    diff -u "$1" "$2" >"$TMP/diff" 2>&1 || {
        fail "$3 differs from $1"
        head -20 "$TMP/diff" >&2
    }
}

# an empty library: nothing on stdout, and no store is created by reading
run empty 0 --db "$DB" skills list
[ -s "$TMP/empty.out" ] && fail "empty: printed on stdout"
expect empty err "no skills in $DB yet"
[ -e "$DB" ] && fail "empty: 'skills list' created $DB"
run empty_show 1 --db "$DB" skills show vectorize
expect empty_show err "does not exist"

# import: one card per file; the second smem-pad card merges with the first
run imp1 0 --db "$DB" skills import "$DATA/vectorize.json"
expect imp1 out "imported 1 skill card into $DB"
run imp2 0 --db "$DB" skills import "$DATA/unroll.json"
run imp3 0 --db "$DB" skills import "$DATA/smem-pad-a.json"
run imp4 0 --db "$DB" skills import "$DATA/smem-pad-b.json"
expect imp4 out "(1 met a stored card of the same id and merged with it)"

# a broken array: the error names the file, the element and the key; nothing lands
cat >"$TMP/bad.json" <<'EOF'
[{"id": "ok-1", "transform": "t"},
 {"id": "bad-2", "transform": "t", "preconditions": [{"predicate": "cols % 4 = 0", "kind": "probed"}]}]
EOF
run bad 1 --db "$DB" skills import "$TMP/bad.json"
expect bad err "error: $TMP/bad.json: [1].preconditions[0].predicate: \"cols % 4 = 0\": column 10: expected an operator (== != < <= > >=)"
printf '{"id": "x", "transform": "t", "risks": [{"broke": "oops"}]}' >"$TMP/bad2.json"
run bad2 1 --db "$DB" skills import "$TMP/bad2.json"
expect bad2 err "error: $TMP/bad2.json: risks[0].broke: \"oops\" is not one of wrong, slower, crash, compile"
run bad3 1 --db "$DB" skills import "$TMP/missing.json"
expect bad3 err "$TMP/missing.json"

# list: sorted by transform then id, one line each
run list 0 --db "$DB" skills list
[ "$(wc -l <"$TMP/list.out")" = 4 ] || fail "list: expected a header and 3 lines"
head -1 "$TMP/list.out" | grep -q '^ID  *TRANSFORM  *CONDITIONS  *GAIN  *BEST PROBE  *RISKS  *LINEAGES  *ADMISSION$' ||
    fail "list: header: $(head -1 "$TMP/list.out")"
sed -n 2p "$TMP/list.out" | grep -q '^smem-pad-7c21e9 *smem-pad *1 *2.05x *- *1 (1 slower) *2 *untried  (contradictions)$' ||
    fail "list: smem-pad line: $(sed -n 2p "$TMP/list.out")"
sed -n 3p "$TMP/list.out" | grep -q '^unroll-9b41d0 *unroll *2 *1.18x *- *0 *1 *untried$' ||
    fail "list: unroll line: $(sed -n 3p "$TMP/list.out")"
sed -n 4p "$TMP/list.out" | grep -q '^vectorize-3fa2c1 *vectorize *3 (2 probed) *1.62x *1.21x *2 (1 slower) *1 *untried$' ||
    fail "list: vectorize line: $(sed -n 4p "$TMP/list.out")"
grep -q "ok-1\|bad-2" "$TMP/list.out" && fail "list: a card of the broken import landed"
run list_json 0 --db "$DB" skills list --json
[ "$(grep -c '"id":' "$TMP/list_json.out")" = 3 ] || fail "list --json: expected 3 ids"
expect list_json out '"gain": 1.62,'
expect list_json out '"contradictions": 1,'

# show: the goldens, by id and by a unique prefix
run show_v 0 --db "$DB" skills show vectorize-3fa2c1
same "$GOLD/vectorize.md" "$TMP/show_v.out" "show vectorize-3fa2c1"
run show_u 0 --db "$DB" skills show unr
same "$GOLD/unroll.md" "$TMP/show_u.out" "show unr"
run show_m 0 --db "$DB" skills show smem-pad
same "$GOLD/smem-pad-merged.md" "$TMP/show_m.out" "show smem-pad (merged)"
run show_j 0 --db "$DB" --json skills show vectorize
same "$GOLD/vectorize.json" "$TMP/show_j.out" "show --json vectorize"
run show_none 1 --db "$DB" skills show nothing-here
expect show_none err "error: no skill \"nothing-here\" in the store"

# export: md and json to stdout or a file, agent-skills to a folder
run exp_md 0 --db "$DB" skills export
same "$GOLD/library.md" "$TMP/exp_md.out" "export (md)"
run exp_json 0 --db "$DB" skills export --format json -o "$TMP/lib.json"
same "$GOLD/library.json" "$TMP/lib.json" "export --format json -o"
expect exp_json err "wrote 3 skills to $TMP/lib.json"
run exp_agent 0 --db "$DB" skills export --format=agent-skills -o "$TMP/agent"
for s in smem-pad-7c21e9:smem-pad-merged unroll-9b41d0:unroll vectorize-3fa2c1:vectorize; do
    dir=${s%%:*} stem=${s##*:}
    if [ -f "$TMP/agent/$dir/SKILL.md" ]; then
        same "$GOLD/$stem.SKILL.md" "$TMP/agent/$dir/SKILL.md" "agent-skills $dir/SKILL.md"
        head -1 "$TMP/agent/$dir/SKILL.md" | grep -qx -- '---' || fail "$dir/SKILL.md: no front matter"
        sed -n 2p "$TMP/agent/$dir/SKILL.md" | grep -qx "name: $dir" || fail "$dir/SKILL.md: name is not $dir"
        sed -n 3p "$TMP/agent/$dir/SKILL.md" | grep -q '^description: "' || fail "$dir/SKILL.md: no description"
    else
        fail "agent-skills: $TMP/agent/$dir/SKILL.md missing"
    fi
done
[ "$(ls "$TMP/agent" | wc -l)" = 3 ] || fail "agent-skills: expected 3 folders"

# the JSON export imports into a fresh store and exports the same again
run reimp 0 --db "$TMP/k2.db" skills import "$TMP/lib.json"
expect reimp out "imported 3 skill cards"
run reexp 0 --db "$TMP/k2.db" skills export --format json
same "$TMP/lib.json" "$TMP/reexp.out" "export after import of an export"

# an ambiguous prefix lists what it begins
sed 's/"unroll-9b41d0"/"unroll-000aaa"/' "$DATA/unroll.json" >"$TMP/u2.json"
run imp_u2 0 --db "$TMP/k2.db" skills import "$TMP/u2.json"
run ambiguous 1 --db "$TMP/k2.db" skills show unroll
expect ambiguous err "skill \"unroll\" is ambiguous: it begins unroll-000aaa, unroll-9b41d0"

# match: sizes from the task's bench shape, --shape over it, --features over all
TASK="$KL_SOURCE_DIR/tests/data/tasks/vadd"
cat >"$TMP/match.json" <<'EOF'
[{"id": "vec4-000001", "transform": "vec4", "intent": "float4 loads",
  "preconditions": [{"predicate": "n % 4 == 0", "kind": "static"}]},
 {"id": "tail-000004", "transform": "tail", "intent": "correct only on multiples of 4",
  "preconditions": [{"predicate": "n % 4 == 0", "kind": "probed"}]},
 {"id": "big-000002", "transform": "big", "intent": "only for big inputs",
  "preconditions": [{"predicate": "n >= 65536", "kind": "probed-perf"},
                    {"predicate": "occupancy_hint == \"high\"", "kind": "static"}]},
 {"id": "after-000003", "transform": "after", "intent": "needs another first",
  "requires": ["no-such-transform"]}]
EOF
run imp_m 0 --db "$TMP/m.db" skills import "$TMP/match.json"
run match 0 --db "$TMP/m.db" skills match "$TASK/naive.cu" --task "$TASK"
expect match out "$TASK/naive.cu: 4 skills: 1 hold, 1 unknown, 2 fail"
# a correctness condition is checked at every check shape: the first that breaks it is named
grep -q '^fails  *tail-000004 .*n % 4 == 0 fails at check\[0\] {n=1} (n = 1, n % 4 = 1)' "$TMP/match.out" ||
    fail "match: tail does not fail at the check shape n=1"
grep -q '^holds  *vec4-000001  *at kernel ' "$TMP/match.out" || fail "match: vec4 does not hold"
grep -q '^unknown  *big-000002 .*occupancy_hint == "high" unknown (occupancy_hint is not in the environment)' \
    "$TMP/match.out" || fail "match: big is not unknown for occupancy_hint"
grep -q '^fails  *after-000003 .*needs no-such-transform first (not present)' "$TMP/match.out" ||
    fail "match: after does not fail on requires"
run match_shape 0 --db "$TMP/m.db" skills match "$TASK/naive.cu" --task "$TASK" --shape n=1021
grep -q '^fails  *vec4-000001 .*n % 4 == 0 fails (n = 1021, n % 4 = 1)' "$TMP/match_shape.out" ||
    fail "match --shape n=1021: vec4 does not fail"
printf '{"occupancy_hint": "high"}' >"$TMP/feat.json"
run match_feat 0 --db "$TMP/m.db" --json skills match "$TASK/naive.cu" --task "$TASK" --features "$TMP/feat.json"
tr -d ' \n' <"$TMP/match_feat.out" | grep -q '"id":"big-000002","transform":"big","result":"holds"' ||
    fail "match --features: big does not hold"
expect match_feat out '"sizes": {'
# without a task: only the sizes given
run match_bare 0 --db "$TMP/m.db" skills match "$TASK/naive.cu" --shape n=64
grep -q '^holds  *vec4-000001' "$TMP/match_bare.out" || fail "match without a task: vec4 does not hold at n=64"
grep -q '^fails  *big-000002 .*n >= 65536 fails (n = 64)' "$TMP/match_bare.out" ||
    fail "match without a task: big does not fail at n=64"
run match_badsize 2 --db "$TMP/m.db" skills match "$TASK/naive.cu" --task "$TASK" --shape rows=3
expect match_badsize err "--shape: \"rows\" is not a size of task vadd"
run match_badshape 2 --db "$TMP/m.db" skills match "$TASK/naive.cu" --shape n=big
expect match_badshape err "--shape: n: expected an integer, not \"big\""
printf '[1]' >"$TMP/feat_bad.json"
run match_badfeat 1 --db "$TMP/m.db" skills match "$TASK/naive.cu" --features "$TMP/feat_bad.json"
expect match_badfeat err "expected an object of named values"
run match_nofile 1 --db "$TMP/m.db" skills match "$TMP/none.cu"

# admit: without a task (and no stored lineage naming one) there is nothing to admit on
: >"$TMP/empty.jsonl"
run admit_none 1 --db "$TMP/a.db" --measure replay skills admit --archive "$TMP/empty.jsonl"
expect admit_none err "no task to admit on: give --task DIR"
run admit_usage 2 --db "$TMP/a.db" skills admit --max-other lots
expect admit_usage err "--max-other takes a count (0 to 16), not 'lots'"
run admit_usage2 2 --db "$TMP/a.db" skills admit extra
# --admitted: none of the imported cards was admitted
run list_admitted 0 --db "$DB" skills list --admitted
[ -s "$TMP/list_admitted.out" ] && fail "list --admitted: printed cards that were never admitted"
expect list_admitted err "admitted yet"

# usage errors
run usage1 2 --db "$DB" skills
run usage2 2 --db "$DB" skills frobnicate
expect usage2 err "unknown action 'frobnicate'"
run usage3 2 --db "$DB" skills show
run usage4 2 --db "$DB" skills show a b
run usage5 2 --db "$DB" skills list extra
run usage6 2 --db "$DB" skills export --format yaml
expect usage6 err "unknown format \"yaml\""
run usage7 2 --db "$DB" skills export --format agent-skills
expect usage7 err "give the destination with -o DIR"
run usage8 2 --db "$DB" skills import
run usage9 2 --db "$DB" skills match
run usage10 2 --db "$DB" skills list --frob
expect usage10 err "unknown option '--frob'"

# --help is the block of docs/cli/skills.md
run help 0 skills --help
sed -n '/^<!-- help -->/,/^<!-- \/help -->/p' "$KL_SOURCE_DIR/docs/cli/skills.md" | grep -v '^<!--' | grep -v '^```' \
    >"$TMP/help.want"
same "$TMP/help.want" "$TMP/help.out" "skills --help"

if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)" >&2
    exit 1
fi
echo "ok"
