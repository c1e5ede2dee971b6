"""vLLM's rules package, one module per concern:

- `rules`: `VllmRules`, every version switch of one vLLM release (the only module that compares vLLM versions);
- `scheduler`: the scheduler limits and CUDA-graph capture sizes by card and version;
- `defaults`: `VllmSettings`, the flags resolved with vLLM's defaults, and `validate` (what vLLM refuses);
- `estimates`: the activation peak, non-torch and CUDA-graph estimates and their calibration;
- `kv_manager`: the pool as vLLM's KV cache manager sees it (model view, bytes per block, LoRA slots, lengths);
- `budget`: the subtraction per pipeline stage and the verdict checks; `ledger`: the physical ledger;
- `explain`: the notes, warnings and utilisation trade; `hybrid`: the Mamba / linear-attention state term;
- `messages`: vLLM's wordings by version; `planner`: `plan_vllm` and `VllmEngine` (`EngineRules`).

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
