import sys

from gcpo_core.cli import main

sys.exit(main())
