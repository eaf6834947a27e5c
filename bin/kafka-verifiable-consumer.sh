#!/bin/sh
# kafka-verifiable-consumer.sh, answered by `annal verifiable-consumer` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" verifiable-consumer "$@"
