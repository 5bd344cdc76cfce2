# lib_netns.sh — hosts as network namespaces for the prep-server tests and
# bench/serve.sh (sourced, not a test itself). Each host is a namespace with
# a veth pair to the root namespace on its own /30 of 10.213.0.0/16; names
# carry this shell's pid, so parallel runs do not collide. netns_cleanup
# (call it from the EXIT trap) deletes every namespace made here, and its
# veth pair with it. Touches only the namespaces and links it names.

NETNS_MADE=()

# netns_able: 0 when this shell may make namespaces (root, ip(8), a probe
# namespace and veth pair made and deleted); otherwise 1 and NETNS_WHY says
# why.
netns_able() {
    NETNS_WHY=""
    if [ "$(id -u)" != 0 ]; then
        NETNS_WHY="not root"
    elif ! command -v ip > /dev/null; then
        NETNS_WHY="no ip(8) (iproute2)"
    elif ! ip netns add "nstp$$" 2> /dev/null; then
        NETNS_WHY="'ip netns add' failed"
    elif ! ip link add "nstp$$" type veth peer name "nstq$$" 2> /dev/null; then
        ip netns del "nstp$$" 2> /dev/null || true
        NETNS_WHY="'ip link add ... type veth' failed"
    else
        ip link del "nstp$$" 2> /dev/null || true
        ip netns del "nstp$$" 2> /dev/null || true
        return 0
    fi
    return 1
}

# netns_host I: make host I; sets HOST_NS (its namespace), HOST_VETH (the
# root namespace's end of the link), HOST_PEER (the host's end) and HOST_IP
# (the host's address; the root end is HOST_IP - 1).
netns_host() {
    local i=$1 k s a b
    HOST_NS=nst$$h$i
    HOST_VETH=nv$$r$i
    HOST_PEER=nv$$s$i
    # a /30 that no address here is on yet, starting from one of this pid's
    for ((k = 0; k < 16384; k++)); do
        s=$(((($$ * 8 + i + k) * 97) % 16384))
        a="10.213.$((s / 64)).$((s % 64 * 4 + 1))"
        ip -4 -o addr show | grep -q "inet 10\.213\.$((s / 64))\.$((s % 64 * 4 + 1))/" || break
    done
    b="10.213.$((s / 64)).$((s % 64 * 4 + 2))"
    ip netns add "$HOST_NS" || return 1
    NETNS_MADE+=("$HOST_NS")
    ip link add "$HOST_VETH" type veth peer name "$HOST_PEER" || return 1
    ip link set "$HOST_PEER" netns "$HOST_NS" || return 1
    ip addr add "$a/30" dev "$HOST_VETH" || return 1
    ip link set "$HOST_VETH" up || return 1
    ip -n "$HOST_NS" addr add "$b/30" dev "$HOST_PEER" || return 1
    ip -n "$HOST_NS" link set "$HOST_PEER" up || return 1
    ip -n "$HOST_NS" link set lo up || return 1
    HOST_IP=$b
}

# netns_cleanup: delete every namespace made here (its veth pair goes with
# it; a root end left by a half-made host is deleted by name).
netns_cleanup() {
    local n
    for n in "${NETNS_MADE[@]}"; do
        ip netns del "$n" 2> /dev/null || true
        ip link del "nv$$r${n##*h}" 2> /dev/null || true
    done
    NETNS_MADE=()
}
