#!/bin/bash
# Image entrypoint: load CANN's environment when the image has it (Ascend base
# images set it up only in root's .bashrc, and the trainer runs as non-root),
# then run the command with its arguments untouched.
for f in /usr/local/Ascend/ascend-toolkit/set_env.sh /usr/local/Ascend/nnal/atb/set_env.sh; do
    # shellcheck disable=SC1090
    [ -f "$f" ] && . "$f"
done
exec "$@"
