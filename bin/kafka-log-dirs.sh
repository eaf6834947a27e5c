#!/bin/sh
# kafka-log-dirs.sh, answered by `annal log-dirs` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" log-dirs "$@"
