#!/usr/bin/env bash
# Runs sluice and its peers on the same data in one go and prints the results.
#
#   image pipeline:   sluice bench bench/specs/imagenet_bench.yaml (synthetic images,
#                     bench/gen_data.py) and photos_bench.yaml / photos_auto_bench.yaml
#                     (real pictures cut from gnome-backgrounds, bench/gen_photos.py;
#                     exact decode / `scale: auto`), each
#                     vs the torch DataLoader (bench/peers/torch_imagenet.py)
#                     vs a plain libjpeg-turbo decode loop (decode_only_bench);
#                     and photos_rst_bench.yaml / photos_rst_auto_bench.yaml: the
#                     same pictures rewritten by `jpegtran -restart 1B -optimize`
#                     (lossless; the restart-interval window decode), vs the
#                     decode loop on those files and on the originals
#   tabular pipeline: sluice bench bench/specs/criteo_bench.yaml
#                     vs Python/numpy (bench/peers/numpy_criteo.py)
#
# Each figure is the median of REPEATS rounds; a round runs every benchmark
# once. The table goes to stdout and to RESULTS; the raw outputs stay in OUT.
# Every `sluice bench` runs under bench/rusage.py, so the table also gives its
# peak RSS, system-time share and minor page faults per image.
# Data is generated on first use.
#
# Usage: bench/run.sh [--quick] [--no-build]
#   --quick     one repeat, short runs: checks the harness, not for figures
#   --no-build  measure the sluice binary as it is
# Environment (defaults):
#   SLUICE_BENCH_DATA=/tmp/sluice-bench-data   data directory
#   SLUICE_BUILD_DIR=build                      build directory (relative to the repo)
#   SLUICE=$SLUICE_BUILD_DIR/bin/sluice         the sluice binary to measure
#   SLUICE_BENCH_OUT=$SLUICE_BENCH_DATA/out     raw outputs
#   SLUICE_BENCH_RESULTS=bench/results.md       the Markdown table
#   REPEATS=3  SECONDS_PER_RUN=10  IMAGES=2000  ROWS=500000  JOBS=2  CHECK=1
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=/usr/bin/python3

quick=0
build=1
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --no-build) build=0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option '$arg' (--quick, --no-build)" >&2; exit 2 ;;
  esac
done

DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
BUILD=${SLUICE_BUILD_DIR:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
SLUICE=${SLUICE:-$BUILD/bin/sluice}
OUT=${SLUICE_BENCH_OUT:-$DATA/out}
RESULTS=${SLUICE_BENCH_RESULTS:-$ROOT/bench/results.md}
REPEATS=${REPEATS:-3}
SECS=${SECONDS_PER_RUN:-10}
IMAGES=${IMAGES:-2000}
ROWS=${ROWS:-500000}
JOBS=${JOBS:-2}
CHECK=${CHECK:-1}
TORCH_BATCHES=20
DECODE_MIN_TIME=3
if [ "$quick" = 1 ]; then
  REPEATS=1 SECS=3 TORCH_BATCHES=2 DECODE_MIN_TIME=0.5
fi
export SLUICE_BENCH_DATA="$DATA"

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
start=$(date +%s)

# --- packages: the peers need Debian's torch, torchvision and PIL -----------
if ! $PY -c 'import numpy, torch, torchvision, PIL' 2>/dev/null; then
  log "installing the peers' packages (scripts/setup --bench --no-build)"
  scripts/setup --bench --no-build
fi

# --- binaries ----------------------------------------------------------------
mkdir -p "$OUT"
rm -rf "$OUT"/*.json "$OUT"/*.txt "$OUT"/*.status "$OUT"/*.log "$OUT/criteo_npy"
if [ "$build" = 1 ] && [ "$SLUICE" = "$BUILD/bin/sluice" ]; then
  if [ ! -f "$BUILD/build.ninja" ]; then
    log "configuring $BUILD"
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_C_COMPILER=clang-19 \
      -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld \
      -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld >"$OUT/cmake.log" 2>&1 ||
      log "warning: cmake failed, see $OUT/cmake.log"
  fi
  log "building sluice in $BUILD (-j$JOBS)"
  ninja -C "$BUILD" -j"$JOBS" sluice >"$OUT/build.log" 2>&1 ||
    log "warning: building sluice failed (see $OUT/build.log); its rows will say so"
fi
# The decode loop uses only TurboJPEG and Google Benchmark: build it here, on
# its own, so that it never depends on the state of the rest of the tree.
DECODE=$OUT/decode_only_bench
clang++-19 -O2 -std=c++17 -fuse-ld=lld bench/decode_only_bench.cpp \
  -o "$DECODE" -lturbojpeg -lbenchmark -lpthread

# --- data --------------------------------------------------------------------
have() { # have images|criteo COUNT: the manifest says that part exists at that size
  $PY - "$DATA/manifest.json" "$1" "$2" <<'EOF' 2>/dev/null
import json, sys
m = json.load(open(sys.argv[1]))
key, n = sys.argv[2], int(sys.argv[3])
ok = (m["imagenet"]["images"] == n) if key == "images" else (m["criteo"]["rows"] == n)
sys.exit(0 if ok else 1)
EOF
}
for part in images criteo; do
  n=$IMAGES; [ "$part" = criteo ] && n=$ROWS
  if ! have "$part" "$n"; then
    log "generating $part data in $DATA"
    $PY bench/gen_data.py --out "$DATA" --images "$IMAGES" --rows "$ROWS" \
      --only "$part" >/dev/null
  fi
done
if ! $PY -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["images"] != int(sys.argv[2]))' \
    "$DATA/photos/manifest.json" "$IMAGES" 2>/dev/null; then
  log "cutting $IMAGES real pictures into $DATA/photos (bench/gen_photos.py)"
  rm -rf "$DATA/photos"
  $PY bench/gen_photos.py --out "$DATA" --images "$IMAGES" >/dev/null
fi
# The same pictures with a restart marker after every MCU, written by
# Debian's jpegtran (lossless), made again whenever the pictures were.
if [ ! -f "$DATA/photos_rst/stamp" ] ||
    [ "$DATA/photos/manifest.json" -nt "$DATA/photos_rst/stamp" ]; then
  log "rewriting the real pictures with restart markers into $DATA/photos_rst (jpegtran)"
  rm -rf "$DATA/photos_rst"
  $PY tests/tools/jpegtran_copy.py "$DATA/photos/train" "$DATA/photos_rst/train" \
    -restart 1B -optimize >/dev/null
  touch "$DATA/photos_rst/stamp"
fi
cp "$DATA/manifest.json" "$OUT/manifest.json"
cp "$DATA/photos/manifest.json" "$OUT/photos_manifest.json"
mkdir -p "$OUT/specs"
for s in imagenet photos photos_auto photos_rst photos_rst_auto criteo; do
  sed "s|/tmp/sluice-bench-data|$DATA|g" "bench/specs/${s}_bench.yaml" \
    >"$OUT/specs/${s}_bench.yaml"
done

# --- meta --------------------------------------------------------------------
cores=$(nproc)
version=$("$SLUICE" --version 2>/dev/null || echo "unavailable")
$PY - "$OUT/meta.json" <<EOF
import json, sys
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), "unknown CPU")
mem = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal"))
json.dump({"cpu": cpu, "cores": $cores, "memory_gib": round(mem / 1048576),
           "date": "$(date -u +%Y-%m-%d)", "sluice_version": "$version",
           "repeats": $REPEATS, "seconds_per_run": $SECS,
           "load_at_start": open("/proc/loadavg").read().split()[0],
           "command": "bench/run.sh$([ "$quick" = 1 ] && echo ' --quick')"},
          open(sys.argv[1], "w"), indent=2)
EOF
log "machine: $cores cores; data: $DATA; outputs: $OUT"

# --- the runs ----------------------------------------------------------------
# Round r runs every benchmark once, so that load from other work on the machine
# spreads over all contestants instead of hitting one of them.
sluice_ok=1
[ -x "$SLUICE" ] || { sluice_ok=0; echo "pending runtime (no $SLUICE)" >"$OUT/sluice.status"; }
sluice_bench() { # NAME ROUND: one `sluice bench`, or a status saying why not
  local name=$1 r=$2 rc=0 txt=$OUT/sluice_$1_$2.txt
  if [ "$sluice_ok" != 1 ]; then
    cp "$OUT/sluice.status" "$OUT/sluice_$name.status"
    return
  fi
  log "round $r: sluice bench $name (${SECS}s)"
  $PY bench/rusage.py "$OUT/rusage_sluice_$1_$2.json" "$SLUICE" bench \
    "$OUT/specs/${name}_bench.yaml" --seconds "$SECS" \
    --stats-json "$OUT/stats_sluice_$1_$2.json" >"$txt" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    mv "$txt" "${txt%.txt}.log"
    if grep -qi "not.*implemented\|not yet" "${txt%.txt}.log"; then
      echo "pending runtime" >"$OUT/sluice_$name.status"
    else
      echo "failed (exit $rc): $(grep -m1 error "${txt%.txt}.log" || tail -1 "${txt%.txt}.log")" \
        >"$OUT/sluice_$name.status"
    fi
    log "sluice bench $name: $(cat "$OUT/sluice_$name.status")"
  fi
}

decode_loop() { # SET ROUND: the decode-only loop on $DATA/SET/train
  local set=$1 r=$2
  log "round $r/$REPEATS: decode-only loop on $set"
  "$DECODE" "$DATA/$set/train" --benchmark_min_time="$DECODE_MIN_TIME" \
    --benchmark_format=json --benchmark_out="$OUT/decode_${set}_$r.json" \
    >"$OUT/decode_${set}_$r.log" 2>&1 ||
    log "warning: decode_only_bench failed on $set, see $OUT/decode_${set}_$r.log"
}

for r in $(seq "$REPEATS"); do
  log "round $r/$REPEATS: decode-only loop (1 and 2 threads)"
  "$DECODE" "$DATA/imagenet/train" --benchmark_min_time="$DECODE_MIN_TIME" \
    --benchmark_format=json --benchmark_out="$OUT/decode_only_$r.json" \
    >"$OUT/decode_only_$r.log" 2>&1 ||
    log "warning: decode_only_bench failed, see $OUT/decode_only_$r.log"
  sluice_bench imagenet "$r"
  log "round $r/$REPEATS: torch DataLoader, num_workers 0..$cores"
  $PY bench/peers/torch_imagenet.py "$DATA/imagenet/train" --repeats 1 \
    --batches "$TORCH_BATCHES" --json "$OUT/torch_imagenet_$r.json" >&2 ||
    log "warning: torch_imagenet.py failed"
  # Real pictures: the decode loop, exact and `scale: auto`, and torch,
  # back to back so that they see the same load.
  decode_loop photos "$r"
  sluice_bench photos "$r"
  sluice_bench photos_auto "$r"
  decode_loop photos_rst "$r"
  sluice_bench photos_rst "$r"
  sluice_bench photos_rst_auto "$r"
  log "round $r/$REPEATS: torch DataLoader on the real pictures"
  $PY bench/peers/torch_imagenet.py "$DATA/photos/train" --repeats 1 \
    --batches "$TORCH_BATCHES" --json "$OUT/torch_photos_$r.json" >&2 ||
    log "warning: torch_imagenet.py failed on the pictures"
  sluice_bench criteo "$r"
  log "round $r/$REPEATS: Python/numpy Criteo peers"
  $PY bench/peers/numpy_criteo.py "$DATA/criteo/day_*.tsv" --repeats 1 \
    --modes numpy,torch,python --json "$OUT/numpy_criteo_$r.json" >&2 ||
    log "warning: numpy_criteo.py failed"
done

if [ "$CHECK" = 1 ] && [ -x "$SLUICE" ] && ls "$OUT"/sluice_criteo_*.txt >/dev/null 2>&1; then
  log "checking sluice's Criteo output against numpy's"
  rm -rf "$OUT/criteo_npy"
  if "$SLUICE" run "$OUT/specs/criteo_bench.yaml" --sink "npy:$OUT/criteo_npy" --quiet \
      >"$OUT/criteo_check.txt" 2>&1; then
    $PY bench/peers/numpy_criteo.py "$DATA/criteo/day_*.tsv" --check-npy "$OUT/criteo_npy" \
      >>"$OUT/criteo_check.txt" 2>&1 || true
  fi
  rm -rf "$OUT/criteo_npy"
  tail -1 "$OUT/criteo_check.txt" >&2
fi

# --- report ------------------------------------------------------------------
$PY bench/report.py "$OUT" "$RESULTS"
log "done in $(($(date +%s) - start)) s; table written to $RESULTS"
