"""Experiments: named configurations run on the test bed and predicted by the simulator.

``configs`` (what is run), ``measure`` (running it on the test bed), ``model`` (predictions from
the calibration), ``fidelity`` (prediction against measurement), ``report`` (RESULTS.md, plots),
``notes`` (what was learned; how, in ``LOG.md``), ``grids`` (many stored grids' rows by kind),
``run.py`` (the command line).
"""
