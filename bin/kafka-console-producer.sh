#!/bin/sh
# kafka-console-producer.sh, answered by `annal console-producer` (docs/operations.md).
exec "$(dirname -- "$0")/annal-run" console-producer "$@"
