#!/bin/sh
# kafka-dump-log.sh, answered by `annal dump-log` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" dump-log "$@"
