"""What each experiment taught, as Markdown paragraphs for RESULTS.md (kept with the code so that
regenerating RESULTS.md keeps them). Figures quoted here come from the committed results files
(``experiments/results/*.json``, from ``python experiments/run.py --quick``) and the commands named
next to them."""

NOTES: dict[str, list[str]] = {
    "allreduce": [
        "**The target is not met: median 9.8%, worst 45.9% over the 36 all-reduce rows.** The "
        "machine was quieter than in earlier runs but not quiet (load average 3–4 on 2 cores, "
        "most of it other jobs), and against the previous run minutes earlier the measured "
        "times moved by 5.6% per row (median; worst 39%): that is the floor under any model's "
        "error here. Every large-message row is predicted too fast; the small ones are close.",
        "**The hand-written ring now overlaps its two directions (fixed in `real/allreduce.py`).** "
        "Under Gloo a send moves no data until the peer has posted the matching receive (a "
        "\"receive ready\" notice travels back first). With 2 hosts both neighbours are the same "
        "peer on one TCP connection; the ring posted its receives after its sends, so a rank's "
        "megabytes could leave ahead of its own receive notice, and the peer's data waited for "
        "them: the directions took turns (4 MB at 50 Mbit/s: 1.33 s). Every receive is now posted "
        "before the sends that precede it on the wire, and the all-gather's first receives before "
        "the reduce-scatter's last sends: 745 ms, as the naive ring (743 ms) and Gloo's (769 ms). "
        "A raw Gloo isend-then-irecv exchange of 1–4 MB between two hosts shows the same "
        "turn-taking in about half the repeats; irecv-then-isend never did.",
        "**Small messages: the shaper's bucket, now modelled.** tbf lets a burst through at once "
        "and refills while the link idles, so a gap between rounds costs nothing until the "
        "bucket is full again. The model walks each algorithm's rounds (the simulator's round "
        "lists) through a token bucket of the configured burst (15 140 B at 50 Mbit/s, 25 000 B "
        "at 200 Mbit/s), refilled during the barrier before the call and each round's latency "
        "(`experiments/model.py`). For 64 kB between 2 hosts the plain α-β model was 6.5–9.1% "
        "slow at 50 Mbit/s and 21–33% slow at 200 Mbit/s on these very measurements; with the "
        "bucket +2.8…+4.6% and +2.8…+9.9%. With 4 hosts at 50 Mbit/s: −10.0…−1.0%.",
        "**Large messages: the model is fast, because a duplex exchange has a start-up cost the "
        "calibration measures but the model drops.** Between 2 hosts Gloo's own all-reduce of "
        "1–4 MB is predicted 0.4–9.7% fast; the hand-written ones 3–12%, and 17–23% at 1 MB and "
        "200 Mbit/s (more than the start-up explains: their Python wake-ups under load). The model uses the payload rate with "
        "both directions busy, measured by `experiments/duplex_probe.py` as the slope between "
        "2 MB and 16 MB exchanges (46.1 Mbit/s at 50, 186.8 at 200). The slope cancels a fixed "
        "part: the 2 MB exchange itself took 362 ms at 50 Mbit/s, 14.8 ms more than the slope "
        "gives (3.2 ms at 200 Mbit/s; 0.5–19 ms in earlier runs). The ring between 2 hosts at "
        "4 MB is two 2 MB exchanges: 2 × 362 = 724 ms against 745 ms measured and 694 ms "
        "predicted, and with 4 hosts at 50 Mbit/s all three algorithms are 7–14% fast, as the "
        "per-round start-up repeats in every round. It is not a fixed cost per message (64 kB "
        "rounds show none of it): a ramp (the hosts run BBR; with both directions busy a host's "
        "ACKs queue behind its own data, so each sender's round-trip estimate and pacing start "
        "off every exchange). Modelling it needs the duplex exchange time at the rounds' own "
        "sizes (the probe at 16 kB … 2 MB, network only), interpolated; not done yet.",
        "**4 hosts at 200 Mbit/s are CPU-bound: 8–46% fast.** Gloo's own (C++, segments "
        "pipelined in its own thread) is 8–15% slower than the network allows for ≥ 1 MB; the "
        "hand-written ring and naive ring (Python, a wake-up per round) 17–46%; 64 kB rows "
        "19–41%. Four ranks, their Gloo threads and the kernel work of four hosts' veths, bridge "
        "and shapers share 2 cores with other jobs; at 50 Mbit/s the same bed is within the "
        "start-up error above. A model needs a CPU term for communication (per-round wake-up "
        "under the run's load, and a per-byte kernel cost of all hosts together); the simulator "
        "has cores only for compute.",
    ],
    "sync": [
        "Sync SGD with `--model mlp` (0.94 MB of gradients, one bucket, Gloo's all-reduce): an "
        "iteration is compute (50 ms emulated, or ~2 ms of real CPU) plus one all-reduce. The "
        "simulator (calibrated network at the duplex rate, the single-process profile of the same "
        "model and batch, cores = 2 for real compute) is 2.4–8.0% fast, median 4.0%: the same sign "
        "and size as the all-reduce rows (the duplex start-up, and with 4 hosts the CPU). The "
        "measured all-reduce inside the step (`comm_time_s`) was 40 ms with 2 hosts and 64 ms "
        "with 4, against 40 ms and 60 ms in the model. The simulator's all-reduce has no token "
        "bucket (the lead's `dsgd_sim`; at 200 Mbit/s the bucket is worth ~1 ms a step).",
    ],
    "multinode": [
        "The multi-node path works on the test bed: four hosts, each running its own `torchrun` "
        "agent (`--nnodes 4 --rdzv-backend c10d --rdzv-endpoint host0:port`), rendezvous at "
        "host 0's store, and a sync run of 20 steps completes; its iteration time (114.5 ms) "
        "is that of the same run with ranks started directly (118.1 ms, the `sync` row) within "
        "their run-to-run noise, and 2.6% above the prediction. `tests/test_experiments.py` "
        "runs the same 4-host launch for 6 steps (about 20 s) where namespaces can be made.",
    ],
    "async": [
        "Async SGD through a parameter server (host 0 the server, `--emulate-compute 50ms`, mlp): "
        "the simulator's mean staleness matches the measurement exactly (0.99 with 2 workers, "
        "2.94 with 4: with constant compute the workers settle into a round robin, staleness "
        "R − 1 less the start-up), and its time per update is 7.4% fast with 2 workers and 18.5% "
        "fast with 4: the server's link and process carry every push and reply, and the "
        "4-worker bed runs 5 processes on 2 cores (the CPU-bound case of the all-reduce). "
        "Against sync SGD at the same rate (the sync experiment's emulated rows), async applies "
        "an update every 49 ms with 4 workers where sync steps every 118 ms with 4 replicas, but "
        "each async update is one worker's gradient, stale by ~3 versions, where a sync step "
        "averages four fresh ones.",
    ],
}
