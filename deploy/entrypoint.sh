#!/bin/sh
# Fetches the model named by ENTROBATCH_MODEL_NAME into $ENTROBATCH_MODELS_DIR unless
# ENTROBATCH_MODEL points at a file already there, then execs the server (so it gets SIGTERM).
set -eu
if [ -z "${ENTROBATCH_MODEL:-}" ]; then
    /opt/entrobatch/scripts/fetch-model "${ENTROBATCH_MODEL_NAME}"
    ENTROBATCH_MODEL=$(ls "${ENTROBATCH_MODELS_DIR}"/*.gguf | head -n 1)
    export ENTROBATCH_MODEL
fi
exec /usr/local/bin/entrobatch serve --model "${ENTROBATCH_MODEL}" "$@"
