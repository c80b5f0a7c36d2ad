"""No name in the protos collides with what the generated code of a language defines.

Each message, field, oneof, enum, enum value and service of protos/ (compiled by the real
buf) is mapped to the identifiers its generated code has in Go (protoc-gen-go,
protoc-gen-go-grpc), Java (protoc's Java generator, grpc-java), TypeScript (ts-proto with
the options in protos/buf.gen.yaml) and Python (protoc's Python generator), and checked
against the names those generators and their runtimes already use. A collision either
fails to compile (Java's `getDescriptor()`, the reason `SessionTool.descriptor` became
`SessionTool.tool`) or is renamed behind the author's back (Go's `Descriptor_`), so any
is a failure here. The lists below say where each comes from.

The checker itself is tested on a proto written to collide in every way it knows.
"""

from __future__ import annotations

import keyword
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, message

from tests.support import ROOT

BUF = ROOT / ".tools" / "node_modules" / ".bin" / "buf"

F = descriptor_pb2.FieldDescriptorProto

# --- Go -----------------------------------------------------------------------------------

GO_MESSAGE_METHODS = {
    # google.golang.org/protobuf/compiler/protogen (protogen.go, newMessage: usedNames): a
    # field whose Go name or getter is one of these gets "_" appended.
    *"Reset String ProtoMessage Marshal Unmarshal ExtensionRangeArray ExtensionMap".split(),
    "Descriptor",
    # Every message's method in the v2 API (protoreflect.ProtoMessage); protogen does not
    # rename around it, so a field of that name does not compile.
    "ProtoReflect",
}

# --- Java ---------------------------------------------------------------------------------

JAVA_FORBIDDEN_ACCESSOR_NAMES = {
    # protoc's src/google/protobuf/compiler/java/helpers.cc (kForbiddenWordList) and
    # protobuf-java's DescriptorMessageInfoFactory.specialFieldNames: get<Name>() of a field
    # so named collides with a method of the message's base classes (java.lang.Object,
    # MessageLite, MessageLiteOrBuilder, MessageOrBuilder).
    *"Class DefaultInstanceForType ParserForType SerializedSize AllFields".split(),
    *"DescriptorForType InitializationErrorString UnknownFields CachedSize".split(),
    # Static methods of every generated message class: an instance getter of the same name
    # does not compile ("method getDescriptor() is already defined").
    *"Descriptor DefaultInstance".split(),
}

# --- TypeScript / JavaScript --------------------------------------------------------------

TS_FORBIDDEN_PROPERTIES = {
    # Object.prototype (ECMAScript, "Properties of the Object Prototype Object", and Annex B):
    # a message is a plain object, so a field of these names shadows them.
    *"constructor __proto__ hasOwnProperty isPrototypeOf propertyIsEnumerable".split(),
    *"toLocaleString toString valueOf".split(),
    *"__defineGetter__ __defineSetter__ __lookupGetter__ __lookupSetter__".split(),
    # JSON.stringify calls a toJSON property; await and Promise.resolve call a then property
    # (a message with a "then" field would be taken for a promise).
    *"toJSON then".split(),
}

TS_MODULE_NAMES = {
    # What a module ts-proto generates declares or imports besides the proto's own types
    # (read from clients/typescript/src/gen after a build): @bufbuild/protobuf/wire and
    # ts-proto's helpers,
    *"BinaryReader BinaryWriter DeepPartial Exact Builtin KeysOfUnion MessageFns".split(),
    *"protobufPackage protobufFileName isSet isObject longToNumber floatToJson".split(),
    *"fromTimestamp toTimestamp fromJsonTimestamp bytesFromBase64 base64FromBytes".split(),
    # @grpc/grpc-js, for services (outputServices=grpc-js),
    *"CallOptions ChannelCredentials Client ClientOptions ClientReadableStream".split(),
    *"ClientWritableStream ClientDuplexStream ClientUnaryCall Metadata ServiceError".split(),
    *"handleUnaryCall handleServerStreamingCall handleClientStreamingCall".split(),
    *"handleBidiStreamingCall makeGenericClientConstructor UntypedServiceImplementation".split(),
    # well-known types, imported by their bare names when used,
    *"Any Duration Empty FieldMask ListValue Struct Timestamp Value".split(),
    # and globals the generated code refers to (useDate=true makes timestamps Dates).
    *"Date Array Object Error Number String Boolean BigInt JSON Math Map Set".split(),
    *"Promise Symbol Uint8Array Buffer Long globalThis".split(),
}

# --- Python -------------------------------------------------------------------------------

PY_MESSAGE_ATTRIBUTES = {
    # google.protobuf.message.Message (message.py) and its upb implementation: every
    # generated class has these; a field, nested type or nested enum value so named
    # replaces one.
    *"DESCRIPTOR ByteSize Clear ClearExtension ClearField CopyFrom".split(),
    *"DiscardUnknownFields Extensions FindInitializationErrors FromString".split(),
    *"HasExtension HasField IsInitialized ListFields MergeFrom MergeFromString".split(),
    *"ParseFromString RegisterExtension SerializePartialToString SerializeToString".split(),
    *"SetInParent UnknownFields WhichOneof".split(),
}

PY_MODULE_NAMES = {
    # What protoc's Python generator puts in every foo_pb2 module besides the proto's names
    # (and the aliases of the modules it imports, py_module_alias).
    *"DESCRIPTOR _descriptor _descriptor_pool _runtime_version _symbol_database".split(),
    *"_builder _sym_db _globals".split(),
}

PY_KEYWORDS = set(keyword.kwlist)  # hard keywords: a field so named is reachable only by getattr


@dataclass(frozen=True)
class Clash:
    language: str
    element: str
    """The proto element, by full name (a field: message.field)."""
    why: str

    def __str__(self) -> str:
        return f"{self.language}: {self.element}: {self.why}"


@dataclass(frozen=True)
class Message:
    proto: descriptor_pb2.DescriptorProto
    path: tuple[str, ...]
    """Its name and its enclosing messages' names, outermost first."""
    full_name: str


@dataclass(frozen=True)
class Enum:
    proto: descriptor_pb2.EnumDescriptorProto
    path: tuple[str, ...]
    full_name: str


def build(protos: Path, out: Path) -> list[descriptor_pb2.FileDescriptorProto]:
    """The files of the module at ``protos`` (not their imports), compiled by buf."""
    assert BUF.exists(), "buf is missing: run 'make test', which installs it"
    image = out / "image.binpb"
    subprocess.run(
        [str(BUF), "build", str(protos), "--exclude-imports", "-o", str(image)],
        check=True,
        timeout=120,
    )
    return list(descriptor_pb2.FileDescriptorSet.FromString(image.read_bytes()).file)


def walk(file: descriptor_pb2.FileDescriptorProto) -> Iterator[Message | Enum]:
    def visit(
        messages: list[descriptor_pb2.DescriptorProto],
        enums: list[descriptor_pb2.EnumDescriptorProto],
        path: tuple[str, ...],
    ) -> Iterator[Message | Enum]:
        prefix = ".".join((file.package, *path))
        for enum in enums:
            yield Enum(enum, (*path, enum.name), f"{prefix}.{enum.name}")
        for msg in messages:
            yield Message(msg, (*path, msg.name), f"{prefix}.{msg.name}")
            yield from visit(list(msg.nested_type), list(msg.enum_type), (*path, msg.name))

    yield from visit(list(file.message_type), list(file.enum_type), ())


def is_map(msg: descriptor_pb2.DescriptorProto, field: F) -> bool:
    if field.type != F.TYPE_MESSAGE or field.label != F.LABEL_REPEATED:
        return False
    entry = field.type_name.rsplit(".", 1)[-1]
    return any(n.name == entry and n.options.map_entry for n in msg.nested_type)


def real_oneofs(msg: descriptor_pb2.DescriptorProto) -> list[tuple[int, str]]:
    """The oneofs a user sees (not the synthetic ones of proto3 `optional` fields)."""
    synthetic = {f.oneof_index for f in msg.field if f.proto3_optional}
    return [(i, o.name) for i, o in enumerate(msg.oneof_decl) if i not in synthetic]


def collisions(
    language: str,
    names: dict[str, list[str]],
    reserved: set[str] | frozenset[str] = frozenset(),
    reserved_by: str = "",
) -> Iterator[Clash]:
    """A clash for each element that generates a name another one or ``reserved`` has."""
    for name, owners in sorted(names.items()):
        for owner in owners:
            if name in reserved:
                yield Clash(language, owner, f"{name} is {reserved_by}")
            elif len(owners) > 1:
                others = ", ".join(o for o in owners if o != owner)
                yield Clash(language, owner, f"{name} is also {others}'s")


# --- Go -----------------------------------------------------------------------------------


def go_camel(s: str) -> str:
    """protogen's GoCamelCase (google.golang.org/protobuf/internal/strs)."""
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        nxt = s[i + 1] if i + 1 < len(s) else ""
        if c == "." and nxt.islower():
            pass
        elif c == ".":
            out.append("_")
        elif c == "_" and (i == 0 or s[i - 1] == "."):
            out.append("X")
        elif c == "_" and nxt.islower():
            pass
        elif c.isdigit():
            out.append(c)
        else:
            out.append(c.upper())
            while i + 1 < len(s) and s[i + 1].islower():
                i += 1
                out.append(s[i])
        i += 1
    return "".join(out)


def go_clashes(files: list[descriptor_pb2.FileDescriptorProto]) -> Iterator[Clash]:
    idents: dict[str, list[str]] = defaultdict(list)  # package-level Go names -> owners
    for file in files:
        base = file.name.removesuffix(".proto").replace("/", "_").replace(".", "_")
        idents[f"File_{base}_proto"].append(file.name)
        for item in walk(file):
            ident = go_camel(".".join(item.path))
            idents[ident].append(item.full_name)
            if isinstance(item, Enum):
                idents[f"{ident}_name"].append(item.full_name)
                idents[f"{ident}_value"].append(item.full_name)
                # A top-level enum's values are prefixed with its name, a nested enum's
                # with its message's.
                parent = ident if len(item.path) == 1 else go_camel(".".join(item.path[:-1]))
                for value in item.proto.value:
                    idents[f"{parent}_{value.name}"].append(f"{item.full_name}.{value.name}")
                continue
            used = dict.fromkeys(GO_MESSAGE_METHODS, True)  # name -> has a Get<name>
            oneofs_seen: set[int] = set()
            for field in item.proto.field:
                name = go_camel(field.name)
                element = f"{item.full_name}.{field.name}"
                if name in used or f"Get{name}" in used:
                    yield Clash("Go", element, f"field {name} or Get{name} is already defined")
                used[name] = used[f"Get{name}"] = True
                if field.HasField("oneof_index") and not field.proto3_optional:
                    idents[f"{ident}_{name}"].append(element)  # the oneof's wrapper type
                    if field.oneof_index not in oneofs_seen:
                        oneofs_seen.add(field.oneof_index)
                        oneof = item.proto.oneof_decl[field.oneof_index].name
                        if go_camel(oneof) in used:
                            yield Clash(
                                "Go",
                                f"{item.full_name}.{oneof}",
                                f"oneof field {go_camel(oneof)} is already defined",
                            )
                        used[go_camel(oneof)] = True
        for service in file.service:
            s = service.name
            owner = f"{file.package}.{s}"
            for name in (
                f"{s}Client",
                f"{s}Server",
                f"New{s}Client",
                f"Register{s}Server",
                f"Unimplemented{s}Server",
                f"Unsafe{s}Server",
                f"{s}_ServiceDesc",
            ):
                idents[name].append(owner)
            for method in service.method:
                idents[f"{s}_{method.name}_FullMethodName"].append(f"{owner}.{method.name}")
                if method.client_streaming or method.server_streaming:
                    idents[f"{s}_{method.name}Client"].append(f"{owner}.{method.name}")
                    idents[f"{s}_{method.name}Server"].append(f"{owner}.{method.name}")
    yield from collisions("Go", idents)


# --- Java ---------------------------------------------------------------------------------


def java_camel(s: str) -> str:
    """protoc's UnderscoresToCamelCase(name, cap_next_letter=true) (java/names.cc)."""
    out: list[str] = []
    cap_next = True
    for c in s:
        if c.islower():
            out.append(c.upper() if cap_next else c)
            cap_next = False
        elif c.isupper():
            out.append(c)
            cap_next = False
        elif c.isdigit():
            out.append(c)
            cap_next = True
        else:
            cap_next = True
    return "".join(out)


def java_accessors(msg: descriptor_pb2.DescriptorProto, field: F) -> set[str]:
    """The message's (not the builder's) accessors of ``field``, as grpc-java users see them."""
    c = java_camel(field.name)
    names = {f"get{c}"}
    if is_map(msg, field):
        return names | {f"get{c}Map", f"get{c}Count", f"contains{c}", f"get{c}OrDefault",
                        f"get{c}OrThrow", f"get{c}ValueMap"}  # fmt: skip
    repeated = field.label == F.LABEL_REPEATED
    if repeated:
        names |= {f"get{c}List", f"get{c}Count"}
    if field.type == F.TYPE_MESSAGE:
        names |= {f"get{c}OrBuilderList"} if repeated else {f"has{c}", f"get{c}OrBuilder"}
    if field.type == F.TYPE_STRING:
        names.add(f"get{c}Bytes")
    if field.type == F.TYPE_ENUM:
        names |= {f"get{c}ValueList"} if repeated else {f"get{c}Value"}
    if field.HasField("oneof_index"):
        names.add(f"has{c}")
    return names


def java_clashes(files: list[descriptor_pb2.FileDescriptorProto]) -> Iterator[Clash]:
    classes: dict[str, list[str]] = defaultdict(list)  # top-level classes of the Java package
    for file in files:
        if file.options.java_outer_classname:
            classes[file.options.java_outer_classname].append(file.name)
        for service in file.service:
            classes[f"{service.name}Grpc"].append(f"{file.package}.{service.name}")
        for item in walk(file):
            if len(item.path) == 1 and file.options.java_multiple_files:
                classes[item.path[0]].append(item.full_name)
                if isinstance(item, Message):
                    classes[f"{item.path[0]}OrBuilder"].append(item.full_name)
            if isinstance(item, Enum):
                continue
            msg = item.proto
            # A nested class may not share its name with an enclosing one, nor with what
            # protoc nests in every message: its Builder and each oneof's <Name>Case enum.
            nested_reserved = {"Builder", *item.path}
            nested_reserved |= {f"{java_camel(name)}Case" for _, name in real_oneofs(msg)}
            for nested in [*msg.nested_type, *msg.enum_type]:
                if nested.name in nested_reserved:
                    yield Clash(
                        "Java", f"{item.full_name}.{nested.name}", "the name is already taken"
                    )
            owners: dict[str, list[str]] = defaultdict(list)
            for _, name in real_oneofs(msg):
                owners[f"get{java_camel(name)}Case"].append(f"{item.full_name}.{name}")
            for field in msg.field:
                element = f"{item.full_name}.{field.name}"
                if java_camel(field.name) in JAVA_FORBIDDEN_ACCESSOR_NAMES:
                    yield Clash(
                        "Java",
                        element,
                        f"get{java_camel(field.name)}() is a method of every message",
                    )
                for accessor in java_accessors(msg, field):
                    owners[accessor].append(element)
            yield from collisions("Java", owners)
    yield from collisions("Java", classes)


# --- TypeScript ---------------------------------------------------------------------------


def ts_property(name: str) -> str:
    """ts-proto's property name for a field or oneof (maybeSnakeToCamel, src/case.ts)."""
    if "_" not in name:
        return name
    lower = any(c.islower() for c in name)
    words = [w if lower else w.lower() for w in name.split("_")]
    return words[0] + "".join(w[:1].upper() + w[1:] for w in words[1:])


def ts_clashes(files: list[descriptor_pb2.FileDescriptorProto]) -> Iterator[Clash]:
    names: dict[str, list[str]] = defaultdict(list)  # module-level TypeScript names
    for file in files:
        for service in file.service:
            owner = f"{file.package}.{service.name}"
            for name in (f"{service.name}Service", f"{service.name}Server"):
                names[name].append(owner)
            names[f"{service.name}Client"].append(owner)
        for item in walk(file):
            names["_".join(item.path)].append(item.full_name)
            if isinstance(item, Enum):
                continue
            # oneof=unions-value: a oneof's fields live under one property named after it.
            properties = [
                ts_property(f.name)
                for f in item.proto.field
                if not f.HasField("oneof_index") or f.proto3_optional
            ]
            properties += [ts_property(name) for _, name in real_oneofs(item.proto)]
            for prop in properties:
                if prop in TS_FORBIDDEN_PROPERTIES:
                    yield Clash(
                        "TypeScript", f"{item.full_name}.{prop}", "the property is built in"
                    )
    yield from collisions("TypeScript", names, TS_MODULE_NAMES, "declared by ts-proto's code")


# --- Python -------------------------------------------------------------------------------


def py_module_alias(proto_file: str) -> str:
    """The name a foo_pb2 module imports a dependency under (protoc's ModuleAlias)."""
    module = proto_file.removesuffix(".proto") + "_pb2"
    return module.replace("_", "__").replace("/", "_dot_")


def py_clashes(files: list[descriptor_pb2.FileDescriptorProto]) -> Iterator[Clash]:
    for file in files:
        module: dict[str, list[str]] = defaultdict(list)  # names in the foo_pb2 module
        generated = PY_MODULE_NAMES | {py_module_alias(d) for d in file.dependency}
        for item in walk(file):
            name = item.path[-1]
            if name in PY_KEYWORDS:
                yield Clash("Python", item.full_name, "a keyword")
            if len(item.path) == 1:
                module[name].append(item.full_name)
            if isinstance(item, Enum):
                for value in item.proto.value:
                    element = f"{item.full_name}.{value.name}"
                    if value.name in PY_KEYWORDS:
                        yield Clash("Python", element, "a keyword")
                    if len(item.path) == 1:  # a top-level enum's values are module names
                        module[value.name].append(element)
                continue
            attributes: dict[str, list[str]] = defaultdict(list)  # the message class's
            for field in item.proto.field:
                element = f"{item.full_name}.{field.name}"
                if field.name in PY_KEYWORDS:
                    yield Clash("Python", element, "a keyword")
                attributes[field.name].append(element)
                attributes[f"{field.name.upper()}_FIELD_NUMBER"].append(element)
            for nested in item.proto.nested_type:
                attributes[nested.name].append(f"{item.full_name}.{nested.name}")
            for enum in item.proto.enum_type:
                attributes[enum.name].append(f"{item.full_name}.{enum.name}")
                for value in enum.value:  # a nested enum's values are the class's names
                    attributes[value.name].append(f"{item.full_name}.{enum.name}.{value.name}")
            yield from collisions(
                "Python", attributes, PY_MESSAGE_ATTRIBUTES, "a message method or attribute"
            )
        yield from collisions("Python", module, generated, "a name of every _pb2 module")


def clashes(files: list[descriptor_pb2.FileDescriptorProto]) -> list[Clash]:
    found = [
        *go_clashes(files),
        *java_clashes(files),
        *ts_clashes(files),
        *py_clashes(files),
    ]
    return sorted(set(found), key=str)


# --- the tests ----------------------------------------------------------------------------


def test_no_name_in_the_protos_clashes_with_generated_code(tmp_path: Path) -> None:
    files = build(ROOT / "protos", tmp_path)
    assert {f.name for f in files} == {
        "agentsidecar/v1/agent.proto",
        "agentsidecar/v1/identity.proto",
        "agentsidecar/v1/tool.proto",
        "agentsidecar/v1/variants.proto",
    }
    assert [str(c) for c in clashes(files)] == []


def test_the_python_list_covers_the_installed_protobufs_message_api() -> None:
    public = {name for name in dir(message.Message) if not name.startswith("_")}
    assert public <= PY_MESSAGE_ATTRIBUTES, public - PY_MESSAGE_ATTRIBUTES


PROBE = """
syntax = "proto3";

package probe.v1;

import "google/protobuf/duration.proto";

option java_multiple_files = true;
option java_outer_classname = "ProbeProto";

message SessionTool {
  string descriptor = 1;
}

message Clashes {
  string reset = 1;
  string class = 2;
  string from = 3;
  string constructor = 4;
  string then = 5;
  string serialized_size = 6;
  repeated string items = 7;
  uint32 items_count = 8;
  string name = 9;
  string get_name = 10;
  string ByteSize = 11;
  oneof kind {
    string text = 12;
  }
  message Text {}
  message Builder {}
  enum Mode {
    MODE_UNSPECIFIED = 0;
    NAME_FIELD_NUMBER = 1;
  }
  google.protobuf.Duration toJSON = 13;
}

message Metadata {}

message Timestamp {}

message ProbeServiceClient {}

message ProbeProto {}

enum Level {
  LEVEL_UNSPECIFIED = 0;
  DESCRIPTOR = 1;
}

service ProbeService {
  rpc Ping(Clashes) returns (Clashes);
}
"""

EXPECTED = {
    ("Java", "probe.v1.SessionTool.descriptor"),  # getDescriptor(): the Java build failure
    ("Go", "probe.v1.SessionTool.descriptor"),  # renamed Descriptor_
    ("Go", "probe.v1.Clashes.reset"),  # renamed Reset_
    ("Java", "probe.v1.Clashes.class"),  # getClass()
    ("Python", "probe.v1.Clashes.class"),  # a keyword
    ("Python", "probe.v1.Clashes.from"),  # a keyword
    ("TypeScript", "probe.v1.Clashes.constructor"),  # Object.prototype.constructor
    ("TypeScript", "probe.v1.Clashes.then"),  # a thenable
    ("TypeScript", "probe.v1.Clashes.toJSON"),  # what JSON.stringify calls
    ("TypeScript", "probe.v1.Timestamp"),  # the well-known type's import
    ("Java", "probe.v1.Clashes.serialized_size"),  # getSerializedSize()
    ("Java", "probe.v1.Clashes.items_count"),  # getItemsCount() of repeated items
    ("Go", "probe.v1.Clashes.get_name"),  # GetName, the getter of name
    ("Python", "probe.v1.Clashes.ByteSize"),  # Message.ByteSize
    ("Go", "probe.v1.Clashes.Text"),  # Clashes_Text, the wrapper of oneof field text
    ("Java", "probe.v1.Clashes.Builder"),  # Clashes.Builder
    ("Python", "probe.v1.Clashes.Mode.NAME_FIELD_NUMBER"),  # the constant of field name
    ("TypeScript", "probe.v1.Metadata"),  # grpc-js's Metadata
    ("Go", "probe.v1.ProbeServiceClient"),  # the service's client interface
    ("TypeScript", "probe.v1.ProbeServiceClient"),
    ("Java", "probe.v1.ProbeProto"),  # the outer class
    ("Python", "probe.v1.Level.DESCRIPTOR"),  # the module's DESCRIPTOR
}


@pytest.mark.parametrize(("language", "element"), sorted(EXPECTED))
def test_the_check_catches_a_collision(language: str, element: str, tmp_path: Path) -> None:
    (tmp_path / "protos" / "probe" / "v1").mkdir(parents=True)
    (tmp_path / "protos" / "probe" / "v1" / "probe.proto").write_text(PROBE)
    found = {(c.language, c.element) for c in clashes(build(tmp_path / "protos", tmp_path))}
    assert (language, element) in found, sorted(found)
