#!/bin/sh
# kafka-consumer-perf-test.sh, answered by `annal perf consume` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" perf consume "$@"
