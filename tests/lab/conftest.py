from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
# the real Slurm test cluster of the lifecycle tests (one slurmd per node, by pid)
sys.path.insert(0, str(Path(__file__).parents[1] / "lifecycle"))
