"""python -m demo: serve the demo's GPU metrics until stopped (demo/metrics.py)."""

from __future__ import annotations

import sys

from demo import metrics

if __name__ == "__main__":
    sys.exit(metrics.serve())
