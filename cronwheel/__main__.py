import sys

from cronwheel.cli import main

sys.exit(main())
