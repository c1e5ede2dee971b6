"""vLLM's rules package: versioned switches (`rules`), defaults, estimates, KV pool, budget and messages.

`from vramctl.core.engines import vllm as V` keeps working: the names of the former `engines/vllm.py` module
are re-exported here.
"""

from vramctl.core.engines.vllm.messages import *  # noqa: F403
from vramctl.core.engines.vllm.rules import *  # noqa: F403
