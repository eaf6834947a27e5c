#!/bin/sh
# kafka-leader-election.sh, answered by `annal leader-election` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" leader-election "$@"
