#!/usr/bin/env bash
# Coverage-guided fuzzing of mlperf-run's readers (cargo-fuzz / libFuzzer; docs/fuzzing.md).
#
#   scripts/fuzz.sh build                   build every target (one instrumented build)
#   scripts/fuzz.sh seed [TARGET...]        (re)write the seed corpora under fuzz/corpus/
#   scripts/fuzz.sh run TARGET [SECONDS]    build (incremental; FUZZ_NO_BUILD=1 skips it), seed
#                                           if empty, then fuzz TARGET (default 1800 s or
#                                           1,000,000 executions, whichever comes first)
#   scripts/fuzz.sh all [SECONDS]           build, then run every target in turn
#   scripts/fuzz.sh list                    the targets
#
# One fuzzer at a time, one job (-jobs/-workers are not used). Crashes, hangs (> 10 s) and
# out-of-memory inputs (> 2 GB) land in fuzz/artifacts/TARGET/; a fixed one is kept as a
# regression case under tests/fuzz_regressions/TARGET/, which `cargo test --release` replays.
# The log of each run is fuzz/logs/TARGET.log (libFuzzer's final `cov:`/`ft:` line and
# executions are at its end). Extra libFuzzer flags (after the defaults, so they win):
# FUZZ_ARGS="-max_len=4096 ...".
#
# Needs: the nightly toolchain (`rustup toolchain install nightly`), cargo-fuzz (installed here
# from crates.io when missing), clang (the JPEG C shim is compiled with ASan/UBSan by clang:
# installed with apt-get when missing) and what `scripts/setup.sh` sets up (libtorch, HDF5).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck disable=SC1091
source scripts/setup.sh >/dev/null 2>&1 || true

TARGETS=(mllog_rules run_config verify_tarball jpeg_region bert_shard score_package)
FIXTURES="${MLPERF_RESULTS_FIXTURES:-$ROOT/../shared/fixtures/mlperf-results}"
BIN_DIR="$ROOT/fuzz/target/x86_64-unknown-linux-gnu/release"
SEP=$'\x1e'

need_tools() {
    if ! cargo +nightly --version >/dev/null 2>&1; then
        echo "fuzz.sh: the nightly toolchain is missing: rustup toolchain install nightly" >&2
        exit 1
    fi
    if ! command -v cargo-fuzz >/dev/null 2>&1; then
        echo "fuzz.sh: installing cargo-fuzz" >&2
        cargo install cargo-fuzz
    fi
    if ! command -v clang >/dev/null 2>&1; then
        echo "fuzz.sh: installing clang (for the sanitized JPEG shim)" >&2
        apt-get update -qq && apt-get install -y -qq clang
    fi
}

build() {
    need_tools
    # MLPERF_RUN_SANITIZE=1: build.rs compiles shim/jpeg_region.c with clang, ASan, UBSan and
    # libFuzzer's coverage. -O -a: optimised, with debug assertions and overflow checks.
    MLPERF_RUN_SANITIZE=1 cargo +nightly fuzz build -O -a
}

# Write bytes: a first byte (printf escape) then the files given, joined with 0x1E.
seed_file() {
    local out="$1" first="$2"
    shift 2
    {
        printf "$first"
        local i=0
        for f in "$@"; do
            [ $i -gt 0 ] && printf '%s' "$SEP"
            cat "$f"
            i=$((i + 1))
        done
    } >"$out"
}

# A log cut to its first 150 and last 40 lines (the header keys, and the end with run_stop).
short_log() {
    { awk 'NR <= 150' "$1"; tail -n 40 "$1"; } | awk '!seen[$0]++'
}

seed() {
    local target="$1" dir="$ROOT/fuzz/corpus/$1" tmp
    mkdir -p "$dir"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' RETURN
    case "$target" in
    mllog_rules)
        cp "$ROOT"/fuzz/seeds/mllog_rules/* "$dir/"
        if [ -d "$FIXTURES" ]; then
            local n=0
            while IFS= read -r f; do
                short_log "$f" >"$tmp/log"
                seed_file "$dir/fixture_$n" '\x00' "$tmp/log"
                n=$((n + 1))
            done < <(find "$FIXTURES" -name 'result_*.txt' | sort | awk 'NR % 3 == 1')
            # three logs of one set, checked together
            mapfile -t set < <(find "$FIXTURES" -path '*resnet/result_*.txt' | sort | awk 'NR <= 3')
            for i in "${!set[@]}"; do short_log "${set[$i]}" >"$tmp/s$i"; done
            seed_file "$dir/fixture_set" '\x00' "$tmp"/s0 "$tmp"/s1 "$tmp"/s2
        fi
        ;;
    run_config)
        # first byte: bit 0 open division, bit 1 BERT
        for f in configs/resnet/*.toml; do
            seed_file "$dir/resnet_closed_$(basename "$f" .toml)" '\x00' "$f"
            seed_file "$dir/resnet_open_$(basename "$f" .toml)" '\x01' "$f"
        done
        for f in configs/bert/*.toml; do
            seed_file "$dir/bert_closed_$(basename "$f" .toml)" '\x02' "$f"
            seed_file "$dir/bert_open_$(basename "$f" .toml)" '\x03' "$f"
        done
        ;;
    score_package)
        # first byte: bit 0 BERT, bit 1 open, bit 2 a v3.1/ round folder, bit 3 two systems
        if [ -d "$FIXTURES" ]; then
            local n=0
            while IFS= read -r set_dir; do
                local first='\x00'
                case "$set_dir" in
                *bert) first='\x03' ;;
                *MosaicML*) first='\x02' ;;
                esac
                mapfile -t logs < <(find "$set_dir" -name 'result_*.txt' | sort)
                local short=()
                for i in "${!logs[@]}"; do
                    short_log "${logs[$i]}" >"$tmp/l$i"
                    short+=("$tmp/l$i")
                done
                seed_file "$dir/fixture_set_$n" "$first" "${short[@]}"
                n=$((n + 1))
            done < <(find "$FIXTURES" -name 'result_0.txt' -printf '%h\n' | sort)
        fi
        ;;
    verify_tarball)
        # manifest, 0x1E, a plain tar (the target gzips it; first byte bit 0 off), as package
        # writes them; bit 1: a .sha256 file beside; bit 2: also verify the unpacked folder
        mkdir -p "$tmp/t/Org/results/sys/resnet" "$tmp/t/Org/systems"
        printf 'a small log\n' >"$tmp/t/Org/results/sys/resnet/result_0.txt"
        printf '{"submitter": "Org"}\n' >"$tmp/t/Org/systems/sys.json"
        if [ -d "$FIXTURES" ]; then
            f="$(find "$FIXTURES" -path '*resnet/result_0.txt' | sort | awk 'NR == 1')"
            short_log "$f" | awk 'NR <= 40' >"$tmp/t/Org/results/sys/resnet/result_0.txt"
            s="$(find "$FIXTURES" -path '*systems/*.json' | sort | awk 'NR == 1')"
            cp "$s" "$tmp/t/Org/systems/sys.json"
        fi
        (cd "$tmp/t" && find Org -type f | sort | xargs sha256sum >"$tmp/manifest" &&
            tar --sort=name --owner=0 --group=0 --mtime=@0 -cf "$tmp/org.tar" Org)
        seed_file "$dir/package_tree" '\x00' "$tmp/manifest" "$tmp/org.tar"
        seed_file "$dir/package_tree_sha" '\x02' "$tmp/manifest" "$tmp/org.tar"
        seed_file "$dir/package_tree_folder" '\x06' "$tmp/manifest" "$tmp/org.tar"
        head -c 2000 "$tmp/org.tar" >"$tmp/cut.tar"
        seed_file "$dir/cut_tar" '\x04' "$tmp/manifest" "$tmp/cut.tar"
        ;;
    jpeg_region | bert_shard)
        cp "$ROOT"/fuzz/seeds/"$target"/* "$dir/"
        ;;
    *)
        echo "fuzz.sh: unknown target $target (${TARGETS[*]})" >&2
        exit 2
        ;;
    esac
    echo "fuzz.sh: $(find "$dir" -type f | wc -l) inputs in fuzz/corpus/$target"
}

run() {
    local target="$1" seconds="${2:-1800}"
    local bin="$BIN_DIR/$target"
    # an incremental build (seconds when nothing changed) so the current source is fuzzed
    if [ -z "${FUZZ_NO_BUILD:-}" ] || [ ! -x "$bin" ]; then
        build
    fi
    if [ -z "$(ls -A "fuzz/corpus/$target" 2>/dev/null)" ]; then
        seed "$target"
    fi
    mkdir -p "fuzz/artifacts/$target" fuzz/logs
    # build.rs's rpath to libtorch applies to mlperf-run's own binaries, not to the fuzz targets
    local torch_lib
    torch_lib="$("${MLPERF_RUN_PYTHON:-python3}" -c \
        'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
    export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # the C++ shims are compiled twice into the binary (ASan sees one definition rule
    # violations that are not bugs, as cargo fuzz itself says); leaks are not what we look for
    # (libtorch and lazily built tables keep memory to the end)
    export ASAN_OPTIONS="detect_odr_violation=0:detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
    local extra=()
    if [ "$target" = mllog_rules ] || [ "$target" = score_package ]; then
        extra+=(-dict=fuzz/mllog.dict)
    fi
    # input lengths as in docs/fuzzing.md's runs: whole fixture logs (30-140 KB) slow the log
    # targets to ~100 executions a second; bert_shard's inputs must grow past the default
    # length control's first tens of bytes to reach every dataset
    case "$target" in
    mllog_rules) extra+=(-max_len=16384) ;;
    score_package | verify_tarball) extra+=(-max_len=65536) ;;
    bert_shard) extra+=(-len_control=0 -max_len=400) ;;
    esac
    # -rss_limit_mb: OOM over 2 GB; -timeout: a hang over 10 s; -runs: 1M executions at most
    # shellcheck disable=SC2086
    "$bin" "fuzz/corpus/$target" "${extra[@]}" \
        -artifact_prefix="fuzz/artifacts/$target/" \
        -max_total_time="$seconds" -runs=1000000 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 ${FUZZ_ARGS:-} 2>&1 | tee "fuzz/logs/$target.log"
}

case "${1:-}" in
build) build ;;
seed)
    shift
    for t in "${@:-${TARGETS[@]}}"; do seed "$t"; done
    ;;
run)
    [ $# -ge 2 ] || {
        echo "usage: scripts/fuzz.sh run TARGET [SECONDS]" >&2
        exit 2
    }
    run "$2" "${3:-1800}"
    ;;
all)
    build
    for t in "${TARGETS[@]}"; do
        run "$t" "${2:-1800}" || echo "fuzz.sh: $t stopped on a finding (fuzz/artifacts/$t/)" >&2
    done
    ;;
list) printf '%s\n' "${TARGETS[@]}" ;;
*)
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
