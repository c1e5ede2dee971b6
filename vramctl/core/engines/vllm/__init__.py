"""vLLM's rules package: versioned switches (`rules`), defaults, estimates, KV pool, budget and messages.

`from vramctl.core.engines import vllm as V` keeps working: the names of the former `engines/vllm.py` module
are re-exported here.
"""

from vramctl.core.engines.vllm.messages import *  # noqa: F403
from vramctl.core.engines.vllm.rules import *  # noqa: F403
from vramctl.core.engines.vllm.scheduler import (
    apply_scheduler_caps as apply_scheduler_caps,
)
from vramctl.core.engines.vllm.scheduler import (
    default_capture_sizes as default_capture_sizes,
)
from vramctl.core.engines.vllm.scheduler import (
    default_max_capture_size as default_max_capture_size,
)
from vramctl.core.engines.vllm.scheduler import (
    default_scheduler_limits as default_scheduler_limits,
)
