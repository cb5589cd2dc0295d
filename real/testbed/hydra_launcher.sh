#!/bin/sh
# Hydra's (mpiexec's) "ssh" for a test bed: `hydra_launcher.sh [-x] hostI COMMAND` runs COMMAND on
# test-bed host I, i.e. in its network namespace with hostname hostI, instead of over ssh.
# Used as `mpiexec -launcher ssh -launcher-exec THIS -hosts host0,host1 …` on a test-bed host
# (TESTBED_RUN_ID, set by the test bed, names the namespaces).
set -eu
[ "$1" = "-x" ] && shift
host="$1"
shift
rank="${host#host}"
case "$rank" in
    ''|*[!0-9]*) echo "hydra_launcher.sh: '$host' is not a test-bed host (host0, host1, ...)" >&2; exit 2 ;;
esac
: "${TESTBED_RUN_ID:?hydra_launcher.sh runs inside a test bed (TESTBED_RUN_ID is not set)}"
# each host on its own core when the test bed pins them (TESTBED_HOST_CPUS: a core per host;
# taskset is util-linux's, as unshare is)
pin=""
if [ -n "${TESTBED_HOST_CPUS:-}" ]; then
    pin="taskset -c $(echo "$TESTBED_HOST_CPUS" | cut -d, -f$((rank + 1)))"
fi
exec $pin ip netns exec "dsgd-$TESTBED_RUN_ID-h$rank" unshare --uts -- \
    sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
