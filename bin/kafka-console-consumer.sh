#!/bin/sh
# kafka-console-consumer.sh, answered by `annal console-consumer` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" console-consumer "$@"
