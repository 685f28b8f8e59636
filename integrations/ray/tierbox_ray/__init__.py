"""Tierbox as the per-node sandbox runtime of a Ray cluster.

```python
import ray, tierbox_ray

ray.init()
tierbox_ray.init()                       # one Tierbox daemon per node offering "tierbox"
result = tierbox_ray.run(["python3", "-c", "print(6 * 7)"])
print(result.node_id, result.exit_code, result.stdout)
```

See docs/scale-out.md in the Tierbox repository.
"""

from .client import DaemonClient, TierboxError
from .node import TierboxNode
from .private import UnsafeTreeError
from .sandbox import (
    RESOURCE,
    ExecResult,
    Sandbox,
    TierboxNodeLost,
    TierboxPool,
    create,
    init,
    result,
    run,
    shutdown,
    submit,
    terminate,
    wait_for_nodes,
)

__all__ = [
    "RESOURCE",
    "DaemonClient",
    "ExecResult",
    "Sandbox",
    "TierboxError",
    "TierboxNode",
    "TierboxNodeLost",
    "TierboxPool",
    "UnsafeTreeError",
    "create",
    "init",
    "result",
    "run",
    "shutdown",
    "submit",
    "terminate",
    "wait_for_nodes",
]
