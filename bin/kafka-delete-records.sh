#!/bin/sh
# kafka-delete-records.sh, answered by `annal delete-records` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" delete-records "$@"
