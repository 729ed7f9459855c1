"""`python -m agent ...`: run the GPU node agent."""

import sys

from agent.main import main

if __name__ == "__main__":
    sys.exit(main())
