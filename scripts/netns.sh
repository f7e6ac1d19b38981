# shellcheck shell=bash
# Helpers for throw-away test hosts: two network namespaces joined by a veth pair.
#
#   source scripts/netns.sh
#   NAME=tf$$
#   trap 'tf_cleanup "$NAME"' EXIT
#   tf_pair "$NAME"            # namespaces ${NAME}a, ${NAME}b; veth ${NAME}0 (in a), ${NAME}1 (in b)
#   ip netns exec "${NAME}a" ...
#
# Addresses (only inside the namespaces, RFC 2544 benchmark range): ${NAME}0 = 198.18.0.1/30,
# ${NAME}1 = 198.18.0.2/30. IPv6 is disabled on both ends so the kernel sends no router
# solicitations or MLD reports that would pollute a capture.
#
# Tunables (environment): TF_MTU (default 1500), TF_ADDRS=0 to leave the links without IPv4
# addresses. Names must be short: an interface name is at most 15 characters, so NAME is at most
# 14 characters (e.g. "tf$$").
#
# Functions print nothing on success; on failure they print one line on stderr and return non-zero.

tf_pair() {
    local name=${1:?tf_pair NAME}
    local mtu=${TF_MTU:-1500}
    local a="${name}a" b="${name}b" va="${name}0" vb="${name}1"
    if ((${#va} > 15)); then
        echo "tf_pair: name '$name' too long (interface names are at most 15 characters)" >&2
        return 2
    fi
    {
        ip netns add "$a" &&
            ip netns add "$b" &&
            ip link add "$va" netns "$a" mtu "$mtu" type veth peer name "$vb" netns "$b" mtu "$mtu"
    } >/dev/null 2>&1 || {
        echo "tf_pair: cannot create namespaces/veth for '$name' (need root; names in use?)" >&2
        tf_cleanup "$name"
        return 1
    }
    local ns dev ip
    for ns in "$a" "$b"; do
        if [[ $ns == "$a" ]]; then dev=$va ip=198.18.0.1/30; else dev=$vb ip=198.18.0.2/30; fi
        {
            ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 &&
                ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1 &&
                ip netns exec "$ns" sysctl -qw "net.ipv6.conf.$dev.disable_ipv6=1" &&
                ip -n "$ns" link set lo up &&
                ip -n "$ns" link set "$dev" up &&
                if [[ ${TF_ADDRS:-1} != 0 ]]; then ip -n "$ns" addr add "$ip" dev "$dev"; fi
        } >/dev/null 2>&1 || {
            echo "tf_pair: cannot configure $dev in namespace $ns" >&2
            tf_cleanup "$name"
            return 1
        }
    done
    # Wait until both ends report carrier (normally immediate for veth).
    local i
    for i in $(seq 50); do
        if [[ $(ip netns exec "$a" cat "/sys/class/net/$va/carrier" 2>/dev/null) == 1 &&
            $(ip netns exec "$b" cat "/sys/class/net/$vb/carrier" 2>/dev/null) == 1 ]]; then
            return 0
        fi
        sleep 0.02
    done
    echo "tf_pair: veth $va/$vb has no carrier" >&2
    tf_cleanup "$name"
    return 1
}

# Remove both namespaces (deleting a namespace removes the veth end inside it, and with it the
# pair). Safe to call twice or for a pair that was only half made.
tf_cleanup() {
    local name=${1:?tf_cleanup NAME}
    local ns
    for ns in "${name}a" "${name}b"; do
        if ip netns list 2>/dev/null | grep -qw -- "^$ns"; then
            # Kill anything still running inside (only processes in our own namespace).
            local pids
            pids=$(ip netns pids "$ns" 2>/dev/null || true)
            if [[ -n $pids ]]; then
                # shellcheck disable=SC2086
                kill $pids 2>/dev/null || true
                sleep 0.1
                pids=$(ip netns pids "$ns" 2>/dev/null || true)
                # shellcheck disable=SC2086
                [[ -z $pids ]] || kill -9 $pids 2>/dev/null || true
            fi
            ip netns del "$ns" >/dev/null 2>&1 || true
        fi
    done
    return 0
}

# Run a command inside namespace ${NAME}a or ${NAME}b: tf_in NAME a|b CMD...
tf_in() {
    local name=${1:?tf_in NAME a|b CMD...} side=${2:?tf_in NAME a|b CMD...}
    shift 2
    ip netns exec "${name}${side}" "$@"
}
