#!/usr/bin/env bash
# The gate's corpus, on a GPU: a correct kernel passes, and each broken or cheating kernel is
# rejected at the right stage for the right reason. Prints a table; exits 1 on any miss.
#   KLINEAGE=build/klineage KL_SOURCE_DIR=. tests/gpu/test_gate_corpus.sh
set -u
KLINEAGE=${KLINEAGE:?set KLINEAGE to the klineage binary}
SRC=${KL_SOURCE_DIR:?set KL_SOURCE_DIR to the repository}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kl-corpus.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
db="$tmp/corpus.db"   # a fresh store: every verdict is judged now, none served from before

# task ; kernel file ; gate options ; expect pass/reject ; stage (regex) ; reason (regex, any case)
cases=(
  "vadd;tasks/vadd/naive.cu;;pass;;"
  "vadd;cands/vadd/good.cu;--sanitize;pass;;"
  "vadd;cands/vadd/fork_join.cu;;pass;;"
  "vadd;cands/vadd/off_by_one.cu;;reject;correct;unwritten"
  "vadd;cands/vadd/partial.cu;;reject;correct;unwritten"
  "vadd;cands/vadd/skips_work.cu;;reject;correct;unwritten"
  "vadd;cands/vadd/oob_far.cu;;reject;correct|determinism|integrity|stream;illegal (memory access|address)"
  "vadd;cands/vadd/oob_by_one.cu;--sanitize;reject;correct|integrity|sanitize;memcheck|out of bounds|invalid .*write|guard|canary|past the end"
  "vadd;cands/vadd/infinite_loop.cu;--timeout 20;reject;correct|determinism|integrity|stream|profile;timed out after 20"
  "vadd;cands/vadd/trap.cu;;reject;correct|determinism|integrity|stream;CUDA error.*sticky"
  "vadd;cands/vadd/other_stream.cu;;reject;stream|correct;stream|unwritten|not complete|pending"
  "vadd;cands/vadd/cached.cu;;reject;correct|determinism;wrong|differ|rel_l2|cache"
  "rowsum;tasks/rowsum/naive.cu;;pass;;"
  "rowsum;cands/rowsum/good.cu;--sanitize;pass;;"
  "rowsum;cands/rowsum/race.cu;--sanitize;reject;correct|determinism|sanitize;racecheck|hazard|race|wrong|differ"
  "rowsum;cands/rowsum/uninit_smem.cu;--sanitize;reject;correct|determinism|sanitize;initcheck|uninitiali|stale|wrong|differ"
  # hardening (issue 18): each class that got through before, with the stage that now stops it
  "vadd;cands/vadd/reads_past_end.cu;;pass;;"
  "vadd;cands/vadd/reads_past_end.cu;--sanitize;reject;sanitize;memcheck|out of bounds|invalid .*read"
  "vadd;cands/vadd/host_compute.cu;;reject;profile;no kernel ran"
  "vadd;cands/vadd/host_compute_decoy.cu;;reject;profile;on the host beyond"
  "vadd;cands/vadd/calls_system.cu;;reject;compile;calls system"
  "vadd;cands/vadd/escape.cu;;pass;;"
  "rowsum;cands/rowsum/uninit_accumulator.cu;;reject;correct|determinism;wrong|differ|rel_l2|nan"
  "rowsum;cands/rowsum/uninit_smem.cu;;reject;correct|determinism;wrong|differ|rel_l2|nan"
  "rowsum;cands/rowsum/race_partials.cu;--sanitize;reject;correct|determinism|sanitize;racecheck|hazard|race|wrong|differ"
  "mm;tasks/mm/naive.cu;;pass;;"
)
# escape.cu tries to remove this file (and to create another beside it): both must fail
victim=/tmp/kl-sandbox-victim created=/tmp/kl-sandbox-created
rm -f "$created"; echo keep >"$victim"


fails=0
printf '%-7s %-22s %-7s %-8s %-12s %6s  %s\n' task kernel want got stage secs reason
printf '%s\n' "-----------------------------------------------------------------------------------------------"
for c in "${cases[@]}"; do
    IFS=';' read -r task file opts want stage_re reason_re <<<"$c"
    start=$(date +%s%N)
    # shellcheck disable=SC2086
    "$KLINEAGE" --quiet --db "$db" gate "$SRC/tests/gpu/tasks/$task" "$SRC/tests/gpu/$file" $opts >"$tmp/out" 2>"$tmp/err"
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    secs="$((ms / 1000)).$((ms % 1000 / 100))"
    head=$(head -1 "$tmp/out")
    got=error stage="" reason=""
    if [[ $head == PASS* ]]; then
        got=pass
    elif [[ $head =~ ^REJECTED\ .*\ at\ ([a-z]+):\ (.*)$ ]]; then
        got=reject stage=${BASH_REMATCH[1]} reason=${BASH_REMATCH[2]}
    else
        reason=$(tail -1 "$tmp/err")
    fi
    verdict=ok
    if [ "$got" != "$want" ]; then
        verdict=MISS
    elif [ "$want" = reject ]; then
        [[ $stage =~ ^($stage_re)$ ]] || verdict=MISS
        shopt -s nocasematch
        [[ $reason =~ $reason_re ]] || verdict=MISS
        shopt -u nocasematch
    fi
    [ "$want" = pass ] && [ "$rc" -ne 0 ] && verdict=MISS
    [ "$want" = reject ] && [ "$rc" -ne 1 ] && verdict=MISS
    printf '%-7s %-22s %-7s %-8s %-12s %6s  %s%s\n' "$task" "$(basename "$file")" "$want" "$got" "${stage:--}" \
        "$secs" "$([ $verdict = MISS ] && echo 'MISS: ')" "${reason:0:110}"
    if [ $verdict = MISS ]; then
        fails=$((fails + 1))
        sed 's/^/    | /' "$tmp/out" "$tmp/err" | head -40
    fi
done
# KL_CORPUS_RECORD=1: the verdicts just made go to the archive (archive/verdicts.jsonl), one
# record call per (task, options), each served from this run's store (nothing judged again)
if [ "${KL_CORPUS_RECORD:-0}" = 1 ]; then
    declare -A groups=()
    for c in "${cases[@]}"; do
        IFS=';' read -r task file opts _ <<<"$c"
        groups["$task;$opts"]+=" $SRC/tests/gpu/$file"
    done
    for g in "${!groups[@]}"; do
        IFS=';' read -r task opts <<<"$g"
        # shellcheck disable=SC2086
        "$KLINEAGE" --quiet --db "$db" --measure record gate "$SRC/tests/gpu/tasks/$task" ${groups[$g]} $opts \
            >/dev/null 2>"$tmp/rec.err"
        grep -q "^error:" "$tmp/rec.err" && { echo "record $task $opts:"; cat "$tmp/rec.err"; }
    done
    echo "recorded to $SRC/archive/verdicts.jsonl"
fi

# the sandbox held: the file escape.cu tried to remove is there, the one it tried to create is not
if [ -f "$victim" ] && [ ! -e "$created" ]; then
    echo "sandbox: $victim untouched, $created not created"
else
    echo "MISS: sandbox: $victim removed or $created created by escape.cu"
    fails=$((fails + 1))
fi
rm -f "$victim" "$created"
# what the sandbox was on this machine (the verdicts' run.sandbox)
"$KLINEAGE" --quiet --db "$db" --json gate "$SRC/tests/gpu/tasks/vadd" "$SRC/tests/gpu/cands/vadd/escape.cu" 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print("sandbox in force:", json.dumps(d.get("run", {}).get("sandbox")))' ||
    echo "sandbox: the verdict could not be read back"
echo
if [ "$fails" -ne 0 ]; then
    echo "$fails of ${#cases[@]} verdicts were wrong"
    exit 1
fi
echo "all ${#cases[@]} verdicts right"
