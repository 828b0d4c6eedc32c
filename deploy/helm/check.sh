#!/usr/bin/env bash
# The Helm chart's checks (`make chart`, part of `make test`): helm lint --strict and helm
# template of the chart with each values set of check-values/, failing on any error. helm is
# the one localcluster builds (localcluster/build.py); tests/deploy/test_chart.py asserts on
# what these renders contain.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
py="${PY:-$root/.venv/bin/python}"
chart="$here/gpu-portal"
helm="$(cd "$root" && "$py" -c 'from localcluster import build; print(build.ensure_built()["helm"])')"

for set in required trial full; do
  values="$here/check-values/$set.yaml"
  echo "  helm lint --strict, helm template: $set"
  "$helm" lint --strict --quiet "$chart" -f "$values" >/dev/null \
    || { "$helm" lint --strict "$chart" -f "$values"; exit 1; }
  "$helm" template gpu-portal "$chart" --namespace gpu-portal -f "$values" >/dev/null
done

# Without a source for the secret key the chart must refuse, saying what to set.
if out="$("$helm" template gpu-portal "$chart" --set allowedHosts='{gpu-portal.example.com}' \
    --set externalDatabase.existingSecret=db --set externalRedis.existingSecret=redis 2>&1)"; then
  echo "helm template rendered without a secret key source"; exit 1
fi
grep -q "secretKey: set secretKey.existingSecret" <<<"$out" || { echo "$out"; exit 1; }
echo "  chart OK"
