"""``python -m agora_optimizer.executor.worker``: the command every backend runs (:mod:`.worker`)."""

import sys

from agora_optimizer.executor.worker.worker import main

sys.exit(main())
