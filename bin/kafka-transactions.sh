#!/bin/sh
# kafka-transactions.sh, answered by `annal transactions` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" transactions "$@"
