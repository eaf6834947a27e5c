#!/bin/sh
# kafka-consumer-groups.sh, answered by `annal consumer-groups` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" consumer-groups "$@"
