import sys

from p2p_ops.cli import main

sys.exit(main())
