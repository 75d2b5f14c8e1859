import sys

from agora_optimizer.cli import main

sys.exit(main())
