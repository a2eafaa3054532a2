import sys

from todo.cli import main

sys.exit(main())
