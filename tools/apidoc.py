"""Generate the API reference, docs/api.md, from the comments of proto/cronwheel/v1/*.proto.

    python tools/apidoc.py            # (re)write docs/api.md
    python tools/apidoc.py --check    # exit 1 when docs/api.md differs from what would be written

`render() -> str` returns the Markdown; tests/unit/test_apidoc.py fails when the committed
docs/api.md is not exactly `render()`, and checks the parser below against the descriptors protoc
compiled into the generated stubs (every service, RPC, message, field, enum and value).

The comments are the reference (see proto/README.md): a comment block directly above a
declaration (no blank line between) documents it; the first comment block of a file, before
`syntax`, documents the file. Inside a comment, Markdown structure is inferred from the layout
the .proto files already use:

- a blank `//` line separates paragraphs;
- `- item` starts a list item, and lines indented by two more spaces continue it;
- other lines indented by two or more spaces are preformatted (diagrams, formulas);
- `Errors:` at the start of a line starts a paragraph of its own, in bold, as does an
  upper-case lead-in such as `AUTHENTICATION.`.

Text is escaped for Markdown (`<token>` stays visible, `*` stays an asterisk); `backquoted`
spans are kept as code. The parser reads the proto3 the contract uses (services, rpcs, messages
with nested messages, enums, oneofs, maps, options, reserved) and raises on anything else, so a
new construct fails the test instead of vanishing from the reference.

Pure standard library: no protoc, no grpcio-tools needed.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parent
PROTO_ROOT = TOOLS.parent / "proto"
PACKAGE_DIR = PROTO_ROOT / "cronwheel" / "v1"
OUTPUT = PROTO_ROOT.parent / "docs" / "api.md"
# Services first, in the order a reader meets them; then the shared types; then anything new.
FILE_ORDER = ("scheduler.proto", "dispatch.proto", "admin.proto", "common.proto")
HTTP_VERBS = frozenset({"get", "put", "post", "delete", "patch"})
SCALARS = frozenset({"double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32",
                     "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes"})


class ProtoSyntaxError(ValueError):
    """The .proto text uses something this parser does not read."""


# ---------------------------------------------------------------------------------- model


@dataclass
class Field:
    name: str
    type: str
    number: int
    label: str = ""  # "", "repeated", "optional", "map"
    oneof: str = ""
    doc: list[str] = field(default_factory=list)


@dataclass
class EnumValue:
    name: str
    number: int
    doc: list[str] = field(default_factory=list)


@dataclass
class Enum:
    name: str  # qualified within the package, e.g. "Outer.Kind"
    doc: list[str] = field(default_factory=list)
    values: list[EnumValue] = field(default_factory=list)


@dataclass
class Message:
    name: str  # qualified within the package, e.g. "Outer.Inner"
    doc: list[str] = field(default_factory=list)
    fields: list[Field] = field(default_factory=list)


@dataclass
class Rpc:
    name: str
    request: str
    response: str
    client_streaming: bool = False
    server_streaming: bool = False
    doc: list[str] = field(default_factory=list)
    http: str = ""  # the google.api.http route, e.g. "POST /v1/schedules" (REST: docs/rest.md)


@dataclass
class Service:
    name: str
    doc: list[str] = field(default_factory=list)
    rpcs: list[Rpc] = field(default_factory=list)


@dataclass
class ProtoFile:
    name: str
    package: str = ""
    doc: list[str] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    enums: list[Enum] = field(default_factory=list)


# ---------------------------------------------------------------------------------- tokens


@dataclass
class _Token:
    kind: str  # "ident", "number", "string", "sym"
    text: str
    line: int
    doc: list[str] | None = None  # the comment block directly above, for a declaration's first token


_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r]+)
  | (?P<nl>\n)
  | (?P<comment>//[^\n]*)
  | (?P<block>/\*)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<number>-?(?:0[xX][0-9A-Fa-f]+|[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?))
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<sym>[{}()\[\]<>;=,.:])
""", re.VERBOSE)


def _comment_text(raw: str) -> str:
    text = raw[2:]
    return text[1:] if text.startswith(" ") else text


def tokenize(source: str, filename: str = "<proto>") -> tuple[list[_Token], list[str]]:
    """Tokens with their leading comment blocks attached, and the file's first comment block."""
    tokens: list[_Token] = []
    blocks: list[tuple[int, int, list[str]]] = []  # (first line, last line, lines)
    trailing: list[tuple[int, str]] = []  # comments on the line of an earlier token
    line, pos = 1, 0
    while pos < len(source):
        m = _TOKEN.match(source, pos)
        if m is None:
            raise ProtoSyntaxError(f"{filename}:{line}: unexpected {source[pos:pos + 20]!r}")
        kind, text = m.lastgroup or "", m.group()
        pos = m.end()
        if kind == "nl":
            line += 1
        elif kind == "block":
            raise ProtoSyntaxError(f"{filename}:{line}: /* */ comments are not supported; use //")
        elif kind == "comment":
            if tokens and tokens[-1].line == line:
                trailing.append((len(tokens) - 1, _comment_text(text)))
            elif blocks and blocks[-1][1] == line - 1 and not (tokens and tokens[-1].line > blocks[-1][1]):
                blocks[-1][2].append(_comment_text(text))
                blocks[-1] = (blocks[-1][0], line, blocks[-1][2])
            else:
                blocks.append((line, line, [_comment_text(text)]))
        elif kind != "ws":
            doc = None
            if blocks and blocks[-1][1] == line - 1 and not (tokens and tokens[-1].line > blocks[-1][1]):
                doc = blocks[-1][2]
            tokens.append(_Token(kind, text, line, doc))
    for index, text in trailing:  # a trailing comment documents the declaration ending on that line
        start = index
        if tokens[start].text == "}":  # a one-line block: go back to its `{`
            depth = 0
            while start > 0:
                depth += (tokens[start].text == "}") - (tokens[start].text == "{")
                if depth == 0:
                    break
                start -= 1
        while start > 0 and tokens[start - 1].text not in (";", "{", "}"):
            start -= 1
        tokens[start].doc = [*(tokens[start].doc or []), *([""] if tokens[start].doc else []), text]
    file_doc = blocks[0][2] if blocks and (not tokens or blocks[0][1] < tokens[0].line) else []
    return tokens, file_doc


# ---------------------------------------------------------------------------------- parser


class _Parser:
    def __init__(self, tokens: list[_Token], filename: str) -> None:
        self.tokens = tokens
        self.i = 0
        self.filename = filename

    def error(self, message: str) -> ProtoSyntaxError:
        tok = self.tokens[min(self.i, len(self.tokens) - 1)] if self.tokens else None
        where = f"{self.filename}:{tok.line}" if tok else self.filename
        return ProtoSyntaxError(f"{where}: {message}")

    def peek(self) -> _Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def next(self) -> _Token:
        tok = self.peek()
        if tok is None:
            raise self.error("unexpected end of file")
        self.i += 1
        return tok

    def expect(self, text: str) -> _Token:
        tok = self.next()
        if tok.text != text:
            self.i -= 1
            raise self.error(f"expected {text!r}, got {tok.text!r}")
        return tok

    def ident(self) -> str:
        tok = self.next()
        if tok.kind != "ident":
            self.i -= 1
            raise self.error(f"expected a name, got {tok.text!r}")
        return tok.text

    def number(self) -> int:
        tok = self.next()
        if tok.kind != "number":
            self.i -= 1
            raise self.error(f"expected a number, got {tok.text!r}")
        return int(tok.text, 0)

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.text == text

    def skip_statement(self) -> None:
        """Up to and including the next `;` at this nesting level (options, reserved, ...)."""
        depth = 0
        while True:
            tok = self.next()
            if tok.text in ("[", "(", "{"):
                depth += 1
            elif tok.text in ("]", ")", "}"):
                depth -= 1
            elif tok.text == ";" and depth == 0:
                return

    def skip_options(self) -> None:
        tok = self.peek()
        if tok is not None and tok.text == "[":
            depth = 0
            while True:
                t = self.next()
                depth += t.text == "["
                depth -= t.text == "]"
                if depth == 0:
                    return

    # ------------------------------------------------------------------ declarations

    def file(self, name: str, doc: list[str]) -> ProtoFile:
        out = ProtoFile(name, doc=doc)
        while (tok := self.peek()) is not None:
            if tok.text == "syntax":
                self.next()
                self.expect("=")
                syntax = self.next().text.strip("\"'")
                if syntax != "proto3":
                    raise self.error(f"only proto3 is supported, got {syntax!r}")
                self.expect(";")
            elif tok.text == "package":
                self.next()
                out.package = self.ident()
                self.expect(";")
            elif tok.text in ("import", "option"):
                self.skip_statement()
            elif tok.text == "service":
                out.services.append(self.service())
            elif tok.text == "message":
                self.message("", out)
            elif tok.text == "enum":
                out.enums.append(self.enum(""))
            elif tok.text == ";":
                self.next()
            else:
                raise self.error(f"unexpected {tok.text!r} at top level")
        return out

    def service(self) -> Service:
        doc = self.expect("service").doc or []
        svc = Service(self.ident(), doc)
        self.expect("{")
        while (tok := self.next()).text != "}":
            if tok.text == "rpc":
                svc.rpcs.append(self.rpc(tok.doc or []))
            elif tok.text == "option":
                self.i -= 1
                self.skip_statement()
            elif tok.text != ";":
                self.i -= 1
                raise self.error(f"unexpected {tok.text!r} in service {svc.name}")
        return svc

    def rpc(self, doc: list[str]) -> Rpc:
        name = self.ident()
        self.expect("(")
        client_streaming = self.at("stream")
        if client_streaming:
            self.next()
        request = self.ident()
        self.expect(")")
        self.expect("returns")
        self.expect("(")
        server_streaming = self.at("stream")
        if server_streaming:
            self.next()
        response = self.ident()
        self.expect(")")
        tok = self.next()
        http = ""
        if tok.text == "{":  # rpc options block: only the HTTP route is read
            depth = 1
            while depth:
                t = self.next()
                depth += t.text == "{"
                depth -= t.text == "}"
                if t.text in HTTP_VERBS and self.at(":") and not http:
                    self.next()
                    http = f"{t.text.upper()} {self.next().text.strip(chr(34))}"
        elif tok.text != ";":
            self.i -= 1
            raise self.error(f"expected ';' after rpc {name}")
        return Rpc(name, request, response, client_streaming, server_streaming, doc, http)

    def message(self, prefix: str, out: ProtoFile) -> None:
        doc = self.expect("message").doc or []
        msg = Message(prefix + self.ident(), doc)
        out.messages.append(msg)
        self.expect("{")
        self.body(msg, out, oneof="")

    def body(self, msg: Message, out: ProtoFile, oneof: str) -> None:
        while (tok := self.peek()) is not None and tok.text != "}":
            if tok.text == "message" and not oneof:
                self.message(msg.name + ".", out)
            elif tok.text == "enum" and not oneof:
                out.enums.append(self.enum(msg.name + "."))
            elif tok.text == "oneof" and not oneof:
                self.next()
                name = self.ident()
                self.expect("{")
                self.body(msg, out, oneof=name)
            elif tok.text in ("option", "reserved", "extensions"):
                self.skip_statement()
            elif tok.text == ";":
                self.next()
            else:
                msg.fields.append(self.field(oneof))
        self.expect("}")

    def field(self, oneof: str) -> Field:
        first = self.peek()
        assert first is not None
        doc = first.doc or []
        label = ""
        if first.text in ("repeated", "optional"):
            label = self.next().text
        elif first.text == "required":
            raise self.error("`required` is not proto3")
        if self.at("map"):
            self.next()
            self.expect("<")
            key = self.ident()
            self.expect(",")
            value = self.ident()
            self.expect(">")
            ftype, label = f"map<{key}, {value}>", "map"
        else:
            ftype = self.ident()
        name = self.ident()
        self.expect("=")
        number = self.number()
        self.skip_options()
        self.expect(";")
        return Field(name, ftype, number, label, oneof, doc)

    def enum(self, prefix: str) -> Enum:
        doc = self.expect("enum").doc or []
        en = Enum(prefix + self.ident(), doc)
        self.expect("{")
        while (tok := self.peek()) is not None and tok.text != "}":
            if tok.text in ("option", "reserved"):
                self.skip_statement()
            elif tok.text == ";":
                self.next()
            else:
                value_doc = tok.doc or []
                name = self.ident()
                self.expect("=")
                number = self.number()
                self.skip_options()
                self.expect(";")
                en.values.append(EnumValue(name, number, value_doc))
        self.expect("}")
        return en


def parse(source: str, name: str = "<proto>") -> ProtoFile:
    tokens, file_doc = tokenize(source, name)
    return _Parser(tokens, name).file(name, file_doc)


def proto_files() -> list[Path]:
    """The contract's .proto files in reference order (FILE_ORDER, then any others by name)."""
    paths = {p.name: p for p in PACKAGE_DIR.glob("*.proto")}
    order = [n for n in FILE_ORDER if n in paths] + sorted(set(paths) - set(FILE_ORDER))
    return [paths[n] for n in order]


def parse_all() -> list[ProtoFile]:
    return [parse(p.read_text(encoding="utf-8"), p.name) for p in proto_files()]


# ---------------------------------------------------------------------------------- Markdown


_CODE_SPAN = re.compile(r"(`[^`]*`)")
_LEAD_IN = re.compile(r"^([A-Z][A-Z ]*[A-Z](?: [a-z][\w.]*)*[.:])(?= |$)")


def escape(text: str) -> str:
    """Markdown-escape plain text, keeping `code spans` as they are."""
    parts = _CODE_SPAN.split(text)
    for k in range(0, len(parts), 2):
        s = parts[k].replace("\\", "\\\\").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        s = re.sub(r"([*\[\]])", r"\\\1", s)
        s = re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", s)
        parts[k] = s
    return "".join(parts)


def _line_start(text: str) -> str:
    """Escape what would make a line of (already escaped) text start a block of its own."""
    if re.match(r"#|\+ |=+$|-+$", text):
        return "\\" + text
    m = re.match(r"\d+([.)])(?: |$)", text)  # an ordered-list marker
    if m:
        return text[:m.start(1)] + "\\" + text[m.start(1):]
    return text


def _lead_in(text: str) -> str | None:
    """The bold lead-in of a paragraph: `Errors:`, or an upper-case word of 4+ letters opening a
    phrase that ends in `.` or `:` (`AUTHENTICATION.`, `STATUS CODES.`, `CONVENTIONS used ...:`)."""
    if text.startswith("Errors:"):
        return "Errors:"
    m = _LEAD_IN.match(text)
    if m and len(m.group(1).split()[0]) > 3:
        return m.group(1)
    return None


def _inline(text: str, paragraph_start: bool = False) -> str:
    text = text.strip()
    lead = _lead_in(text) if paragraph_start else None
    if lead:
        return f"**{escape(lead)}**" + escape(text[len(lead):])
    return _line_start(escape(text))


def comment_blocks(lines: list[str]) -> list[list[str]]:
    """A comment's lines as Markdown blocks (paragraphs, lists, preformatted), each a list of lines."""
    blocks: list[tuple[str, list[str]]] = []  # (kind, lines); kind: "p", "list", "code"
    kind = ""  # the kind of the block being extended; "" after a blank line

    def start(new_kind: str) -> list[str]:
        nonlocal kind
        blocks.append((new_kind, []))
        kind = new_kind
        return blocks[-1][1]

    for raw in lines:
        line = raw.rstrip()
        if not line.strip():
            kind = ""
            continue
        indent = len(line) - len(line.lstrip(" "))
        text = line.strip()
        if indent == 0 and text.startswith("- "):
            (blocks[-1][1] if kind == "list" else start("list")).append("- " + _inline(text[2:]))
        elif kind == "list" and indent >= 2:
            blocks[-1][1].append("  " + _inline(text))
        elif indent >= 2:
            (blocks[-1][1] if kind == "code" else start("code")).append(line)
        elif kind != "p" or text.startswith("Errors:") or (kind == "" and _lead_in(text)):
            start("p").append(_inline(text, paragraph_start=True))
        else:
            blocks[-1][1].append(_inline(text))
    out = []
    for k, b in blocks:
        if k == "code":
            pad = min(len(x) - len(x.lstrip(" ")) for x in b)
            out.append(["```text", *(x[pad:] for x in b), "```"])
        else:
            out.append(b)
    return out


def _doc(lines: list[str]) -> list[str]:
    """A comment as Markdown lines, blocks separated by blank lines."""
    out: list[str] = []
    for b in comment_blocks(lines):
        if out:
            out.append("")
        out.extend(b)
    return out


def _indented(lines: list[str]) -> list[str]:
    return [("  " + x) if x else "" for x in lines]


class _Renderer:
    def __init__(self, files: list[ProtoFile]) -> None:
        self.files = files
        self.package = files[0].package if files else ""
        self.types = {m.name for f in files for m in f.messages} | {e.name for f in files for e in f.enums}
        self.out: list[str] = []

    def anchor(self, name: str) -> str:
        return f"{self.package}.{name}"

    def type_ref(self, t: str) -> str:
        if t.startswith("map<"):
            key, value = t[4:-1].split(", ")
            return f"map&lt;{self.type_ref(key)}, {self.type_ref(value)}&gt;"
        local = t.removeprefix(".").removeprefix(self.package + ".")
        if local in self.types:
            return f"[{local}](#{self.anchor(local)})"
        return f"`{t}`"

    def emit(self, *lines: str) -> None:
        self.out.extend(lines)

    def heading(self, level: int, anchor: str, title: str) -> None:
        self.emit(f'<a id="{anchor}"></a>', "", f"{'#' * level} {title}", "")

    def doc(self, lines: list[str]) -> None:
        if lines:
            self.emit(*_doc(lines), "")

    def item(self, head: str, doc: list[str]) -> None:
        """A list item: `head` then the comment; its first paragraph joins the head line."""
        blocks = comment_blocks(doc)
        first = ""
        if blocks and not blocks[0][0].startswith(("- ", "```", "**")):
            first = " — " + " ".join(blocks.pop(0))
        self.emit(f"- {head}{first}")
        for b in blocks:
            self.emit("", *_indented(b))

    def render(self) -> str:
        self.emit(
            f"# API reference: `{self.package}`",
            "",
            "<!-- Generated by tools/apidoc.py from the comments in proto/cronwheel/v1/*.proto. Do not edit:",
            "     change the .proto comments, then run `python tools/apidoc.py`. -->",
            "",
            "The gRPC contract of cronwheel, generated from the comments of the `.proto` files, which are",
            "the reference. Each service section lists its RPCs with their status codes; messages and",
            "enums follow, by file. Where the implementation does not (yet) do what a comment says,",
            "[semantics.md](semantics.md#where-the-proto-comments-and-the-code-differ) lists it.",
            "",
            "## Contents",
            "",
        )
        for f in self.files:
            for svc in f.services:
                rpcs = ", ".join(f"[{r.name}](#{self.anchor(svc.name + '.' + r.name)})" for r in svc.rpcs)
                self.emit(f"- [{svc.name}](#{self.anchor(svc.name)}) (`{f.name}`): {rpcs}")
        for f in self.files:
            types = [m.name for m in f.messages if not m.name.endswith(("Request", "Response"))]
            types += [e.name for e in f.enums]
            if types:
                self.emit(f"- Types in `{f.name}`: " + ", ".join(f"[{t}](#{self.anchor(t)})" for t in types))
        self.emit("")
        for f in self.files:
            self.file(f)
        while self.out and not self.out[-1]:
            self.out.pop()
        return "\n".join(self.out) + "\n"

    def file(self, f: ProtoFile) -> None:
        self.heading(2, f"file-{f.name.replace('.', '-')}", f"`{f.name}`")
        self.doc(f.doc)
        for svc in f.services:
            self.heading(3, self.anchor(svc.name), f"service {svc.name}")
            self.doc(svc.doc)
            for r in svc.rpcs:
                self.rpc(svc, r)
        if f.messages or f.enums:
            self.emit(f"### Messages and enums of `{f.name}`", "")
        for m in f.messages:
            self.message(m)
        for e in f.enums:
            self.enum(e)

    def rpc(self, svc: Service, r: Rpc) -> None:
        self.heading(4, self.anchor(f"{svc.name}.{r.name}"), f"{svc.name}.{r.name}")
        req = ("stream " if r.client_streaming else "") + self.type_ref(r.request)
        resp = ("stream " if r.server_streaming else "") + self.type_ref(r.response)
        self.emit(f"`rpc {r.name}(`{req}`) returns (`{resp}`)`", "")
        if r.http:
            self.emit(f"HTTP/JSON: `{r.http}`", "")
        self.doc(r.doc)

    def message(self, m: Message) -> None:
        self.heading(4, self.anchor(m.name), f"message {m.name}")
        self.doc(m.doc)
        if not m.fields:
            self.emit("No fields.", "")
            return
        for fl in m.fields:
            label = f"{fl.label} " if fl.label in ("repeated", "optional") else ""
            where = f", one of `{fl.oneof}`" if fl.oneof else ""
            self.item(f"**`{fl.name}`** ({label}{self.type_ref(fl.type)}, field {fl.number}{where})", fl.doc)
        self.emit("")

    def enum(self, e: Enum) -> None:
        self.heading(4, self.anchor(e.name), f"enum {e.name}")
        self.doc(e.doc)
        for v in e.values:
            self.item(f"**`{v.name}`** = {v.number}", v.doc)
        self.emit("")


def render(files: list[ProtoFile] | None = None) -> str:
    """docs/api.md as it should be: the Markdown reference of every .proto file of the contract,
    then (for the contract itself, files=None) the Python client's section (tools/clientdoc.py)."""
    text = _Renderer(parse_all() if files is None else files).render()
    return text if files is not None else text + "\n" + "\n".join(_clientdoc().render(escape)).rstrip() + "\n"


def _clientdoc() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("cronwheel_clientdoc", TOOLS / "clientdoc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    text = render()
    if argv[1:] == ["--check"]:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is stale: run `python tools/apidoc.py`", file=sys.stderr)
            return 1
        return 0
    if argv[1:]:
        print("usage: python tools/apidoc.py [--check]", file=sys.stderr)
        return 2
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(PROTO_ROOT.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
