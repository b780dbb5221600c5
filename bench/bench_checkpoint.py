"""Checkpoint benchmarks: `python bench/bench_checkpoint.py [--quick] [--json]`.

Each figure is measured in the same run as its baseline (memcpy, dd, direct S3 GET from a
SeaweedFS started here, boto3 download_file). See BENCHMARKS.md (Tiered checkpoints).
"""

from __future__ import annotations

import argparse
import json
import sys

from rackscale.checkpoint.bench import run_all


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes, for CI smoke")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON at the end")
    ap.add_argument("--only", default="stall,persist,restore",
                    help="comma-separated subset of: stall, persist, restore")
    args = ap.parse_args()
    res = run_all(quick=args.quick, log=lambda s: print(s, flush=True),
                  only=tuple(args.only.split(",")))
    if args.json:
        sys.stdout.write(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
