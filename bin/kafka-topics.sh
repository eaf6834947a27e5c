#!/bin/sh
# kafka-topics.sh, answered by `annal topics` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" topics "$@"
