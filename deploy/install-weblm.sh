#!/usr/bin/env bash
# Installs weblm (the wheel and requirements-cluster.txt) on one cluster node, before any step runs.
#   EMR bootstrap action:        install-weblm.sh WHEEL_URI REQUIREMENTS_URI [PYTHON]
#   Dataproc initialization action: no arguments; reads the cluster metadata weblm-wheel-uri and
#                                weblm-requirements-uri (deploy/dataproc/workflow.yaml sets both)
# PYTHON must be the interpreter Spark runs (3.11, the wheel's python_requires); default: Dataproc's
# conda Python where it exists, else python3.
set -euo pipefail

wheel_uri="${1:-}"
requirements_uri="${2:-}"
python="${3:-}"
if [[ -z "$wheel_uri" && -x /usr/share/google/get_metadata_value ]]; then
  wheel_uri="$(/usr/share/google/get_metadata_value attributes/weblm-wheel-uri)"
  requirements_uri="$(/usr/share/google/get_metadata_value attributes/weblm-requirements-uri)"
fi
if [[ -z "$wheel_uri" || -z "$requirements_uri" ]]; then
  echo "install-weblm.sh: no wheel or requirements URI; pass WHEEL_URI REQUIREMENTS_URI (EMR) or set the" \
       "metadata weblm-wheel-uri and weblm-requirements-uri (Dataproc)" >&2
  exit 2
fi
if [[ -z "$python" ]]; then
  if [[ -x /opt/conda/default/bin/python ]]; then python=/opt/conda/default/bin/python; else python=python3; fi
fi

fetch() {  # fetch URI FILE: object-store URIs through the platform's own CLI
  case "$1" in
    s3://*) aws s3 cp --only-show-errors "$1" "$2" ;;
    gs://*) gsutil -q cp "$1" "$2" ;;
    *) cp "$1" "$2" ;;
  esac
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
wheel="$work/$(basename "$wheel_uri")"   # pip needs the wheel's own file name
fetch "$wheel_uri" "$wheel"
fetch "$requirements_uri" "$work/requirements.txt"
sudo "$python" -m pip install --quiet -r "$work/requirements.txt" "$wheel"
echo "install-weblm.sh: installed $(basename "$wheel_uri") for $("$python" --version)"
