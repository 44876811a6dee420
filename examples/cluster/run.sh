#!/bin/sh
# Start a local 3-node Ray cluster on this machine (a head and 2 worker nodes, each with its own
# --temp-dir, every node on 127.0.0.1), run examples/cluster/plan.yaml on it in a scratch git
# repository, and stop the cluster (only its own processes: found by its temp dir, so another
# Ray on the machine is left alone).
#   examples/cluster/run.sh [DIR]      (DIR: where the scratch repository goes; default: a new temp dir)
# Needs `pip install 'team-orchestrator[ray]'` (team and ray on PATH).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=$("$here/../refactor/setup.sh" ${1:+"$1"} | head -n 1)
cp "$here/plan.yaml" "$dir/plan.yaml"
echo "results/" >> "$dir/.git/info/exclude"
tmp=$(mktemp -d /tmp/team-ray.XXXXXX)    # short: Ray's socket paths live under it
port=${TEAM_RAY_PORT:-6399}
# Ray's token authentication (docs/scale.md, step 2): a token left in ~/.ray by an embedded run would turn
# it on for this cluster's nodes; the example's nodes and lead all run here, on 127.0.0.1, without it.
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}

stop() {
    for sig in TERM KILL; do
        for f in /proc/[0-9]*/cmdline; do
            if grep -qF -- "$tmp/" "$f" 2>/dev/null; then
                pid=${f#/proc/}; kill -s "$sig" "${pid%/cmdline}" 2>/dev/null || true
            fi
        done
        sleep 1
    done
    rm -rf "$tmp"
}
trap stop EXIT

node() {  # node NAME ARGS...: start one node of the cluster
    name=$1; shift
    ray start --node-ip-address 127.0.0.1 --temp-dir "$tmp/$name" --node-name "$name" --num-cpus 2 \
        --disable-usage-stats "$@" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log" >&2; exit 1; }
}
echo "starting a head and 2 worker nodes on 127.0.0.1:$port ..."
node head --head --port "$port" --include-dashboard false
node w1 --address "127.0.0.1:$port" &
node w2 --address "127.0.0.1:$port" &
wait

cd "$dir"
status=0
team run plan.yaml --address "127.0.0.1:$port" || status=$?
echo
echo "the matrix report: $dir/results/matrix.txt; the refactor: git -C $dir log --oneline team/cluster-demo/integration"
exit $status
