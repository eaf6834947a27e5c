#!/bin/sh
# kafka-server-start.sh server.properties [--override NAME=VALUE ...], answered by
# `annal broker start --config server.properties` (docs/operations.md).
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
    echo "USAGE: $0 server.properties [--override property=value]*" >&2
    exit 1
fi
config=$1
shift
exec "$(dirname -- "$0")/annal-run" broker start --config "$config" "$@"
