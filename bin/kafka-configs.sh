#!/bin/sh
# kafka-configs.sh, answered by `annal configs` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" configs "$@"
