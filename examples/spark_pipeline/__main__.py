"""`python -m examples.spark_pipeline [--workdir DIR] [--datasets N] [--events N]`."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from examples.spark_pipeline.pipeline import run_pipeline


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m examples.spark_pipeline")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a new temp dir")
    parser.add_argument("--datasets", type=int, default=4)
    parser.add_argument("--rows", type=int, default=20_000, help="rows per dataset")
    parser.add_argument("--events", type=int, default=500)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="spark-pipeline-"))
    result = run_pipeline(workdir, datasets=args.datasets, rows=args.rows, events=args.events)
    plot = result.plot or "none (pip install matplotlib for report.png)"
    print(f"report: {result.report}  plot: {plot}")


if __name__ == "__main__":
    main()
