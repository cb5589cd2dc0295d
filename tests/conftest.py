"""Settings every test's child processes inherit."""

import os

# Open MPI's mpiexec will not start as root without these (tests often run as root in
# containers), nor start more ranks than the machine has cores (the tests start 4 on 2):
# the settings of Open MPI 4 and of Open MPI 5's runtime (PRRTE). MPICH, which
# ./install.sh installs, ignores them.
for name, value in [("OMPI_ALLOW_RUN_AS_ROOT", "1"), ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
                    ("OMPI_MCA_rmaps_base_oversubscribe", "1"),
                    ("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe")]:
    os.environ.setdefault(name, value)
