"""What each experiment taught, as Markdown paragraphs for RESULTS.md (kept with the code so that
regenerating RESULTS.md keeps them). Figures quoted here come from the committed results files
(``experiments/results/*.json``) and the commands named next to them."""

NOTES: dict[str, list[str]] = {
    "allreduce": [
        "**The target is not met, and on this machine it cannot yet be checked.** The measurement "
        "itself does not repeat to 3%: three quick runs of the same configurations minutes apart "
        "(load average 5–12 on 2 cores, from other jobs) moved by 12.7% and then 10.3% per row "
        "(median; worst 76% and 161%: the *Repeatability* line above is the latest pair). Even the "
        "calibration moved: the one-way TCP payload rate at 200 Mbit/s was 190.8, 173.6 and "
        "191.1 Mbit/s in three runs. A model cannot be held to 3% against a measurement that moves "
        "by 10%; the rows above are single quick runs, so their errors include that noise.",
        "**The errors are one-sided: the model is fast.** 32 of 36 rows are predicted too short. "
        "Where the network should be the bottleneck, Gloo's own all-reduce of ≥ 1 MB at "
        "50 Mbit/s, the model is 2.6–16.5% fast in this run (5.4–9.8% in the previous one), and "
        "Gloo's 4 MB between 2 hosts at 200 Mbit/s 6.3% fast (2.3% before). The inputs that got "
        "it there, none fitted to an all-reduce: the payload rate after Ethernet/IP/TCP headers "
        "(tbf charges them: 0.956 of the rate one way), and the payload rate with both "
        "directions busy at once, measured by `experiments/duplex_probe.py` on the quiet 2-host "
        "calibration bed: at 50 Mbit/s 46.2 Mbit/s (0.924 of the rate) against 47.8 Mbit/s one "
        "way. A host in a ring sends and receives at once, so its uplink also carries the ACKs "
        "of what it receives (one 66-byte frame per two 1514-byte segments: 2.2%) and those ACKs "
        "queue behind its own data, slowing the peer's ACK clock (another ~1% with the hosts' "
        "BBR congestion control). Raw TCP shows it too: 4 MB each way between 2 hosts at "
        "50 Mbit/s took 0.668 s one way and 0.69–0.78 s both ways (5 repeats). What is left "
        "(5–15%) grows with the hosts and the machine's load, which points at the CPU below.",
        "**Where the CPU is the bottleneck, the model is 20–60% fast.** The test bed's links, "
        "bridge and shapers are kernel work on the same 2 cores as the ranks, the other jobs, "
        "and the Python loops of the hand-written algorithms. At 200 Mbit/s with 4 hosts every "
        "algorithm is slower than the network allows (Gloo's 4 MB: 319 ms against 260 ms; the "
        "hand-written ring's 1 MB: 177 ms against 65 ms). The error grows with the number of "
        "message steps: each step needs its process scheduled, and on a machine with load 10 "
        "on 2 cores a wake-up costs milliseconds (the calibration's Gloo round trip had "
        "p10 0.15 ms and p90 4.2 ms in one run). What a model would need: the per-step wake-up "
        "delay under the run's load (a Gloo ping-pong on the same test bed just before the run, "
        "not the quiet 2-host calibration), and a CPU ceiling on the bytes all hosts move at "
        "once (a transfer over an unshaped link measures it). Neither is in the model yet.",
        "**The hand-written ring does not overlap its two directions on 2 hosts.** With p = 2 it "
        "moves the same bytes as the naive ring (n each way) but takes twice as long (4 MB at "
        "50 Mbit/s: 1.36 s against 0.785 s naive and 0.766 s for Gloo's); with 4 hosts it is as "
        "fast as Gloo's. The model (2(p−1) rounds of n/p) cannot see this; it is a property of "
        "the implementation (both neighbours are the same peer, and the pipelined sends and "
        "receives to one peer appear to serialise), worth fixing in `real/allreduce.py` rather "
        "than modelling.",
        "Small messages (64 kB) cost 2–30 ms and are dominated by the per-step cost, not the "
        "rate: the model's Gloo latency (60–70 µs, measured on an idle moment) is too small "
        "when the machine is busy and the burst of the shaper (15–25 kB pass at once) is not "
        "modelled; errors there go both ways (−33% … +30%).",
    ],
    "async": [
        "Async SGD through a parameter server (host 0 the server, `--emulate-compute 50ms`, mlp): "
        "the simulator's mean staleness matches the measurement exactly (0.99 with 2 workers, "
        "2.94 with 4: with constant compute the workers settle into a round robin, staleness "
        "R − 1 less the start-up), and its time per update is 10% fast with 2 workers and 22% "
        "fast with 4, the same CPU-bound shortfall as the all-reduce: the server's link and "
        "process carry every push and reply, and the 4-worker bed runs 5 processes on 2 cores. "
        "Against sync SGD at the same rate (the sync experiment's emulated rows), async applies "
        "an update every 52 ms with 4 workers where sync steps every 156 ms with 4 replicas, but "
        "each async update is one worker's gradient, stale by ~3 versions, where a sync step "
        "averages four fresh ones.",
    ],
    "sync": [
        "Sync SGD with `--model mlp` (0.94 MB of gradients, one bucket, Gloo's all-reduce): the "
        "iteration is compute (50 ms emulated, or ~5 ms of real CPU) plus one all-reduce. With "
        "2 replicas the simulator (calibrated network, the single-process profile of the same "
        "model and batch, cores = 2 for real compute) is 7–19% fast; with 4 replicas at "
        "200 Mbit/s 27% fast (32–41% in the previous run), for the reason the all-reduce "
        "experiment shows: 4 hosts at 200 Mbit/s are CPU-bound on this machine (exposed "
        "communication measured 96–121 ms in two runs against 60–65 ms on the network alone). Emulated compute is no help there: the "
        "sleep frees the CPU for the compute, not for the network.",
    ],
}
