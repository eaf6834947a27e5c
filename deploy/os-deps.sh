#!/bin/sh
# The OS packages `make setup` needs on Debian, installed only when missing:
#   zookeeper                 the server the tests and the local cluster run
#   default-jre-headless      Java, for ZooKeeper and Spark's driver
#   kcat                      a Kafka client the Kafka-listener tests run
#   docker-compose, podman,   docker-compose.yml run for real (tests/compose):
#   debootstrap, runc, ...    podman serves Docker's API, debootstrap builds
#                             the debian:bookworm-slim base without a registry
#   netavark, aardvark-dns,   podman's container networks: netavark sets them
#   iptables                  up with iptables rules, aardvark-dns lets their
#                             members find each other by name
#   fiu-utils                 libfiu's fiu-run/fiu-ctrl: the failing-disk tests
#                             inject I/O errors into a broker's writes
#   nftables                  nft: the network-cut tests (tests/nemesis.py) drop
#                             one broker's packets to ZooKeeper and its peers
#   prometheus                promtool: the alert rules' tests (deploy/prometheus)
#   chromium, chromium-driver headless Chromium and its WebDriver: the web
#                             console's browser tests (tests/webconsole)
# and the podman settings those tests need, in a containers.conf drop-in.
# Idempotent: a second run changes nothing.
set -eu

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

needed=""
if ! [ -f /usr/share/java/zookeeper.jar ] && [ -z "${ZOOKEEPER_HOME:-}" ]; then
    needed="$needed zookeeper"
fi
for tool in docker-compose podman debootstrap runc kcat iptables; do
    command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || needed="$needed $tool"
done
command -v fiu-run >/dev/null 2>&1 || needed="$needed fiu-utils"
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || needed="$needed nftables"
command -v promtool >/dev/null 2>&1 || needed="$needed prometheus"
[ -x /usr/bin/chromium ] || needed="$needed chromium"
[ -x /usr/bin/chromedriver ] || needed="$needed chromium-driver"
# Spark's driver (the pipeline tests, the demo) and ZooKeeper run on Java.
command -v java >/dev/null 2>&1 || needed="$needed default-jre-headless"
# podman's network helpers live outside PATH; without them (or without
# iptables, which netavark drives) `podman run` fails with "netavark: No such
# file or directory".
for helper in netavark aardvark-dns; do
    [ -x "/usr/lib/podman/$helper" ] || [ -x "/usr/libexec/podman/$helper" ] \
        || needed="$needed $helper"
done
if [ -n "$needed" ]; then
    if ! command -v apt-get >/dev/null; then
        case "$needed" in *zookeeper*)
            echo "ZooKeeper is missing: install it (Debian: apt-get install zookeeper)" \
                 "or set ZOOKEEPER_HOME" >&2
            exit 1;;
        esac
        echo "not installed:$needed (the tests that need them skip, and fail under CI=true)" >&2
        exit 0
    fi
    echo "installing from the OS packages:$needed"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        $needed >/dev/null
fi

# podman: the runc runtime, and no default ulimits (a container may not raise
# its limits above those podman itself runs with, as in a VM sandbox).
conf=/etc/containers/containers.conf.d/50-annal.conf
if command -v podman >/dev/null && ! [ -f "$conf" ]; then
    echo "writing $conf"
    $SUDO mkdir -p "$(dirname "$conf")"
    printf '%s\n' \
        '# written by annal'"'"'s make setup (deploy/os-deps.sh)' \
        '[containers]' 'default_ulimits = []' '' '[engine]' 'runtime = "runc"' \
        | $SUDO tee "$conf" >/dev/null
fi
