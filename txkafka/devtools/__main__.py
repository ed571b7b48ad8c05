import sys

from txkafka.cli import run
from txkafka.devtools.cli import main

sys.exit(run(sys.argv[1:], main))
