#!/bin/bash
# A real single-machine Kubernetes control plane for the fleet scenario: etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler from tests/crio-real/build.sh, on 127.0.0.1.
#
#   control-plane.sh start DIR    certificates, tokens, kubeconfigs, etcd data, logs and pids all
#                                 under DIR; returns once /readyz says ok, the controller-manager and
#                                 the scheduler answer /healthz and the `default` service account
#                                 exists (with KATA_LIVE_FLEET_CONTROLLERS=none: once /readyz says
#                                 ok); prints nothing (logs go to stderr)
#   control-plane.sh stop DIR     kill what start started (DIR/*.pid); idempotent
#   control-plane.sh guard DIR PID START
#                                 (started by start when KATA_LIVE_FLEET_OWNER is set) wait until
#                                 the process PID whose start time is START has exited, then stop
#                                 DIR's control plane and remove DIR
#   control-plane.sh node-kubeconfig DIR NODENAME SERVER_URL
#                                 print a kubeconfig for the kubelet NODENAME (static token, user
#                                 system:node:NODENAME in group system:nodes) trusting DIR's CA
#
# DIR/admin.kubeconfig is for kubectl (system:masters). A second start in the same DIR keeps its
# CA, keys, tokens and etcd data: the cluster comes back as it was.
#
# DIR/audit.log, the referee of the fleet tests and benchmarks (tests/support/audit.rs): the API
# server's audit log (JSON lines, blocking mode: each event is written before the response is
# sent, in one file, never rotated) of every create, update, patch and delete, failed ones
# included, on Leases in namespace kata-live and on Nodes (nodes/status too), with request and
# response bodies; nothing else (DIR/audit-policy.yaml). A second start appends to it.
# KATA_LIVE_FLEET_AUDIT_NODES=metadata logs the Node writes without bodies (the benches at
# thousands of Nodes: 40 KB a real-sized Node write would be the API server's largest cost;
# OpenShift's Default audit profile logs them so too).
#
# Environment: KATA_LIVE_KUBE_BIN (default: build.sh's output directory);
# KATA_LIVE_FLEET_API_PORT (default 16443; the controller-manager and the scheduler serve on the
# next two ports); KATA_LIVE_FLEET_ETCD_PORT (default 23790; the peer port is 10 above);
# KATA_LIVE_FLEET_NODES (default "kl-fleet-a kl-fleet-b"): the nodes start makes tokens for;
# KATA_LIVE_FLEET_CONTROLLERS (default "all"): "none" starts etcd and kube-apiserver only, no
# controller-manager or scheduler (simulated Node objects, which no kubelet heartbeats, are then
# not marked NotReady by the node lifecycle controller; nothing creates service accounts);
# KATA_LIVE_FLEET_OWNER (a pid): a guard in its own session stops the control plane once that
# process is gone, so a test killed before its cleanup leaves no etcd or kube-* behind.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
api_port=${KATA_LIVE_FLEET_API_PORT:-16443}
etcd_port=${KATA_LIVE_FLEET_ETCD_PORT:-23790}
nodes=${KATA_LIVE_FLEET_NODES:-kl-fleet-a kl-fleet-b}
components=(etcd kube-apiserver kube-controller-manager kube-scheduler)
controllers=${KATA_LIVE_FLEET_CONTROLLERS:-all}
case $controllers in
    all) ;;
    none) components=(etcd kube-apiserver) ;;
    *) printf 'control-plane: ERROR: KATA_LIVE_FLEET_CONTROLLERS is "all" or "none", not "%s"\n' "$controllers" >&2; exit 2 ;;
esac
timeout=120

log() { printf 'control-plane: %s\n' "$*" >&2; }
die() { printf 'control-plane: ERROR: %s\n' "$*" >&2; exit 1; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'; }

# Alive and not a zombie (a killed child of a caller that does not reap stays one).
# Field 22 of /proc/PID/stat (clock ticks after boot): with the pid, it names one process, so a
# reused pid is not taken for the owner.
start_time() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }; set -- $s; echo "${20}"; }

alive() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }; [ "${s%% *}" != Z ]; }

# The pid in DIR/NAME.pid if that process is alive and is ours: every command line names DIR,
# so a pid reused by another process is never killed.
pid_of() {
    local pid
    pid=$(cat "$dir/$1.pid" 2>/dev/null) && [ -n "$pid" ] && alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir/" || return 1
    echo "$pid"
}

any_alive() { local p; for p; do alive "$p" && return 0; done; return 1; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The CA is embedded: a node's kubeconfig is used where DIR is not.
kubeconfig() { # USER TOKEN SERVER
    printf '%s\n' 'apiVersion: v1' 'kind: Config' 'current-context: kl-fleet' \
        "clusters: [{name: kl-fleet, cluster: {server: '$3', certificate-authority-data: $(base64 -w0 "$dir/ca.crt")}}]" \
        "users: [{name: '$1', user: {token: $2}}]" \
        "contexts: [{name: kl-fleet, context: {cluster: kl-fleet, user: '$1'}}]"
}

# Token of USER from DIR/tokens.csv (token,user,uid,"groups").
token_of() { awk -F, -v u="$1" '$2 == u { print $1; exit }' "$dir/tokens.csv" 2>/dev/null; }

add_token() { # USER [GROUP]; kept from an earlier start
    [ -n "$(token_of "$1")" ] || printf '%s,%s,%s%s\n' "$(openssl rand -hex 16)" "$1" "$1" "${2:+,$2}" >>tokens.csv
}

# openssl chats on stderr even when all is well: keep it for when it is not.
ossl() { openssl "$@" 2>>certs.log || die "openssl $1 failed: $(tail -n 5 certs.log)"; }

certs() (
    cd "$dir"
    # EC keys: generated in milliseconds, unlike RSA. The service-account key stays RSA (RS256,
    # what every token consumer expects).
    if [ ! -e ca.crt ]; then
        ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout ca.key -out ca.crt -days 3650 -subj /CN=kata-live-fleet-ca
        rm -f apiserver.crt
    fi
    if [ ! -e apiserver.crt ]; then
        ossl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver
        # 10.0.0.1: the `kubernetes` service's ClusterIP, first of --service-cluster-ip-range.
        ossl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
            -out apiserver.crt -extfile <(printf '%s\n' \
                'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc' \
                'extendedKeyUsage=serverAuth' 'keyUsage=critical,digitalSignature,keyEncipherment')
        rm -f apiserver.csr
    fi
    [ -e sa.key ] || ossl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key
    [ -e sa.pub ] || ossl pkey -in sa.key -pubout -out sa.pub
    # --use-service-account-credentials=false runs every controller as the controller-manager's
    # own user, which the bootstrap system:kube-controller-manager role is too narrow for.
    add_token admin system:masters
    add_token system:kube-controller-manager system:masters
    add_token system:kube-scheduler
    for n in $nodes; do add_token "system:node:$n" system:nodes; done
    local server=https://127.0.0.1:$api_port u
    kubeconfig admin "$(token_of admin)" "$server" >admin.kubeconfig
    for u in kube-controller-manager kube-scheduler; do
        kubeconfig "system:$u" "$(token_of "system:$u")" "$server" >"$u.kubeconfig"
    done
)

# The referee's policy (see the header): the first rule that matches decides. A node writes its
# own Node and nodes/status; namespaces [] would match every namespace, and nodes have none.
# RequestReceived is left out: ResponseComplete carries everything, with the response's status.
audit_policy() {
    local node_level=RequestResponse
    case ${KATA_LIVE_FLEET_AUDIT_NODES:-request-response} in
        request-response) ;;
        metadata) node_level=Metadata ;;
        *) die "KATA_LIVE_FLEET_AUDIT_NODES is \"request-response\" or \"metadata\", not \"$KATA_LIVE_FLEET_AUDIT_NODES\"" ;;
    esac
    printf '%s\n' 'apiVersion: audit.k8s.io/v1' 'kind: Policy' 'omitStages: [RequestReceived]' 'rules:' \
        '- level: RequestResponse' '  verbs: [create, update, patch, delete]' '  namespaces: [kata-live]' \
        '  resources: [{group: coordination.k8s.io, resources: [leases]}]' \
        "- level: $node_level" '  verbs: [create, update, patch, delete]' \
        "  resources: [{group: '', resources: [nodes, nodes/status]}]" \
        '- level: None'
}

# Its own session: a signal to the caller's process group does not reach it; stop does.
launch() { setsid "$bin/$1" "${@:2}" </dev/null >>"$dir/$1.log" 2>&1 & echo $! >"$dir/$1.pid"; }

tails() { local c; for c; do log "last lines of $dir/$c.log:"; tail -n 15 "$dir/$c.log" >&2 || true; done; }

# Waits until CMD... succeeds, failing if any started component has died or at the deadline.
# (Only alive, not pid_of: until setsid execs, a pid's command line is this script's.)
wait_for() { # WHAT CMD...
    local what=$1 c
    until "${@:2}" >/dev/null 2>&1; do
        for c in "${components[@]}"; do
            [ ! -e "$dir/$c.pid" ] || alive "$(<"$dir/$c.pid")" || { tails "$c"; die "$c exited during start"; }
        done
        [ $SECONDS -lt "$deadline" ] || { tails "${components[@]}"; die "no $what after ${timeout}s"; }
        sleep 0.25
    done
}

ready() { [ "$("${kubectl[@]}" get --raw /readyz 2>/dev/null)" = ok ]; }

start_failed() { local rc=$?; [ "$rc" -eq 0 ] || cmd_stop; exit "$rc"; }

start_guard() {
    [ -n "${KATA_LIVE_FLEET_OWNER:-}" ] || return 0
    local born
    born=$(start_time "$KATA_LIVE_FLEET_OWNER") || die "the owner, pid $KATA_LIVE_FLEET_OWNER, is gone"
    setsid "$here/control-plane.sh" guard "$dir" "$KATA_LIVE_FLEET_OWNER" "$born" \
        </dev/null >>"$dir/guard.log" 2>&1 &
    echo $! >"$dir/guard.pid"
}

cmd_start() {
    local t0=$EPOCHREALTIME c p
    deadline=$((SECONDS + timeout))
    bin=${KATA_LIVE_KUBE_BIN:-}
    if [ -z "$bin" ]; then
        "$repo/tests/crio-real/build.sh" --check || die "not built: run tests/crio-real/build.sh"
        bin=$("$repo/tests/crio-real/build.sh" 2>/dev/null | tail -1)
    fi
    for c in "${components[@]}" kubectl; do [ -x "$bin/$c" ] || die "no $bin/$c"; done
    for c in "${components[@]}"; do ! pid_of "$c" >/dev/null || die "$c runs already in $dir: stop it first"; done
    local -a ports=("$etcd_port" $((etcd_port + 10)) "$api_port")
    [ "$controllers" = none ] || ports+=($((api_port + 1)) $((api_port + 2)))
    for p in "${ports[@]}"; do
        port_free "$p" || die "port $p on 127.0.0.1 is taken (KATA_LIVE_FLEET_API_PORT, KATA_LIVE_FLEET_ETCD_PORT)"
    done
    certs
    audit_policy >"$dir/audit-policy.yaml"
    trap start_failed EXIT
    trap 'exit 143' TERM INT
    rm -f "$dir"/*.pid
    local peer=http://127.0.0.1:$((etcd_port + 10))
    # No fsync: a test cluster's data is thrown away, and fsync is what makes etcd slow on a
    # busy disk (apiserver timeouts).
    launch etcd --name kl-fleet --data-dir "$dir/etcd" --unsafe-no-fsync \
        --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "kl-fleet=$peer"
    wait_for "healthy etcd" curl -sf -m 5 "http://127.0.0.1:$etcd_port/health"
    # The audit log (see the header): blocking, so it is in the order of the responses (batch
    # buffers and may reorder); --audit-log-maxsize 0 would mean lumberjack's default, a rotation
    # at 100 MB, and the referee reads one file.
    # --endpoint-reconciler-type none: the reconciler would write 127.0.0.1 into the `kubernetes`
    # Endpoints, which validation refuses every 10 s ("may not be in the loopback range").
    launch kube-apiserver --etcd-servers "http://127.0.0.1:$etcd_port" \
        --secure-port "$api_port" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
        --tls-cert-file "$dir/apiserver.crt" --tls-private-key-file "$dir/apiserver.key" \
        --client-ca-file "$dir/ca.crt" --token-auth-file "$dir/tokens.csv" \
        --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction --allow-privileged=true \
        --service-cluster-ip-range 10.0.0.0/24 --service-account-issuer https://kubernetes.default.svc \
        --service-account-key-file "$dir/sa.pub" --service-account-signing-key-file "$dir/sa.key" \
        --endpoint-reconciler-type none \
        --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/audit.log" \
        --audit-log-format json --audit-log-mode blocking --audit-log-maxsize 102400
    kubectl=("$bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" --request-timeout 5s)
    wait_for "ready API server" ready
    log "API server ready in $(since "$t0")s"
    [ "$controllers" = none ] || start_controllers
    start_guard
    trap - EXIT TERM INT
    log "control plane up in $(since "$t0")s (controllers: $controllers): kubectl --kubeconfig $dir/admin.kubeconfig"
}

start_controllers() {
    local p
    # Started once the API server answers, so neither gives up on it. No authentication- or
    # authorization-kubeconfig: with them both log "missing content for CA bundle
    # requestheader-client-ca-file" again and again (no front proxy here); /healthz is always
    # allowed without. The flex-volume directory defaults to /usr/libexec/kubernetes/..., which
    # the controller-manager creates on the host.
    launch kube-controller-manager --kubeconfig "$dir/kube-controller-manager.kubeconfig" \
        --leader-elect=false --controllers '*' --use-service-account-credentials=false \
        --service-account-private-key-file "$dir/sa.key" --root-ca-file "$dir/ca.crt" \
        --cluster-signing-cert-file "$dir/ca.crt" --cluster-signing-key-file "$dir/ca.key" \
        --bind-address 127.0.0.1 --secure-port $((api_port + 1)) --cert-dir "$dir/controller-manager-certs" \
        --flex-volume-plugin-dir "$dir/flexvolume"
    launch kube-scheduler --kubeconfig "$dir/kube-scheduler.kubeconfig" --leader-elect=false \
        --bind-address 127.0.0.1 --secure-port $((api_port + 2)) --cert-dir "$dir/scheduler-certs"
    for p in $((api_port + 1)) $((api_port + 2)); do
        wait_for "/healthz on port $p" curl -skf -m 5 "https://127.0.0.1:$p/healthz"
    done
    # After a restart it exists already; the first time it proves the controllers run.
    wait_for "default service account" "${kubectl[@]}" get serviceaccount default -n default
}

cmd_guard() { # OWNER START
    while [ "$(start_time "$1" || true)" = "$2" ]; do sleep 1; done
    log "$(date -Is): the owner, pid $1, is gone: stopping $dir"
    cmd_stop
    rm -rf -- "$dir"
}

cmd_stop() {
    local c pid i=0
    local -a pids=()
    # A stop asked for in time needs no guard (the guard's own stop is not asked to end it).
    pid=$(cat "$dir/guard.pid" 2>/dev/null) || pid=''
    if [ -n "$pid" ] && [ "$pid" != "$$" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF " guard $dir "; then
        kill -TERM "$pid" 2>/dev/null || true
    fi
    # Clients first, etcd last.
    for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do
        pid=$(pid_of "$c") || continue
        kill -TERM "$pid" 2>/dev/null || true
        pids+=("$pid")
    done
    while any_alive ${pids[@]+"${pids[@]}"}; do
        if [ $((i += 1)) -eq 100 ]; then
            for pid in "${pids[@]}"; do
                if alive "$pid"; then
                    log "pid $pid still running 10s after TERM: killing it"
                    kill -KILL "$pid" 2>/dev/null || true
                fi
            done
        fi
        sleep 0.1
    done
    rm -f "$dir"/*.pid
    [ ${#pids[@]} -eq 0 ] || log "stopped $dir"
}

case ${1:-} in
    start | stop)
        [ $# -eq 2 ] || die "usage: control-plane.sh $1 DIR"
        [ "$1" = start ] || [ -d "$2" ] || exit 0
        mkdir -p "$2"
        dir=$(cd "$2" && pwd)
        "cmd_$1"
        ;;
    guard)
        [ $# -eq 4 ] || die "usage: control-plane.sh guard DIR PID START"
        dir=$(cd "$2" 2>/dev/null && pwd) || exit 0
        cmd_guard "$3" "$4"
        ;;
    node-kubeconfig)
        [ $# -eq 4 ] || die "usage: control-plane.sh node-kubeconfig DIR NODENAME SERVER_URL"
        dir=$(cd "$2" 2>/dev/null && pwd) || die "no directory $2"
        [ -e "$dir/ca.crt" ] || die "no $dir/ca.crt: run start first"
        token=$(token_of "system:node:$3")
        [ -n "$token" ] || die "no token for node $3 in $dir/tokens.csv: name it in KATA_LIVE_FLEET_NODES at start"
        kubeconfig "system:node:$3" "$token" "$4"
        ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
