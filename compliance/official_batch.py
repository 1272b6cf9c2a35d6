"""Run the official MLPerf Training compliance checker on many logs in one process.

Usage: python official_batch.py RULESET FILE...

Prints one JSON object per file: {"file": ..., "compliant": bool, "crash": str|null}.
Per file it does what `python -m mlperf_logging.compliance_checker --usage training
--ruleset RULESET FILE` does (a fresh checker, the ruleset's common.yaml) but without
starting a new interpreter each time. An exception inside the checker counts as FAILED,
as the command line tool then exits non-zero.
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


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    logging.disable(logging.CRITICAL)
    ruleset = sys.argv[1]
    for path in sys.argv[2:]:
        ok, crash = check_one(path, ruleset)
        print(json.dumps({'file': path, 'compliant': ok, 'crash': crash}), flush=True)


if __name__ == '__main__':
    main()
