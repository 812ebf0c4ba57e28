#!/usr/bin/env bash
# Validates the Kubernetes manifests under deploy/k8s, offline: strict JSON
# schema checks against several Kubernetes versions with kubernetes-validate
# (the schemas ship inside the PyPI package), plus cross-reference checks of
# names, ports, mounted files and the Solus config (deploy/check-manifests.py).
# Overlays are rendered with `kubectl kustomize` when kubectl is installed.
#
# Installs kubernetes-validate (pinned) into a virtualenv under target/ the
# first time; later runs need no network. Exits non-zero on any problem.
#
#   bash deploy/validate.sh
set -euo pipefail
cd "$(dirname "$0")/.."

KV_VERSION=1.37.0
VENV=target/deploy-venv

if [ "$("$VENV/bin/kubernetes-validate" --version 2>/dev/null)" != "$KV_VERSION" ]; then
    echo "deploy/validate.sh: installing kubernetes-validate $KV_VERSION into $VENV" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    # A registry hiccup should not fail CI: three tries, with a pause between.
    for attempt in 1 2 3; do
        if "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
            "kubernetes-validate==$KV_VERSION"; then
            break
        fi
        [ "$attempt" -lt 3 ] || { echo "deploy/validate.sh: cannot install kubernetes-validate" >&2; exit 1; }
        sleep $((attempt * 10))
    done
fi

exec "$VENV/bin/python" deploy/check-manifests.py
