"""An emulated cluster on one machine: hosts in network namespaces, links capped by ``tc tbf``.

Each host is a Linux network namespace with one link to a shared bridge; the link is shaped to a
rate in both directions, so real processes talking real TCP (Gloo, MPI) find the network the
bottleneck, as on a cluster. Commands run on every host at once, each with its own hostname and
environment, so a multi-node launch works exactly as on real machines::

    sudo python -m real.testbed run --hosts 2 --bandwidth 100Mbps -- \\
        torchrun --nnodes {hosts} --nproc-per-node 1 --rdzv-backend c10d \\
                 --rdzv-endpoint {master}:{port} --rdzv-id demo script.py
    sudo python -m real.testbed calibrate --bandwidth 100Mbps --json calibration.json
    sudo python -m real.testbed cleanup        # leftovers of a test bed whose process was killed

From Python (what experiments use)::

    from real.testbed import Testbed, TestbedConfig
    with Testbed(TestbedConfig(hosts=4, bandwidth_bps=100e6)) as bed:
        result = bed.run("python script.py --rank {rank}", timeout_s=600)

``Testbed`` keeps the hosts' output folder (a new temporary one unless given);
``scratch_testbed(config)`` removes it with the test bed.

Modules: ``config`` (what a test bed is), ``network`` (namespaces, links, shapers, cleanup),
``launch`` (commands on hosts, output), ``bed`` (the ``Testbed`` that ties them together),
``probe`` and ``calibrate`` (measuring the network), ``timeline`` (where a program's time went,
as a Chrome trace, off unless started); ``sequence.py`` runs a host's scripts one
after another as forks of one interpreter that imported torch once. Needs root, iproute2 and
util-linux.
"""

from real.testbed.bed import Host, Testbed, scratch_testbed, signals_raise
from real.testbed.config import TestbedConfig
from real.testbed.launch import HostResult, RunResult
from real.testbed.network import TestbedError, unavailable_reason

__all__ = ["Host", "HostResult", "RunResult", "Testbed", "TestbedConfig", "TestbedError",
           "scratch_testbed", "signals_raise", "unavailable_reason"]
