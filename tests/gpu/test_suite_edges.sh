#!/usr/bin/env bash
# The experts' fast paths at their edges, on a GPU: each task is copied with extra check shapes
# where the fast path (hgemm's wgmma kernel: K % 8 == 0 and N % 8 == 0; blur's register kernel:
# w % 4 == 0, k <= 7) meets partial block tiles, partial k tiles and images smaller than a block,
# and the expert is gated there with the sanitizer (no timing). Exits 1 on any rejection.
#   KLINEAGE=build/klineage KL_SOURCE_DIR=. tests/gpu/test_suite_edges.sh
# KL_EDGES_FILE_<task>=FILE.cu gates FILE.cu (a candidate expert) instead of the task's expert.
set -u
KLINEAGE=${KLINEAGE:?set KLINEAGE to the klineage binary}
SRC=${KL_SOURCE_DIR:?set KL_SOURCE_DIR to the repository}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kl-edges.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
# task ; check shapes as JSON
cases=(
  'hgemm;[{"M":200,"N":136,"K":72},{"M":129,"N":264,"K":8},{"M":1,"N":8,"K":16},{"M":300,"N":520,"K":1000},{"M":513,"N":776,"K":328},{"M":1000,"N":1032,"K":1096},{"M":64,"N":1024,"K":64}]'
  'blur;[{"h":37,"w":260,"k":7},{"h":16,"w":256,"k":7},{"h":17,"w":264,"k":5},{"h":300,"w":1028,"k":3},{"h":5,"w":8,"k":7},{"h":1,"w":4,"k":7},{"h":2050,"w":2052,"k":7},{"h":33,"w":516,"k":1}]'
)
for c in "${cases[@]}"; do
  IFS=';' read -r task shapes <<<"$c"
  d="$tmp/$task"
  cp -r "$SRC/tasks/$task" "$d" && rm -rf "$d/variants"
  python3 - "$d/task.json" "$shapes" <<'PY' || { echo "FAIL: $task: cannot write the task"; fail=1; continue; }
import json, sys
p, shapes = sys.argv[1], json.loads(sys.argv[2])
t = json.load(open(p))
t["name"] = t["name"] + "_edges"
t["shapes"]["check"] = shapes
json.dump(t, open(p, "w"), indent=1)
PY
  var="KL_EDGES_FILE_$task"
  file="$d/expert.cu"
  [ -n "${!var:-}" ] && file="$SRC/${!var}"
  out=$("$KLINEAGE" --db "$tmp/edges.db" --measure live gate "$d" "$file" --no-profile --sanitize 2>&1)
  if [ $? -eq 0 ]; then
    echo "ok: $task $(basename "$file") at $(echo "$shapes" | grep -o '{' | wc -l) edge shapes, sanitizer clean"
  else
    echo "FAIL: $task: $(echo "$out" | head -3)"
    fail=1
  fi
done
exit $fail
