#!/usr/bin/env bash
# Checks (or, for a dry run, synthesizes) the {{BENCHMARK}} data set folder for mlperf-run
# {{VERSION}} (see README.md).
# Usage: ./init_datasets.sh DATA_DIR          check a prepared data set
#        ./init_datasets.sh --synthetic DIR   write a tiny synthetic one (proves the pipeline only)
# ResNet: make DATA_DIR from the ILSVRC2012 tars with `mlperf-run data prepare-imagenet`
# (mlperf-run/docs/data.md); the message below gives the command when DATA_DIR is missing.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MLPERF_RUN="${MLPERF_RUN:-$HERE/mlperf-run/target/release/mlperf-run}"
if [ "${1:-}" = "--synthetic" ]; then
    out="${2:?usage: init_datasets.sh --synthetic DIR}"
    case "{{BENCHMARK}}" in
        resnet) "$MLPERF_RUN" data synth-imagenet --out "$out" --classes 10 --per-class 64 ;;
        bert) "$MLPERF_RUN" data synth-bert --out "$out" ;;
    esac
    exit 0
fi
DATADIR="${1:-${DATADIR:-/data/{{BENCHMARK}}}}"
fail() { echo "init_datasets.sh: $*" >&2; exit 1; }
how_to_prepare() {
    case "{{BENCHMARK}}" in
        resnet) echo "make it from the ILSVRC2012 tars with: $MLPERF_RUN data prepare-imagenet --train-tar ILSVRC2012_img_train.tar --val-tar ILSVRC2012_img_val.tar --val-labels LOC_val_solution.csv --out $DATADIR (rerun the same command to resume; see mlperf-run/docs/data.md)" ;;
        *) echo "prepare the {{BENCHMARK}} data set as the MLPerf reference describes" ;;
    esac
}
[ -d "$DATADIR" ] || fail "$DATADIR does not exist: $(how_to_prepare)"
case "{{BENCHMARK}}" in
    resnet)
        # ImageFolder layout: train/<wnid>/*.JPEG and val/<wnid>/*.JPEG
        for split in train val; do
            [ -d "$DATADIR/$split" ] || fail "$DATADIR/$split is missing (expected ImageFolder train/ and val/): $(how_to_prepare)"
        done
        echo "classes: $(find "$DATADIR/train" -mindepth 1 -maxdepth 1 -type d | wc -l) train, $(find "$DATADIR/val" -mindepth 1 -maxdepth 1 -type d | wc -l) val"
        ;;
    bert)
        # The reference HDF5 shards and the 10,000-sample eval set
        n=$(find "$DATADIR" -name '*.hdf5' -o -name '*.h5' | wc -l)
        [ "$n" -gt 0 ] || fail "no HDF5 shards (*.hdf5) under $DATADIR"
        echo "HDF5 shards: $n"
        ;;
esac
echo "init_datasets.sh: $DATADIR looks ready"
