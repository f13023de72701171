import sys

from numbatune.cli import main

sys.exit(main())
