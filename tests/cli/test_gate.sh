#!/usr/bin/env bash
# klineage gate and gpu info without a GPU: help = the doc page, usage errors, the no-GPU
# message, and replay end to end (a miss is "unmeasured"; a recorded verdict is served; every
# line printed says "[replay]").
set -u
KLINEAGE=${KLINEAGE:?set KLINEAGE to the klineage binary}
SRC=${KL_SOURCE_DIR:?set KL_SOURCE_DIR to the repository}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kl-gate-cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# run CMD…: sets rc, out (stdout), err (stderr)
run() {
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    out=$(cat "$tmp/out")
    err=$(cat "$tmp/err")
}
expect_rc() { # want what
    if [ "$rc" -eq "$1" ]; then ok "$2 (exit $rc)"; else fail "$2: exit $rc, expected $1; stdout: $out; stderr: $err"; fi
}
expect_in() { # haystack needle what
    case "$1" in *"$2"*) ok "$3" ;; *) fail "$3: '$2' not in: $1" ;; esac
}
# every non-empty line of the text starts with [replay]
all_replay() { # text what
    local bad
    bad=$(printf '%s\n' "$1" | grep -v '^$' | grep -v '^\[replay\] ' | head -3)
    if [ -z "$bad" ] && [ -n "$1" ]; then ok "$2: every line says [replay]"; else fail "$2: lines without [replay]: $bad"; fi
}

# ---- help is the doc page ------------------------------------------------------------------
for sub in gate gpu; do
    want=$(sed -n '/^<!-- help -->/,/^<!-- \/help -->/p' "$SRC/docs/cli/$sub.md" | grep -v '^<!--' | grep -v '^```')
    run "$KLINEAGE" "$sub" --help
    expect_rc 0 "$sub --help"
    if [ "$out" = "$want" ]; then ok "$sub --help is docs/cli/$sub.md"; else fail "$sub --help differs from docs/cli/$sub.md"; fi
done

# ---- usage ---------------------------------------------------------------------------------
task="$SRC/tests/gpu/tasks/vadd"
cand="$SRC/tests/gpu/cands/vadd/good.cu"
run "$KLINEAGE" gate;                                  expect_rc 2 "gate without arguments"
run "$KLINEAGE" gate "$task";                          expect_rc 2 "gate without a kernel file"
run "$KLINEAGE" gate "$task" "$cand" --bogus;          expect_rc 2 "gate with an unknown option"
run "$KLINEAGE" gate "$task" "$cand" --arch 90;        expect_rc 2 "gate --arch without sm_"
run "$KLINEAGE" gate "$task" "$cand" --timeout -1;     expect_rc 2 "gate --timeout -1"
run "$KLINEAGE" gate "$task" "$cand" --timeout;        expect_rc 2 "gate --timeout without a value"
run "$KLINEAGE" gpu;                                   expect_rc 2 "gpu without an action"
run "$KLINEAGE" gpu frobnicate;                        expect_rc 2 "gpu with an unknown action"
run "$KLINEAGE" --db "$tmp/db0" gate "$tmp/no-such-task" "$cand"
expect_rc 1 "gate on a missing task folder"
expect_in "$err" "no-such-task" "the missing task folder is named"

# ---- arguments are checked before any store is opened or created ---------------------------
mkdir -p "$tmp/cwd"
(cd "$tmp/cwd" && HOME="$tmp/home" XDG_DATA_HOME= KLINEAGE_DB= "$KLINEAGE" --measure replay gate "$task" /nope.cu \
    >"$tmp/out" 2>"$tmp/err")
rc=$?; out=$(cat "$tmp/out"); err=$(cat "$tmp/err")
expect_rc 1 "gate on a missing kernel file"
expect_in "$err" "/nope.cu: cannot read" "the missing kernel file is named"
if [ -z "$(ls -A "$tmp/cwd")" ] && [ ! -e "$tmp/home/.local/share/klineage/klineage.db" ]; then
    ok "nothing written for a command line that cannot run"
else
    fail "a store was written for a missing kernel file: $(ls -A "$tmp/cwd") $(ls -R "$tmp/home" 2>/dev/null)"
fi
run "$KLINEAGE" --db "$tmp/no-such-folder/k.db" gate "$task" "$cand"
expect_rc 1 "--db in a folder that does not exist"
expect_in "$err" "does not exist" "--db names the missing folder"
run "$KLINEAGE" --db "$tmp/no-such-folder/k.db" skills list
expect_rc 1 "skills list with --db in a folder that does not exist"

# ---- live without a GPU: measured now, or an error; no --measure: replay, said so ---------
if [ -d /proc/driver/nvidia/gpus ] || [ -e /dev/nvidia0 ]; then
    echo "skip: this machine has a GPU; the no-GPU messages are not tested here"
else
    run "$KLINEAGE" --db "$tmp/db1" --measure live gate "$task" "$cand"
    expect_rc 1 "--measure live gate without a GPU"
    expect_in "$err" "--measure live measures now" "live gate says it cannot measure now"
    run "$KLINEAGE" --db "$tmp/db1" --measure live gpu info
    expect_rc 1 "--measure live gpu info without a GPU"
    expect_in "$err" "--measure live measures now" "gpu info says it cannot measure now"
    run "$KLINEAGE" --db "$tmp/db1" --measure record gate "$task" "$cand" --archive "$tmp/rec.jsonl"
    expect_rc 1 "--measure record without a GPU"
    if [ -e "$tmp/rec.jsonl" ]; then fail "record without a GPU wrote an archive"; else ok "record without a GPU writes no archive"; fi
    case "$err" in *"recorded to"*) fail "record without a GPU claims it recorded" ;; *) ok "record without a GPU claims nothing" ;; esac
    # the default store is per user, never in the working folder
    (cd "$tmp/cwd" && HOME="$tmp/home" XDG_DATA_HOME= KLINEAGE_DB= "$KLINEAGE" gate "$task" "$cand" --archive "$tmp/none.jsonl" \
        >"$tmp/out" 2>"$tmp/err")
    rc=$?; out=$(cat "$tmp/out"); err=$(cat "$tmp/err")
    expect_rc 1 "no --measure without a GPU replays (no archive here)"
    expect_in "$err" "replaying recorded measurements" "no --measure without a GPU says it replays"
    if [ -z "$(ls -A "$tmp/cwd")" ] && [ -e "$tmp/home/.local/share/klineage/klineage.db" ]; then
        ok "the default store is ~/.local/share/klineage/klineage.db"
    else
        fail "the default store is not per user: cwd: $(ls -A "$tmp/cwd"); home: $(ls -R "$tmp/home" 2>/dev/null)"
    fi
    (cd "$tmp/cwd" && HOME="$tmp/home" XDG_DATA_HOME="$tmp/xdg" KLINEAGE_DB= "$KLINEAGE" gate "$task" "$cand" \
        --archive "$tmp/none.jsonl" >/dev/null 2>&1)
    if [ -e "$tmp/xdg/klineage/klineage.db" ]; then ok "\$XDG_DATA_HOME holds the default store"; else fail "\$XDG_DATA_HOME not used"; fi
fi

# ---- --compile-only: the same object check as the gate, and --json ---------------------------
cat >"$tmp/fake-nvcc" <<'SH'
#!/bin/sh
if [ "$1" = --version ]; then echo 'Cuda compilation tools, release 13.0, V13.0.88'; exit 0; fi
out=; src=; while [ $# -gt 0 ]; do case "$1" in -o) out=$2; shift ;; *.cu) src=$1 ;; esac; shift; done
# a shared object that calls what its source names after KL_CALLS (nvcc's part is faked)
calls=$(sed -n 's|.*KL_CALLS \([a-z_]*\).*|\1|p' "$src" | head -1)
printf 'int kl_shim_launch(void){%s return 0;} const char *kl_shim_abi(void){return "";}\n' \
    "${calls:+extern int $calls(const char *); $calls(\"x\");}" >"$out.c"
cc -shared -fPIC -x c "$out.c" -o "$out" && rm -f "$out.c"
SH
chmod +x "$tmp/fake-nvcc"
printf '// KL_CALLS system\n' >"$tmp/calls_system.cu"
KLINEAGE_NVCC="$tmp/fake-nvcc" KLINEAGE_CACHE="$tmp/cache" run "$KLINEAGE" gate --compile-only --arch sm_90 "$task" "$cand" "$tmp/calls_system.cu"
expect_rc 1 "compile-only with an object that calls system()"
expect_in "$out" "calls_system.cu: FAILED: the kernel's shared object calls system" "compile-only runs the object check"
expect_in "$out" "good.cu: ok" "a clean object compiles"
KLINEAGE_NVCC="$tmp/fake-nvcc" KLINEAGE_CACHE="$tmp/cache" run "$KLINEAGE" --json gate --compile-only --arch sm_90 "$task" "$cand" "$tmp/calls_system.cu"
expect_rc 1 "compile-only --json"
lines=$(printf '%s\n' "$out" | grep -c '^{')
if [ "$lines" -eq 2 ]; then ok "compile-only --json: one object per file"; else fail "compile-only --json: $out"; fi
expect_in "$out" '"ok":false' "compile-only --json says which failed"
expect_in "$out" "\"file\":\"$tmp/calls_system.cu\"" "compile-only --json names the file"

# ---- replay --------------------------------------------------------------------------------
archive="$tmp/archive/verdicts.jsonl"
mkdir -p "$tmp/archive"
device="Replay Test GPU"
toolchain_nvcc="13.0.88"
arch="sm_90"
gpu_doc="{\"format\":\"klineage-gpu-1\",\"key\":\"$device\",\"date\":\"2026-11-29T00:00:00Z\",\"device\":{\"name\":\"$device\",\"cc\":\"9.0\",\"sms\":132},\"ceilings\":{\"copy_gbs\":4000.0},\"toolchain\":{\"nvcc\":\"$toolchain_nvcc\",\"arch\":\"$arch\",\"text\":\"nvcc $toolchain_nvcc $arch\"}}"
printf '{"kind":"gpu","key":"%s","doc":%s}\n' "$device" "$gpu_doc" >"$archive"

run "$KLINEAGE" --measure replay --db "$tmp/db2" gate "$task" "$SRC/tests/gpu/cands/vadd/nope.cu" --archive "$archive"
expect_rc 1 "replay of a missing kernel file"

run "$KLINEAGE" --measure replay --db "$tmp/db2" gate "$task" "$cand" --archive "$archive"
expect_rc 1 "replay miss"
expect_in "$out" "UNMEASURED" "a replay miss is unmeasured"
all_replay "$out" "replay miss (stdout)"
all_replay "$err" "replay miss (stderr)"
key=$(printf '%s\n' "$out" "$err" | grep -o 'key [0-9a-f]\{64\}' | head -1 | cut -d' ' -f2)
if [ ${#key} -eq 64 ]; then ok "the miss names the verdict key"; else fail "no key in: $out $err"; fi

# record a verdict under that key; the CLI must print these figures back
median=0.125
base_median=0.3125
speedup=2.5
verdict="{\"format\":\"klineage-verdict-1\",\"key\":\"$key\",\"date\":\"2026-11-29T01:02:03Z\",\"pass\":true,\"failed_stage\":null,\"reason\":null,\"candidate\":{\"name\":\"/recorded/elsewhere/good.cu\"},\"baseline\":{\"name\":\"naive.cu\"},\"device\":{\"name\":\"$device\"},\"toolchain\":{\"nvcc\":\"$toolchain_nvcc\",\"arch\":\"$arch\",\"text\":\"nvcc $toolchain_nvcc $arch\"},\"stages\":{\"compile\":{\"ok\":true,\"cached\":false,\"seconds\":1.5,\"kernels\":[{\"name\":\"_Z9vadd_goodPKfS0_Pfi\",\"demangled\":\"vadd_good(float const*, float const*, float*, int)\",\"registers\":16,\"smem_static\":0,\"spill_stores\":0,\"spill_loads\":0,\"stack\":0}]},\"correct\":{\"ok\":true,\"trials\":[]},\"determinism\":{\"ok\":true,\"detail\":\"same bits\"},\"integrity\":{\"ok\":true,\"detail\":\"inputs unchanged\"},\"stream\":{\"ok\":true,\"detail\":\"complete\"},\"profile\":{\"ok\":true,\"timer\":\"cupti\",\"shape\":\"bench\",\"reps\":40,\"candidate\":{\"median_ms\":$median,\"q1_ms\":0.12,\"q3_ms\":0.13},\"baseline\":{\"name\":\"naive.cu\",\"median_ms\":$base_median},\"speedup\":$speedup},\"sanitize\":{\"skipped\":\"not asked for\"}}}"
printf '{"kind":"verdict","key":"%s","doc":%s}\n' "$key" "$verdict" >>"$archive"

run "$KLINEAGE" --measure replay --db "$tmp/db3" gate "$task" "$cand" --archive "$archive"
expect_rc 0 "replay hit"
all_replay "$out" "replay hit (stdout)"
all_replay "$err" "replay hit (stderr)"
expect_in "$out" "PASS" "the recorded verdict passes"
expect_in "$out" "median $median ms" "the recorded median is printed"
expect_in "$out" "${speedup}x" "the recorded speedup is printed"
expect_in "$out" "$device" "the recorded device is named"
expect_in "$out" "(recorded)" "the verdict says it was recorded"
expect_in "$out" "PASS $cand on task" "replay names the file given, not the one recorded"
for stage in compile correct determinism integrity stream profile sanitize; do
    expect_in "$out" "$stage" "stage $stage has a line"
done

# the archive found through $KLINEAGE_ARCHIVE, and --json on one line
KLINEAGE_ARCHIVE="$archive" run "$KLINEAGE" --measure replay --db "$tmp/db4" gate "$task" "$cand" --json
expect_rc 0 "replay hit through \$KLINEAGE_ARCHIVE, --json"
expect_in "$out" '"replayed":true' "the JSON says replayed"
lines=$(printf '%s\n' "$out" | grep -c .)
if [ "$lines" -eq 1 ]; then ok "replayed JSON is one line"; else fail "replayed JSON has $lines lines"; fi

# a different candidate: unmeasured again, never another kernel's verdict
run "$KLINEAGE" --measure replay --db "$tmp/db4" gate "$task" "$SRC/tests/gpu/cands/vadd/skips_work.cu" --archive "$archive"
expect_rc 1 "replay of another kernel"
expect_in "$out" "UNMEASURED" "another kernel is unmeasured"

# the recorded device
run "$KLINEAGE" --measure replay --db "$tmp/db5" gpu info --archive "$archive"
expect_rc 0 "replay gpu info"
expect_in "$out" "$device" "gpu info shows the recorded device"
all_replay "$out" "replay gpu info"

# no archive
run "$KLINEAGE" --measure replay --db "$tmp/db6" gate "$task" "$cand" --archive "$tmp/none.jsonl"
expect_rc 1 "replay without an archive"
expect_in "$err" "no archive" "replay says there is no archive"
all_replay "$err" "replay without an archive"

# two devices recorded: --device chooses
printf '{"kind":"gpu","key":"Other GPU","doc":%s}\n' "$gpu_doc" >>"$archive"
run "$KLINEAGE" --measure replay --db "$tmp/db7" gate "$task" "$cand" --archive "$archive"
expect_rc 1 "replay with two devices and no --device"
expect_in "$err" "--device" "two devices: asks for --device"
run "$KLINEAGE" --measure replay --db "$tmp/db7" gate "$task" "$cand" --archive "$archive" --device "$device"
expect_rc 0 "replay with --device"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "all passed"
