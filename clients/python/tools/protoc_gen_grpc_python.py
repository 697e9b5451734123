"""protoc plugin (protoc-gen-grpc_python) backed by grpcio-tools.

grpcio-tools has the gRPC Python generator built into its protoc only; it ships
no stand-alone plugin that buf could run. This plugin reads buf's
CodeGeneratorRequest, hands the request's descriptors to grpcio-tools' protoc
(--descriptor_set_in) with --grpc_python_out and returns the generated files in
a CodeGeneratorResponse. Used by scripts/gen-python.sh through
buf.gen.python.yaml; runs offline with the pinned grpcio-tools.
"""

import os
import subprocess
import sys
import tempfile

from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2


def main() -> int:
    req = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    resp = plugin_pb2.CodeGeneratorResponse()
    resp.supported_features = plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    with tempfile.TemporaryDirectory() as tmp:
        fds = descriptor_pb2.FileDescriptorSet(file=list(req.proto_file))
        desc = os.path.join(tmp, "in.pb")
        with open(desc, "wb") as f:
            f.write(fds.SerializeToString())
        out = os.path.join(tmp, "out")
        os.mkdir(out)
        opt = (req.parameter + ":") if req.parameter else ""
        cmd = [
            sys.executable, "-m", "grpc_tools.protoc",
            f"--descriptor_set_in={desc}",
            f"--grpc_python_out={opt}{out}",
            *req.file_to_generate,
        ]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            resp.error = run.stderr or f"grpc_tools.protoc exited {run.returncode}"
        else:
            for dirpath, _, names in os.walk(out):
                for name in sorted(names):
                    path = os.path.join(dirpath, name)
                    with open(path, encoding="utf-8") as f:
                        resp.file.add(name=os.path.relpath(path, out), content=f.read())
    sys.stdout.buffer.write(resp.SerializeToString())
    return 0


if __name__ == "__main__":
    sys.exit(main())
