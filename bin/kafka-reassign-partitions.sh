#!/bin/sh
# kafka-reassign-partitions.sh, answered by `annal reassign-partitions` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" reassign-partitions "$@"
