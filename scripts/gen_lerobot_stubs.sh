#!/usr/bin/env bash
# Regenerate oxygen_ros/serve/lerobot/services_pb2{,_grpc}.py from services.proto beside them (committed, as
# lerobot commits its own): run after editing the .proto. grpcio-tools pins its own protobuf, so it runs in a
# throwaway venv:  bash scripts/gen_lerobot_stubs.sh [PYTHON_WITH_GRPC_TOOLS]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-}
if [ -z "$python" ]; then
  venv=$(mktemp -d)/grpc-tools
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "grpcio-tools>=1.66,<2"
  python=$venv/bin/python
fi
"$python" -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. oxygen_ros/serve/lerobot/services.proto
echo "generated: $(ls oxygen_ros/serve/lerobot/services_pb2*)"
