"""dsgd_sim: a SimPy discrete-event model of synchronous and asynchronous data-parallel SGD.

Start with ``python -m dsgd_sim --replicas 16 --bandwidth 10Gbps`` or, from Python::

    from dsgd_sim import ClusterConfig, SyncConfig, SyncSimulation, from_preset
    result = SyncSimulation(SyncConfig(ClusterConfig(16), from_preset("resnet50"))).run()
"""

from .cluster import ClusterConfig
from .parameter_server import AsyncConfig, AsyncSimulation
from .sync import SyncConfig, SyncResult, SyncSimulation
from .workload import Workload, from_preset, load_profile

__all__ = ["AsyncConfig", "AsyncSimulation", "ClusterConfig", "SyncConfig", "SyncResult", "SyncSimulation", "Workload",
           "from_preset", "load_profile"]
