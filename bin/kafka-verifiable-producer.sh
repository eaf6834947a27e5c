#!/bin/sh
# kafka-verifiable-producer.sh, answered by `annal verifiable-producer` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" verifiable-producer "$@"
