"""Run the official MLPerf Training checkers on many logs in one Python process.

Usage:
  python official_batch.py RULESET FILE...          compliance checker, one verdict per file
  python official_batch.py --seeds RULESET FILE...  seed checker over one result set

Compliance mode prints one JSON object per file: {"file": ..., "compliant": bool,
"crash": str|null}. Per file it does what `python -m mlperf_logging.compliance_checker
--usage training --ruleset RULESET FILE` does (a fresh checker starting from the ruleset's
common.yaml) without starting a new interpreter each time; an exception inside the checker
counts as FAILED, as the command line tool then exits non-zero.

Seed mode prints {"errors": [...]}: the messages of package_checker's SeedChecker for the
files taken as one result set.
"""
import json
import logging
import sys

from mlperf_logging.compliance_checker import mlp_compliance


def check_one(path, ruleset):
    # The checker keeps its queue of rule files in a module-level list: reset it per file.
    mlp_compliance.enqueued_configs.clear()
    checker = mlp_compliance.make_checker('training', ruleset, False, False)
    try:
        ok, _, _, _ = mlp_compliance.main(path, f'training_{ruleset}/common.yaml', checker)
        return bool(ok), None
    except Exception as exc:  # the command line tool would die with a traceback: FAILED
        return False, f'{type(exc).__name__}: {exc}'


def check_seeds(ruleset, paths):
    import warnings
    from mlperf_logging.package_checker.seed_checker import SeedChecker
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        # The checker's own entry point only logs; its error list is what decides.
        return SeedChecker(ruleset)._assert_unique_seed_per_run(paths)


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    logging.disable(logging.CRITICAL)
    if args[0] == '--seeds':
        print(json.dumps({'errors': check_seeds(args[1], args[2:])}))
        return
    ruleset = args[0]
    for path in args[1:]:
        ok, crash = check_one(path, ruleset)
        print(json.dumps({'file': path, 'compliant': ok, 'crash': crash}), flush=True)


if __name__ == '__main__':
    main()
