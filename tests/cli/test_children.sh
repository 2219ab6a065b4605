#!/bin/bash
# Children die with klineage, whatever stops it: `task check` (the reference's C compiler) and
# `gate --compile-only` (nvcc) are stopped with KILL, TERM and INT while a stand-in compiler
# runs, one that starts two more processes of its own (as nvcc starts cicc and ptxas, gcc cc1);
# none of the three may outlive klineage.
set -u
: "${KLINEAGE:?}" "${KL_SOURCE_DIR:?}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/klineage-test-children-XXXXXX")
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# alive PID: the process exists and is not a zombie (an orphan's zombie waits for PID 1)
alive() {
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

cleanup() {
    # whatever a failed case left: by process id, only ours
    if [ -f "$TMP/pids" ]; then
        while read -r pid _; do alive "$pid" && kill -KILL "$pid" 2>/dev/null; done <"$TMP/pids"
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

# The stand-in compiler: records its own pid and its two children's, then waits for them.
cat >"$TMP/slowcc" <<'EOF'
#!/bin/bash
case "$*" in *--version*) echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0;; esac
echo "$$" >>"$KL_TEST_PIDS"
sleep 600 &
echo "$!" >>"$KL_TEST_PIDS"
( sleep 600; true ) &
echo "$!" >>"$KL_TEST_PIDS"
wait
EOF
chmod +x "$TMP/slowcc"
export KL_TEST_PIDS="$TMP/pids"
S="$KL_SOURCE_DIR/tasks/softmax"

# case NAME SIGNAL: start klineage, wait for the stand-in's three processes, signal klineage,
# then give the children 10 s to be gone.
one_case() {
    local name=$1 sig=$2
    : >"$TMP/pids"
    export KLINEAGE_CACHE="$TMP/cache-$name-$sig" # nothing cached: the compiler must run
    set -m # a job of its own: a background job would otherwise ignore SIGINT
    case $name in
    task-check) CC="$TMP/slowcc" "$KLINEAGE" task check "$S" >"$TMP/out" 2>&1 & ;;
    compile-only)
        KLINEAGE_NVCC="$TMP/slowcc" "$KLINEAGE" --db "$TMP/k.db" --measure replay gate --compile-only "$S" \
            "$S/naive.cu" >"$TMP/out" 2>&1 &
        ;;
    esac
    local kpid=$!
    set +m
    local waited=0
    while [ "$(wc -l <"$TMP/pids")" -lt 3 ] && [ $waited -lt 600 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    if [ "$(wc -l <"$TMP/pids")" -lt 3 ]; then
        fail "$name/$sig: the stand-in compiler did not start within 60 s"
        sed 's/^/    /' "$TMP/out" >&2
        kill -KILL "$kpid" 2>/dev/null
        wait "$kpid" 2>/dev/null
        return
    fi
    kill "-$sig" "$kpid"
    wait "$kpid" 2>/dev/null
    local left="" pid
    for _ in $(seq 100); do
        left=""
        while read -r pid; do alive "$pid" && left="$left $pid"; done <"$TMP/pids"
        [ -z "$left" ] && break
        sleep 0.1
    done
    if [ -n "$left" ]; then
        fail "$name/$sig: still running 10 s after klineage was stopped:$left"
        ps -o pid,ppid,pgid,args -p "${left// /,}" >&2
    fi
    if [ "$sig" = KILL ] && ! grep -q . "$TMP/pids"; then fail "$name/$sig: no pid recorded"; fi
}

for sig in KILL TERM INT; do
    one_case task-check "$sig"
    one_case compile-only "$sig"
done

if [ $failures -gt 0 ]; then
    echo "$failures failure(s)" >&2
    exit 1
fi
echo "ok: no compiler outlived klineage (task check and gate --compile-only; KILL, TERM, INT)"
