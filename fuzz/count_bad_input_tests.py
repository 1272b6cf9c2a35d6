#!/usr/bin/env python3
"""Count, per reader, the #[test] functions that assert a bad input's error or finding (docs/fuzzing.md,
"Count, before and after"). A function counts once however many inputs it tries; the fuzz replay
tests (tests/*/fuzz_regressions.rs) are left out: their inputs are counted from
tests/fuzz_regressions/ instead (the valid reference_layout and the corpus_* inputs, picked from
the fuzzers' corpora, left out). Run from the repository root."""
import glob
import re
bad=re.compile(r'unwrap_err\(|is_err\(\)|expect_err\(|\.err\(\)|status\.success\(\)\s*\)|!\s*[\w.()]*success\(\)|code\(\),\s*Some\([12]\)|Err\(|\.issues|findings|compliant\(\)|problems|refus|rule\s*==')
groups={
 'MLLOG parser + rule checker':['src/mllog/*.rs','src/rules/*.rs','tests/logs_rules/check_*.rs','tests/logs_rules/parser_props.rs','tests/logs_rules/closed_pipe.rs'],
 'run config (ResNet, BERT)':['src/train/config.rs','src/train/*/config.rs','src/train/bert.rs','tests/training/train_config.rs','tests/training/bench_configs.rs','tests/training/recipes.rs'],
 'score':['src/score/*.rs','tests/logs_rules/score_*.rs','tests/logs_rules/projection_fixtures.rs'],
 'package':['src/submission/package.rs','src/submission/result_sets.rs','src/submission/tree_check.rs','tests/logs_rules/package_*.rs'],
 'verify (tarball, manifest)':['src/submission/verify.rs','src/submission/manifest.rs','tests/logs_rules/verify_tamper.rs'],
 'JPEG header + region decoder':['src/data/imagenet/region.rs','src/data/imagenet/decode.rs','src/data/imagenet/loader.rs','tests/data/data_imagenet.rs'],
 'BERT HDF5 shards':['src/data/bert/mod.rs','tests/data/bert_data.rs'],
}
tot=0
for g,pats in groups.items():
    n=0
    for pat in pats:
        for f in sorted(set(glob.glob(pat))):
            src=open(f).read()
            if 'fuzz_regressions' in f:
                continue
            for p in re.split(r'#\[test\]',src)[1:]:
                body=p[:p.find('\n}\n')+3] if '\n}\n' in p else p
                if bad.search(body): n+=1
    print(f'{n:4d}  {g}'); tot+=n
print(f'{tot:4d}  total')
inputs = [
    p for p in glob.glob('tests/fuzz_regressions/*/*')
    if not p.endswith('.expect') and not p.endswith('reference_layout')
    and not p.rsplit('/', 1)[-1].startswith('corpus_')
]
print(f'{len(inputs):4d}  bad inputs replayed from tests/fuzz_regressions/')
