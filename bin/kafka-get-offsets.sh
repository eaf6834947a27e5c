#!/bin/sh
# kafka-get-offsets.sh, answered by `annal get-offsets` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" get-offsets "$@"
