#!/bin/sh
# kafka-producer-perf-test.sh, answered by `annal perf produce` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" perf produce "$@"
