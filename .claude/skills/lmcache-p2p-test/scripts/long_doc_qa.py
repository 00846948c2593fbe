#!/usr/bin/env python3
"""Long-doc-qa: documents warmed on one node, queried from another; --with-lmcache-bench adds the real `lmcache bench engine --workload long-doc-qa` (p2pctl test longdoc). Exit 0 PASS, 1 FAIL, 2 could not run."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _p2pctl import exec_p2pctl  # noqa: E402

exec_p2pctl('test', 'longdoc')
