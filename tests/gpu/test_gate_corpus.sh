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
)

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
echo
if [ "$fails" -ne 0 ]; then
    echo "$fails of ${#cases[@]} verdicts were wrong"
    exit 1
fi
echo "all ${#cases[@]} verdicts right"
