#!/usr/bin/env python3
"""Compare two MLPerf logs event by event, apart from what a clock or the source layout sets.

    mllog_diff.py BEFORE.txt AFTER.txt [--added-key KEY ...]

Dropped before comparing:
  - time_ms (the wall clock);
  - metadata.file and metadata.lineno (the Rust call site that wrote the event: a refactor moves
    code, so these change while the event does not);
  - the values of events that are measurements of time: durations and rates (TIMED_KEYS, and
    any metadata entry whose name ends in _ms, _s or _seconds).
Everything else (keys, order, event types, values, the rest of the metadata) must be equal.
--added-key KEY: events with this key that only AFTER has (a key the change adds on purpose)
are counted and left out of the comparison. Per pair of logs: where BEFORE already has events
of KEY (a preset that logged it before the change), they are compared as any other.
Exit 0 when equal, 1 (with the first differences) when not, 2 on unreadable input.
"""
import difflib
import json
import sys

PREFIX = ":::MLLOG "
# keys whose value is a duration or a rate: the same run measures them differently every time
TIMED_KEYS = {"tracked_stats", "throughput", "init_duration", "step_time"}


def normalise(path, drop=()):
    out = []
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        print(f"{path}: {e}", file=sys.stderr)
        sys.exit(2)
    for n, line in enumerate(lines, 1):
        i = line.find(PREFIX)
        if i < 0:
            continue
        try:
            ev = json.loads(line[i + len(PREFIX):])
        except json.JSONDecodeError as e:
            print(f"{path}:{n}: not a JSON event: {e}", file=sys.stderr)
            sys.exit(2)
        if ev.get("key") in drop:
            continue
        ev.pop("time_ms", None)
        meta = dict(ev.get("metadata") or {})
        meta.pop("file", None)
        meta.pop("lineno", None)
        for k in list(meta):
            if k.endswith(("_ms", "_s", "_seconds")):
                meta[k] = "<time>"
        ev["metadata"] = meta
        if ev.get("key") in TIMED_KEYS:
            ev["value"] = "<time>"
        out.append(json.dumps(ev, sort_keys=False))
    return out


def main():
    args = sys.argv[1:]
    added = []
    while "--added-key" in args:
        i = args.index("--added-key")
        added.append(args[i + 1])
        del args[i : i + 2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    before, after = args
    a = normalise(before)
    # keys BEFORE already logs are not added in this pair: compared as any other
    logged = {json.loads(e)["key"] for e in a}
    added = [k for k in added if k not in logged]
    b = normalise(after, drop=added)
    if added:
        n_after = len(normalise(after)) - len(b)
        print(f"  left out: {n_after} events of the added keys {added}")
    if a == b:
        return 0
    diff = list(difflib.unified_diff(a, b, before, after, lineterm="", n=1))
    print("\n".join(diff[:60]))
    if len(diff) > 60:
        print(f"... {len(diff) - 60} more diff lines")
    return 1


if __name__ == "__main__":
    sys.exit(main())
