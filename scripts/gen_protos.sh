#!/usr/bin/env bash
# Regenerate teesim's gRPC stubs from simulator/teesim/kubelet/protos with grpcio-tools.
#
# Both upstream files are named api.proto. protobuf registers descriptors by path, so each file is
# compiled from a staging tree where its path is its Python package path
# (teesim/kubelet/generated/<api>/<version>/api.proto): the descriptor names never collide and the
# generated *_grpc.py imports its *_pb2.py by its full package name.
#
# Usage: scripts/gen_protos.sh [OUTPUT_ROOT]   (default: simulator; the stubs' test passes a temp dir)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$repo/simulator}"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$repo/.venv/bin/python" ]]; then python="$repo/.venv/bin/python"; else python=python3; fi
fi
protos="$repo/simulator/teesim/kubelet/protos"
package_dir="teesim/kubelet/generated"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT

mkdir -p "$out/$package_dir"
rm -rf "${out:?}/$package_dir/deviceplugin" "${out:?}/$package_dir/podresources"
printf '"""Generated gRPC stubs (scripts/gen_protos.sh); do not edit."""\n' >"$out/$package_dir/__init__.py"
for api in deviceplugin/v1beta1 podresources/v1; do
  mkdir -p "$stage/$package_dir/$api" "$out/$package_dir/$api"
  cp "$protos/$api/api.proto" "$stage/$package_dir/$api/api.proto"
  "$python" -m grpc_tools.protoc -I "$stage" \
    --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
    "$stage/$package_dir/$api/api.proto"
  # Every directory on the way is a regular package so setuptools ships the stubs.
  dir="$out/$package_dir"
  for part in ${api//\// }; do
    dir="$dir/$part"
    printf '"""Generated gRPC stubs (scripts/gen_protos.sh); do not edit."""\n' >"$dir/__init__.py"
  done
done
