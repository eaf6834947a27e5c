import sys

from annal.cli import main

sys.exit(main())
