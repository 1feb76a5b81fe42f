"""The real `scorecli` with short store deadlines, for tests of stores that stall
(tests/test_store_faults.py):

    python -m tests.store_cli STALL_SECONDS DEADLINE score ...

A store request that moves no byte for STALL_SECONDS fails, and no store operation starts another
attempt DEADLINE seconds after its first (`scorecli.io.schemes`; 30 s and 60 s in a real run).
"""

from __future__ import annotations

import sys

from scorecli.cli import main
from scorecli.io import schemes

if __name__ == "__main__":
    schemes.STALL_SECONDS = float(sys.argv.pop(1))
    schemes.DEADLINE = float(sys.argv.pop(1))
    sys.argv[0] = "scorecli"
    main()
