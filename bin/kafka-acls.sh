#!/bin/sh
# kafka-acls.sh, answered by `annal acls` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" acls "$@"
