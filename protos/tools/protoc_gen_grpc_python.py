"""protoc-gen-grpc-python: gRPC's Python generator, as a protoc plugin buf can run.

grpc_tools ships gRPC's Python generator built into its own protoc (grpc_tools.protoc,
--grpc_python_out), not as a plugin program, and buf runs built-in generators only by the
names protoc itself knows (python, pyi). This plugin reads the CodeGeneratorRequest buf
sends, runs grpc_tools.protoc on the same descriptors and answers with the files it wrote.
Run it with the interpreter that has grpcio-tools (protos/buf.gen.yaml names .venv's).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2
from grpc_tools import protoc


def generate(request: plugin_pb2.CodeGeneratorRequest) -> plugin_pb2.CodeGeneratorResponse:
    response = plugin_pb2.CodeGeneratorResponse(
        supported_features=plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    )
    with tempfile.TemporaryDirectory() as tmp:
        descriptors = Path(tmp) / "descriptors.binpb"
        descriptors.write_bytes(
            descriptor_pb2.FileDescriptorSet(file=request.proto_file).SerializeToString()
        )
        out = Path(tmp) / "out"
        out.mkdir()
        target = f"{request.parameter}:{out}" if request.parameter else str(out)
        args = [
            "grpc_tools.protoc",
            f"--descriptor_set_in={descriptors}",
            f"--grpc_python_out={target}",
            *request.file_to_generate,
        ]
        if protoc.main(args) != 0:
            response.error = "grpc_tools.protoc failed (its message is above)"
            return response
        for path in sorted(p for p in out.rglob("*") if p.is_file()):
            response.file.add(name=path.relative_to(out).as_posix(), content=path.read_text())
    return response


def main() -> None:
    request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    sys.stdout.buffer.write(generate(request).SerializeToString())


if __name__ == "__main__":
    main()
