"""Holds frontend/onnx/onnx.proto, f8c's subset of ONNX's model format, against the descriptors
of the installed onnx package, so the subset cannot drift from the specification: every message,
field (name, number, scalar or message type, label, oneof, packed) and enum value declared in the
subset must be in ONNX exactly so. What ONNX has and the subset leaves out is fine (the parser
skips unknown fields).

The .proto is read by a small tokenizer and recursive-descent parser that knows the constructs the
subset uses (syntax, package, message, enum, oneof, fields with [packed = ...]) and fails on
anything else, so a construct it does not understand cannot slip through unchecked.

usage: check_proto.py SOURCE_DIR
"""
import os
import re
import sys

import onnx
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402  (tests/checks.py)

source = sys.argv[1]
proto_path = os.path.join(source, "frontend", "onnx", "onnx.proto")




# The .proto, parsed.

TOKEN = re.compile(r"""\s*(?:
    (//[^\n]*) | (/\*.*?\*/)            # comments
    | ("(?:[^"\\]|\\.)*")              # a string
    | ([A-Za-z_][\w.]*) | (-?\d+) | (.)  # a word, a number, punctuation
)""", re.S | re.X)


def tokenize(text):
    """(kind, text, line) tokens; comments dropped."""
    tokens, pos = [], 0
    while pos < len(text):
        match = TOKEN.match(text, pos)
        if not match or match.end() == pos:
            break
        pos = match.end()
        line = text.count("\n", 0, match.start(match.lastindex)) + 1
        comment, block, string, word, number, punct = match.groups()
        if string is not None:
            tokens.append(("string", string[1:-1], line))
        elif word is not None:
            tokens.append(("word", word, line))
        elif number is not None:
            tokens.append(("number", int(number), line))
        elif punct is not None and not punct.isspace():
            tokens.append(("punct", punct, line))
    return tokens


class ProtoError(Exception):
    pass


class Parser:
    def __init__(self, tokens):
        self.tokens, self.i = tokens, 0

    def peek(self):
        return self.tokens[self.i] if self.i < len(self.tokens) else ("end", None, -1)

    def take(self, kind=None, text=None):
        token = self.peek()
        if (kind and token[0] != kind) or (text is not None and token[1] != text):
            want = repr(text) if text is not None else kind
            raise ProtoError(f"onnx.proto:{token[2]}: expected {want}, found {token[1]!r}")
        self.i += 1
        return token[1]

    def file(self):
        """{'syntax', 'package', 'messages': {name: message}, 'enums': {name: enum}}"""
        result = {"syntax": None, "package": None, "messages": {}, "enums": {}}
        while self.peek()[0] != "end":
            word = self.take("word")
            if word == "syntax":
                self.take("punct", "=")
                result["syntax"] = self.take("string")
                self.take("punct", ";")
            elif word == "package":
                result["package"] = self.take("word")
                self.take("punct", ";")
            elif word == "message":
                name, message = self.message()
                result["messages"][name] = message
            elif word == "enum":
                name, values = self.enum()
                result["enums"][name] = values
            else:
                raise ProtoError(f"onnx.proto:{self.tokens[self.i - 1][2]}: unexpected '{word}'")
        return result

    def message(self):
        name = self.take("word")
        message = {"fields": [], "messages": {}, "enums": {}}
        self.take("punct", "{")
        while self.peek()[1] != "}":
            word = self.peek()[1]
            if word == "message":
                self.take()
                nested, body = self.message()
                message["messages"][nested] = body
            elif word == "enum":
                self.take()
                nested, values = self.enum()
                message["enums"][nested] = values
            elif word == "oneof":
                self.take()
                oneof = self.take("word")
                self.take("punct", "{")
                while self.peek()[1] != "}":
                    message["fields"].append(self.field(oneof, labelled=False))
                self.take("punct", "}")
            else:
                message["fields"].append(self.field(None, labelled=True))
        self.take("punct", "}")
        return name, message

    def field(self, oneof, labelled):
        line = self.peek()[2]
        label = self.take("word") if labelled else "optional"
        if label not in ("optional", "repeated", "required"):
            raise ProtoError(f"onnx.proto:{line}: a proto2 field needs a label, found '{label}'")
        field = {"label": label, "type": self.take("word"), "name": self.take("word"),
                 "oneof": oneof, "packed": False, "line": line}
        self.take("punct", "=")
        field["number"] = self.take("number")
        if self.peek()[1] == "[":
            self.take()
            while True:
                option = self.take("word")
                self.take("punct", "=")
                value = self.take("word")
                if option != "packed" or value not in ("true", "false"):
                    raise ProtoError(f"onnx.proto:{line}: unexpected option {option} = {value}")
                field["packed"] = value == "true"
                if self.peek()[1] != ",":
                    break
                self.take()
            self.take("punct", "]")
        self.take("punct", ";")
        return field

    def enum(self):
        name = self.take("word")
        values = {}
        self.take("punct", "{")
        while self.peek()[1] != "}":
            value = self.take("word")
            self.take("punct", "=")
            values[value] = self.take("number")
            self.take("punct", ";")
        self.take("punct", "}")
        return name, values


# Comparison with the descriptors.

SCALARS = {
    "double": FieldDescriptor.TYPE_DOUBLE, "float": FieldDescriptor.TYPE_FLOAT,
    "int64": FieldDescriptor.TYPE_INT64, "uint64": FieldDescriptor.TYPE_UINT64,
    "int32": FieldDescriptor.TYPE_INT32, "fixed64": FieldDescriptor.TYPE_FIXED64,
    "fixed32": FieldDescriptor.TYPE_FIXED32, "bool": FieldDescriptor.TYPE_BOOL,
    "string": FieldDescriptor.TYPE_STRING, "bytes": FieldDescriptor.TYPE_BYTES,
    "uint32": FieldDescriptor.TYPE_UINT32, "sfixed32": FieldDescriptor.TYPE_SFIXED32,
    "sfixed64": FieldDescriptor.TYPE_SFIXED64, "sint32": FieldDescriptor.TYPE_SINT32,
    "sint64": FieldDescriptor.TYPE_SINT64,
}
SCALAR_NAMES = {number: name for name, number in SCALARS.items()}


def label_of(field):
    """optional / repeated / required, through whichever API this protobuf release has."""
    if hasattr(field, "is_repeated"):
        return "repeated" if field.is_repeated else "required" if field.is_required else "optional"
    return {FieldDescriptor.LABEL_OPTIONAL: "optional", FieldDescriptor.LABEL_REQUIRED: "required",
            FieldDescriptor.LABEL_REPEATED: "repeated"}[field.label]


def packed_of(field):
    if hasattr(field, "is_packed"):
        return bool(field.is_packed)
    return field.has_options and field.GetOptions().packed


def resolve(scope, type_name, ours):
    """The path (as a list of names) of message or enum `type_name` used in message `scope`
    (a path), by protobuf's rule: innermost scope first. None when the subset lacks it."""
    parts = type_name.split(".")
    for depth in range(len(scope), -1, -1):
        node = {"messages": ours["messages"], "enums": ours["enums"]}
        path = scope[:depth]
        for name in path:
            node = node["messages"][name]
        found, inner = True, node
        for k, part in enumerate(parts):
            last = k == len(parts) - 1
            if part in inner["messages"]:
                inner = inner["messages"][part]
            elif last and part in inner["enums"]:
                inner = None
            else:
                found = False
                break
        if found:
            return path + parts
    return None


def check_enum(where, ours, theirs):
    check(theirs is not None, f"enum {where} exists in onnx")
    if theirs is None:
        return
    by_name = {value.name: value.number for value in theirs.values}
    for name, number in ours.items():
        check(name in by_name, f"enum value {where}.{name} exists in onnx",
              f"onnx's {where} has {sorted(by_name)}")
        if name in by_name:
            check(by_name[name] == number, f"{where}.{name} = {number}",
                  f"onnx says {where}.{name} = {by_name[name]}")


def check_message(path, ours, theirs, root):
    where = ".".join(path)
    check(theirs is not None, f"message {where} exists in onnx")
    if theirs is None:
        return
    for field in ours["fields"]:
        name = f"{where}.{field['name']}"
        other = theirs.fields_by_name.get(field["name"])
        check(other is not None, f"field {name} exists in onnx",
              f"onnx.proto:{field['line']}; onnx's {where} has {sorted(theirs.fields_by_name)}")
        if other is None:
            continue
        check(other.number == field["number"], f"{name} = {field['number']}",
              f"onnx.proto:{field['line']}: onnx numbers it {other.number}")
        check(label_of(other) == field["label"], f"{name} is {field['label']}",
              f"onnx.proto:{field['line']}: onnx says {label_of(other)}")
        their_oneof = other.containing_oneof.name if other.containing_oneof else None
        check(their_oneof == field["oneof"], f"{name} in oneof {field['oneof']}",
              f"onnx.proto:{field['line']}: onnx has it in oneof {their_oneof}")
        check(packed_of(other) == field["packed"], f"{name} packed={field['packed']}",
              f"onnx.proto:{field['line']}: onnx has packed={packed_of(other)}")
        if field["type"] in SCALARS:
            their_type = other.message_type or other.enum_type
            their_name = their_type.full_name if their_type else SCALAR_NAMES.get(other.type)
            check(other.type == SCALARS[field["type"]], f"{name} is {field['type']}",
                  f"onnx.proto:{field['line']}: onnx's type is {their_name}")
            continue
        target = resolve(path, field["type"], root)
        check(target is not None, f"{name}: type {field['type']} is declared in onnx.proto",
              f"onnx.proto:{field['line']}")
        if target is None:
            continue
        # The same type, by its full name in each file's package.
        their_type = other.message_type or other.enum_type
        ours_full = ".".join(target)
        theirs_full = their_type.full_name.split(".", 1)[1] if their_type else None
        check(theirs_full == ours_full, f"{name} has type {ours_full}",
              f"onnx.proto:{field['line']}: onnx's type is {theirs_full}")
    for nested, body in ours["messages"].items():
        check_message(path + [nested], body, theirs.nested_types_by_name.get(nested), root)
    for nested, values in ours["enums"].items():
        check_enum(f"{where}.{nested}", values, theirs.enum_types_by_name.get(nested))


with open(proto_path, encoding="utf-8") as file:
    text = file.read()
try:
    ours = Parser(tokenize(text)).file()
except ProtoError as error:
    print(f"FAIL {proto_path} parses: {error}")
    print("0 passed, 1 failed")
    sys.exit(1)

onnx_file = onnx.ModelProto.DESCRIPTOR.file
file_proto = descriptor_pb2.FileDescriptorProto.FromString(onnx_file.serialized_pb)
check(ours["syntax"] == (file_proto.syntax or "proto2"), f"syntax {ours['syntax']}",
      f"onnx's {onnx_file.name} is {file_proto.syntax or 'proto2'}")
check(ours["package"] and ours["package"] != onnx_file.package,
      "the subset has a package of its own (its C names cannot clash with a real onnx build)")
check(len(ours["messages"]) >= 10, "the parser found the messages", str(list(ours["messages"])))
for name, message in ours["messages"].items():
    check_message([name], message, onnx_file.message_types_by_name.get(name), ours)
for name, values in ours["enums"].items():
    check_enum(name, values, onnx_file.enum_types_by_name.get(name))

print(f"checked {proto_path} against onnx {onnx.__version__} ({onnx_file.name})")
sys.exit(finish())
