//===- Parser.cpp - YAML spec -> checked Spec
//------------------------------===//
//
// Three phases, each reporting every problem it finds rather than the first:
//   1. YAML text -> a located node tree (yaml-cpp, guarded against junk,
//      depth and size);
//   2. the top-level keys, source and steps are resolved against the op
//      registry and their parameters validated generically from ParamSpecs;
//   3. each op's type rule computes the record type after it.
// Once a step's type rule has failed, the record type after it is uncertain:
// later "unknown field" errors are suppressed so that one mistake does not
// cascade into many.
//
//===----------------------------------------------------------------------===//
#include "sluice/dsl/Spec.h"
#include "sluice/ops/Allocation.h"
#include "sluice/ops/ConfigFile.h"
#include "sluice/ops/Registry.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::dsl {
namespace {

/// Specs are small; anything this large is a mistake (or an attack).
constexpr size_t kMaxSpecBytes = 4 << 20;
/// Nesting deeper than this is never a pipeline spec.
constexpr int kMaxDepth = 64;

/// A YAML node with its position, independent of yaml-cpp.
struct YNode {
  enum class Kind { Null, Scalar, Seq, Map } kind = Kind::Null;
  std::string text;    ///< scalar text
  bool quoted = false; ///< a quoted/literal scalar: always a string
  SourceLoc loc;
  std::vector<YNode> items;                 ///< Seq
  std::vector<std::pair<YNode, YNode>> map; ///< Map: key node, value node

  const YNode *get(std::string_view key) const {
    for (const auto &kv : map)
      if (kv.first.text == key)
        return &kv.second;
    return nullptr;
  }
  const char *kindName() const {
    switch (kind) {
    case Kind::Null:
      return "nothing";
    case Kind::Scalar:
      return "a scalar";
    case Kind::Seq:
      return "a list";
    case Kind::Map:
      return "a mapping";
    }
    return "?";
  }
};

SourceLoc locOf(const YAML::Mark &m) {
  if (m.line < 0 || m.column < 0)
    return {};
  return {m.line + 1, m.column + 1};
}

/// Builds YNode trees straight from yaml-cpp's parser events. Going through
/// events rather than YAML::LoadAll lets the front end bound everything
/// itself: LoadAll loops forever on a document that starts with ',' (found
/// by tools/fuzz), and aliases could otherwise expand exponentially.
class TreeBuilder : public YAML::EventHandler {
public:
  explicit TreeBuilder(DiagnosticEngine &d) : diags(d) {}

  /// Parsed documents (normally one).
  std::vector<YNode> docs;
  /// Set once an error made the tree unusable; parsing stops.
  bool failed = false;

  void OnDocumentStart(const YAML::Mark &) override {
    docs.emplace_back();
    haveRoot = false;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark &m, YAML::anchor_t anchor) override {
    YNode n;
    n.kind = YNode::Kind::Null;
    n.loc = locOf(m);
    add(std::move(n), anchor);
  }
  void OnAlias(const YAML::Mark &m, YAML::anchor_t anchor) override {
    auto it = anchors.find(anchor);
    if (it == anchors.end()) {
      fail(locOf(m), "alias to an unknown anchor");
      return;
    }
    YNode copy = it->second;
    size_t size = countNodes(copy);
    if (!charge(locOf(m), size))
      return;
    relocate(copy, locOf(m));
    add(std::move(copy), 0, /*counted=*/true);
  }
  void OnScalar(const YAML::Mark &m, const std::string &tag,
                YAML::anchor_t anchor, const std::string &value) override {
    YNode n;
    n.kind = YNode::Kind::Scalar;
    n.loc = locOf(m);
    n.text = value;
    n.quoted = tag == "!";
    add(std::move(n), anchor);
  }
  void OnSequenceStart(const YAML::Mark &m, const std::string &,
                       YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(YNode::Kind::Seq, locOf(m), anchor);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark &m, const std::string &,
                  YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    open(YNode::Kind::Map, locOf(m), anchor);
  }
  void OnMapEnd() override { close(); }

private:
  /// Specs are tiny; these bound pathological inputs.
  static constexpr size_t kMaxNodes = 200000;

  struct Open {
    YNode node;
    YAML::anchor_t anchor;
    bool haveKey = false; ///< maps: a key is waiting for its value
    YNode key;
  };

  void fail(SourceLoc loc, std::string msg, std::string hint = "") {
    if (!failed)
      diags.error(loc, std::move(msg), std::move(hint));
    failed = true;
  }

  bool charge(SourceLoc loc, size_t n) {
    nodes += n;
    if (nodes > kMaxNodes) {
      fail(loc,
           "the spec expands to more than " + std::to_string(kMaxNodes) +
               " YAML nodes",
           "a pipeline spec needs a few hundred; check for runaway aliases "
           "(*name) or generated content");
      return false;
    }
    return true;
  }

  static size_t countNodes(const YNode &n) {
    size_t c = 1;
    for (const auto &i : n.items)
      c += countNodes(i);
    for (const auto &kv : n.map)
      c += countNodes(kv.first) + countNodes(kv.second);
    return c;
  }

  /// An alias reports errors where it is used, not where its anchor was.
  static void relocate(YNode &n, SourceLoc loc) {
    n.loc = loc;
    for (auto &i : n.items)
      relocate(i, loc);
    for (auto &kv : n.map) {
      relocate(kv.first, loc);
      relocate(kv.second, loc);
    }
  }

  void open(YNode::Kind kind, SourceLoc loc, YAML::anchor_t anchor) {
    if (failed || !charge(loc, 1))
      return;
    if (stack.size() >= static_cast<size_t>(kMaxDepth)) {
      fail(loc,
           "the spec is nested more than " + std::to_string(kMaxDepth) +
               " levels deep",
           "a pipeline spec needs only a few levels; check for runaway "
           "brackets or indentation");
      return;
    }
    Open o;
    o.node.kind = kind;
    o.node.loc = loc;
    o.anchor = anchor;
    stack.push_back(std::move(o));
  }

  void close() {
    if (failed || stack.empty())
      return;
    Open o = std::move(stack.back());
    stack.pop_back();
    add(std::move(o.node), o.anchor, /*counted=*/true);
  }

  void add(YNode n, YAML::anchor_t anchor, bool counted = false) {
    if (failed || (!counted && !charge(n.loc, 1)))
      return;
    if (anchor)
      anchors[anchor] = n;
    if (stack.empty()) {
      if (docs.empty())
        docs.emplace_back();
      if (haveRoot) {
        fail(n.loc, "unexpected content after the end of the document");
        return;
      }
      docs.back() = std::move(n);
      haveRoot = true;
      return;
    }
    Open &top = stack.back();
    if (top.node.kind == YNode::Kind::Seq) {
      top.node.items.push_back(std::move(n));
      return;
    }
    if (!top.haveKey) {
      top.key = std::move(n);
      top.haveKey = true;
      return;
    }
    top.haveKey = false;
    YNode key = std::move(top.key);
    if (key.kind != YNode::Kind::Scalar) {
      diags.error(key.loc, std::string("a mapping key must be a plain name, "
                                       "but this key is ") +
                               key.kindName());
      return;
    }
    for (const auto &kv : top.node.map) {
      if (kv.first.text == key.text) {
        diags.error(key.loc, "duplicate key '" + key.text + "'",
                    "each key may appear once in a mapping; remove or merge "
                    "the repeated one");
        return;
      }
    }
    if (!n.loc.valid())
      n.loc = key.loc;
    top.node.map.emplace_back(std::move(key), std::move(n));
  }

  DiagnosticEngine &diags;
  std::vector<Open> stack;
  std::map<YAML::anchor_t, YNode> anchors;
  size_t nodes = 0;
  bool haveRoot = false;
};

std::string quoteList(const std::vector<std::string> &names, size_t max = 12) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < max; ++i) {
    if (i)
      s += ", ";
    s += names[i];
  }
  if (names.size() > max)
    s += ", ...";
  return s;
}

std::string didYouMean(const std::string &word,
                       const std::vector<std::string> &candidates) {
  std::string m = closestMatch(word, candidates);
  return m.empty() ? "" : "; did you mean '" + m + "'?";
}

bool parseInt(const std::string &s, int64_t &out) {
  std::string t = s;
  if (!t.empty() && t[0] == '+')
    t = t.substr(1);
  // Allow digit group separators the way YAML 1.1 users write them: 1_000.
  t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
  if (t.empty())
    return false;
  int base = 10;
  const char *b = t.data(), *e = t.data() + t.size();
  bool neg = false;
  if (*b == '-') {
    neg = true;
    ++b;
  }
  if (e - b > 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X')) {
    base = 16;
    b += 2;
  }
  uint64_t u = 0;
  auto r = std::from_chars(b, e, u, base);
  if (r.ec != std::errc() || r.ptr != e || b == e)
    return false;
  if (neg) {
    if (u > static_cast<uint64_t>(INT64_MAX) + 1)
      return false;
    out = static_cast<int64_t>(0 - u);
  } else {
    if (u > static_cast<uint64_t>(INT64_MAX))
      return false;
    out = static_cast<int64_t>(u);
  }
  return true;
}

bool parseFloat(const std::string &s, double &out) {
  if (s.empty())
    return false;
  std::string t = s;
  if (t == ".inf" || t == "+.inf" || t == ".Inf")
    return out = INFINITY, true;
  if (t == "-.inf" || t == "-.Inf")
    return out = -INFINITY, true;
  if (t == ".nan" || t == ".NaN")
    return out = NAN, true;
  int64_t i;
  if (parseInt(t, i))
    return out = static_cast<double>(i), true;
  char *end = nullptr;
  errno = 0;
  out = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size() && errno == 0;
}

bool parseBool(const std::string &s, bool &out) {
  if (s == "true" || s == "True" || s == "TRUE")
    return out = true, true;
  if (s == "false" || s == "False" || s == "FALSE")
    return out = false, true;
  return false;
}

/// Returns 1 + the offset of the first byte that cannot be in a YAML text
/// (invalid UTF-8, or a C0 control other than tab/LF/CR, or DEL), or 0 when
/// the text is clean. `why` describes the byte.
size_t findNonText(const std::string &s, std::string &why) {
  auto hex = [](unsigned char c) {
    const char *d = "0123456789abcdef";
    return std::string("0x") + d[c >> 4] + d[c & 15];
  };
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
        why = c == 0 ? std::string("a NUL byte") : "the control byte " + hex(c);
        return i + 1;
      }
      ++i;
      continue;
    }
    int len = (c & 0xE0) == 0xC0   ? 2
              : (c & 0xF0) == 0xE0 ? 3
              : (c & 0xF8) == 0xF0 ? 4
                                   : 0;
    bool ok = len != 0 && i + len <= n;
    uint32_t cp = len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; ok && k < len; ++k) {
      unsigned char cc = s[i + k];
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid too.
    if (ok)
      ok = !(len == 2 && cp < 0x80) && !(len == 3 && cp < 0x800) &&
           !(len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) &&
           !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok) {
      why = "the byte " + hex(c) + ", which is not valid UTF-8";
      return i + 1;
    }
    i += len;
  }
  return 0;
}

/// The generic parameter validator and the type-rule context.
class SpecChecker {
public:
  SpecChecker(DiagnosticEngine &d) : diags(d) {
    std::string f = d.fileName();
    size_t slash = f.find_last_of('/');
    baseDir = slash == std::string::npos ? "." : f.substr(0, slash);
    if (baseDir.empty())
      baseDir = "/";
  }

  std::unique_ptr<Spec> run();
  void parseSchedule(const YNode &n, Spec &spec);
  void checkCachePlacement(const Spec &spec);

  DiagnosticEngine &diags;
  std::string baseDir;

private:
  // ---- parameter validation -------------------------------------------
  /// Converts a YAML node into a Value for `spec`; reports and returns false
  /// on mismatch. `input` is the record type for Field checks (null while
  /// the record type is uncertain, or for sources).
  bool convertParam(const ParamSpec &spec, const YNode &n,
                    const RecordType *input, const std::string &opName,
                    Value &out);
  bool checkRange(const ParamSpec &spec, const YNode &n, double v,
                  const std::string &what);
  bool convertScalar(const ParamSpec &spec, ParamKind kind, const YNode &n,
                     const RecordType *input, const std::string &opName,
                     Value &out);
  bool convertStruct(const std::vector<ParamSpec> &members, const YNode &n,
                     const RecordType *input, const std::string &opName,
                     const std::string &what, Value &out);
  bool checkField(const YNode &n, const RecordType *input,
                  const std::string &opName);

  /// Validates an op's parameters; returns the params map.
  bool validateParams(const OpDef &def, const YNode &value, SourceLoc opLoc,
                      const RecordType *input, Value &params);

  bool checkOpEntry(const YNode &entry, const char *what, std::string &opName,
                    SourceLoc &opLoc, const YNode *&value);

  void parseSource(const YNode &n, Spec &spec);
  void parseSteps(const YNode &n, Spec &spec);
  void parseBudget(const YNode &n, Spec &spec);
  void checkStaticSizes(const Spec &spec);
  bool runTypeRule(Step &step, const RecordType &input);

  bool getInt(const YNode &n, const std::string &what, int64_t &out,
              int64_t min);
  void parseDistributed(const YNode &n, Spec &spec);

  bool typesUncertain = false;
};

/// The TypeContext handed to registry type rules.
class StepTypeContext : public TypeContext {
public:
  StepTypeContext(SpecChecker &c, const RecordType &in, const Value &params,
                  SourceLoc opLoc)
      : checker(c), in(in), ps(params), opLoc(opLoc) {}
  const RecordType &input() const override { return in; }
  const Value &params() const override { return ps; }
  void error(const Value &at, std::string message, std::string hint) override {
    checker.diags.error(at.loc().valid() ? at.loc() : opLoc, std::move(message),
                        std::move(hint));
    failed_ = true;
  }
  void errorAtOp(std::string message, std::string hint) override {
    checker.diags.error(opLoc, std::move(message), std::move(hint));
    failed_ = true;
  }
  void errorInString(const Value &at, size_t offset, std::string message,
                     std::string hint) override {
    SourceLoc l = at.loc().valid() ? at.loc() : opLoc;
    if (at.loc().valid())
      l.col += at.contentOffset() + static_cast<int>(offset);
    checker.diags.error(l, std::move(message), std::move(hint));
    failed_ = true;
  }
  bool failed() const override { return failed_; }
  std::string resolvePath(const std::string &path) const override {
    if (path.empty() || path[0] == '/')
      return path;
    return checker.baseDir + "/" + path;
  }

private:
  SpecChecker &checker;
  const RecordType &in;
  const Value &ps;
  SourceLoc opLoc;
  bool failed_ = false;
};

bool SpecChecker::checkRange(const ParamSpec &spec, const YNode &n, double v,
                             const std::string &what) {
  auto fmt = [](double d) {
    std::ostringstream os;
    os << d;
    return os.str();
  };
  bool bad = false;
  std::string need;
  if (spec.min) {
    if (spec.minExclusive ? !(v > *spec.min) : !(v >= *spec.min))
      bad = true;
  }
  if (spec.max) {
    if (spec.maxExclusive ? !(v < *spec.max) : !(v <= *spec.max))
      bad = true;
  }
  if (std::isnan(v))
    bad = true;
  if (!bad)
    return true;
  if (spec.min && spec.max)
    need = std::string("between ") + fmt(*spec.min) +
           (spec.minExclusive ? " (exclusive)" : "") + " and " +
           fmt(*spec.max) + (spec.maxExclusive ? " (exclusive)" : "");
  else if (spec.min)
    need = spec.minExclusive ? "greater than " + fmt(*spec.min)
                             : "at least " + fmt(*spec.min);
  else if (spec.max)
    need = spec.maxExclusive ? "less than " + fmt(*spec.max)
                             : "at most " + fmt(*spec.max);
  else
    need = "a number";
  diags.error(n.loc, what + " must be " + need + ", got " + n.text);
  return false;
}

bool SpecChecker::checkField(const YNode &n, const RecordType *input,
                             const std::string &opName) {
  if (!input)
    return true; // uncertain record type: cannot tell
  if (input->find(n.text))
    return true;
  diags.error(n.loc,
              "'" + opName + "': no field '" + n.text + "' in the record" +
                  didYouMean(n.text, input->names()),
              "the record has: " + input->str());
  return false;
}

bool SpecChecker::convertScalar(const ParamSpec &spec, ParamKind kind,
                                const YNode &n, const RecordType *input,
                                const std::string &opName, Value &out) {
  std::string what = "'" + spec.name + "'";
  if (n.kind != YNode::Kind::Scalar) {
    std::string expected;
    switch (kind) {
    case ParamKind::Bool:
      expected = "true or false";
      break;
    case ParamKind::Int:
      expected = "an integer";
      break;
    case ParamKind::Float:
      expected = "a number";
      break;
    case ParamKind::Size:
      expected = "a size such as 512MiB or 4GiB";
      break;
    case ParamKind::Field:
      expected = "a field name";
      break;
    case ParamKind::DType:
      expected = "an element type (u8, i32, i64, f32, ...)";
      break;
    case ParamKind::Enum:
      expected = "one of " + quoteList(spec.choices);
      break;
    default:
      expected = "a string";
    }
    diags.error(n.loc, what + " of '" + opName + "' must be " + expected +
                           ", but it is " + n.kindName());
    return false;
  }
  const std::string &t = n.text;
  switch (kind) {
  case ParamKind::Bool: {
    bool b;
    if (n.quoted || !parseBool(t, b)) {
      diags.error(n.loc, what + " must be true or false, got '" + t + "'");
      return false;
    }
    out = Value::boolean(b, n.loc);
    return true;
  }
  case ParamKind::Int: {
    int64_t i;
    if (n.quoted || !parseInt(t, i)) {
      double d;
      std::string extra = (!n.quoted && parseFloat(t, d))
                              ? " (a whole number, without a fraction)"
                              : "";
      diags.error(n.loc,
                  what + " must be an integer" + extra + ", got '" + t + "'");
      return false;
    }
    if (!checkRange(spec, n, static_cast<double>(i), what))
      return false;
    out = Value::integer(i, n.loc);
    return true;
  }
  case ParamKind::Float: {
    double d;
    if (n.quoted || !parseFloat(t, d)) {
      diags.error(n.loc, what + " must be a number, got '" + t + "'");
      return false;
    }
    if (!checkRange(spec, n, d, what))
      return false;
    out = Value::real(d, n.loc);
    return true;
  }
  case ParamKind::Size: {
    auto bytes = parseByteSize(t);
    if (!bytes) {
      diags.error(n.loc, what + ": '" + t + "' is not a size",
                  "write a number of bytes with an optional unit: 1000000, "
                  "64KiB, 512MiB, 4GiB (KB/MB/GB are powers of 1000)");
      return false;
    }
    if (!checkRange(spec, n, static_cast<double>(*bytes), what))
      return false;
    out = Value::integer(*bytes, n.loc);
    return true;
  }
  case ParamKind::Enum: {
    if (std::find(spec.choices.begin(), spec.choices.end(), t) ==
        spec.choices.end()) {
      diags.error(n.loc, what + " must be one of " + quoteList(spec.choices) +
                             ", got '" + t + "'" + didYouMean(t, spec.choices));
      return false;
    }
    out = Value::string(t, n.loc);
    return true;
  }
  case ParamKind::DType: {
    if (!parseElemType(t)) {
      std::vector<std::string> names;
      for (auto nm : allElemTypeNames())
        names.emplace_back(nm);
      diags.error(n.loc,
                  what + ": unknown element type '" + t + "'" +
                      didYouMean(t, names),
                  "element types: " + quoteList(names, 20));
      return false;
    }
    out = Value::string(t, n.loc);
    return true;
  }
  case ParamKind::Field:
    if (!checkField(n, input, opName))
      return false;
    out = Value::string(t, n.loc);
    return true;
  case ParamKind::String:
  case ParamKind::Expr:
    out = Value::string(t, n.loc);
    out.setContentOffset(n.quoted ? 1 : 0);
    if (kind == ParamKind::Expr &&
        t.find_first_not_of(" \t") == std::string::npos) {
      diags.error(n.loc, what + " of '" + opName + "' is an empty expression");
      return false;
    }
    return true;
  default:
    break;
  }
  diags.error(n.loc, "internal: unhandled parameter kind");
  return false;
}

bool SpecChecker::convertStruct(const std::vector<ParamSpec> &members,
                                const YNode &n, const RecordType *input,
                                const std::string &opName,
                                const std::string &what, Value &out) {
  out = Value::map(n.loc);
  if (n.kind != YNode::Kind::Map) {
    diags.error(n.loc, what + " must be a mapping, but it is " + n.kindName());
    return false;
  }
  bool ok = true;
  std::vector<std::string> names;
  for (const auto &m : members)
    names.push_back(m.name);
  for (const auto &kv : n.map) {
    const ParamSpec *ms = nullptr;
    for (const auto &m : members)
      if (m.name == kv.first.text)
        ms = &m;
    if (!ms) {
      diags.error(kv.first.loc,
                  "unknown key '" + kv.first.text + "' in " + what +
                      didYouMean(kv.first.text, names),
                  "valid keys: " + quoteList(names));
      ok = false;
      continue;
    }
    Value v;
    if (convertParam(*ms, kv.second, input, opName, v))
      out.set(ms->name, std::move(v));
    else
      ok = false;
  }
  for (const auto &m : members) {
    if (out.has(m.name))
      continue;
    if (m.required) {
      diags.error(n.loc, what + " is missing required key '" + m.name + "'");
      ok = false;
    } else if (m.defaultValue) {
      Value d = *m.defaultValue;
      out.set(m.name, std::move(d));
    }
  }
  return ok;
}

bool SpecChecker::convertParam(const ParamSpec &spec, const YNode &n,
                               const RecordType *input,
                               const std::string &opName, Value &out) {
  std::string what = "'" + spec.name + "'";
  switch (spec.kind) {
  case ParamKind::IntList:
  case ParamKind::FloatList:
  case ParamKind::StringList:
  case ParamKind::FieldList:
  case ParamKind::StructList: {
    ParamKind elemKind = spec.kind == ParamKind::IntList     ? ParamKind::Int
                         : spec.kind == ParamKind::FloatList ? ParamKind::Float
                         : spec.kind == ParamKind::FieldList
                             ? ParamKind::Field
                             : ParamKind::String;
    std::vector<const YNode *> elems;
    bool fromScalar = false;
    if (n.kind == YNode::Kind::Seq) {
      for (const auto &i : n.items)
        elems.push_back(&i);
    } else if (spec.scalarOk && n.kind == YNode::Kind::Scalar) {
      elems.push_back(&n);
      fromScalar = true;
    } else {
      diags.error(n.loc, what + " of '" + opName + "' must be a list" +
                             (spec.scalarOk ? " or a single value" : "") +
                             ", but it is " + n.kindName());
      return false;
    }
    std::vector<Value> vals;
    bool ok = true;
    for (const YNode *e : elems) {
      Value v;
      bool good = spec.kind == ParamKind::StructList
                      ? convertStruct(spec.members, *e, input, opName,
                                      "an entry of " + what, v)
                      : convertScalar(spec, elemKind, *e, input, opName, v);
      if (good)
        vals.push_back(std::move(v));
      ok &= good;
    }
    if (!ok)
      return false;
    if (fromScalar && spec.broadcastTo > 1)
      vals.assign(spec.broadcastTo, vals[0]);
    if (vals.size() < spec.minLen || vals.size() > spec.maxLen) {
      std::string need = spec.minLen == spec.maxLen
                             ? "exactly " + std::to_string(spec.minLen)
                         : spec.maxLen == std::numeric_limits<size_t>::max()
                             ? "at least " + std::to_string(spec.minLen)
                             : "between " + std::to_string(spec.minLen) +
                                   " and " + std::to_string(spec.maxLen);
      diags.error(n.loc, what + " of '" + opName + "' needs " + need +
                             " values, got " + std::to_string(vals.size()));
      return false;
    }
    out = Value::list(std::move(vals), n.loc);
    return true;
  }
  case ParamKind::Struct:
    return convertStruct(spec.members, n, input, opName, what, out);
  case ParamKind::FieldMap: {
    if (n.kind != YNode::Kind::Map) {
      diags.error(n.loc, what + " of '" + opName +
                             "' must be a mapping {old_name: new_name}, but "
                             "it is " +
                             n.kindName());
      return false;
    }
    out = Value::map(n.loc);
    bool ok = true;
    for (const auto &kv : n.map) {
      if (!checkField(kv.first, input, opName)) {
        ok = false;
        continue;
      }
      if (kv.second.kind != YNode::Kind::Scalar || kv.second.text.empty()) {
        diags.error(kv.second.loc, "the new name for field '" + kv.first.text +
                                       "' must be a non-empty name");
        ok = false;
        continue;
      }
      out.set(kv.first.text, Value::string(kv.second.text, kv.second.loc));
    }
    return ok;
  }
  default:
    return convertScalar(spec, spec.kind, n, input, opName, out);
  }
}

bool SpecChecker::validateParams(const OpDef &def, const YNode &value,
                                 SourceLoc opLoc, const RecordType *input,
                                 Value &params) {
  params = Value::map(value.loc.valid() ? value.loc : opLoc);
  bool ok = true;
  std::vector<std::string> names;
  for (const auto &p : def.params)
    names.push_back(p.name);
  const ParamSpec *shortSpec =
      def.shorthand.empty() ? nullptr : def.findParam(def.shorthand);
  // `rename: {image: pixels}`: a mapping whose keys are fields, not params.
  bool mapIsShorthand = shortSpec && shortSpec->kind == ParamKind::FieldMap &&
                        value.kind == YNode::Kind::Map && !value.map.empty() &&
                        !def.findParam(value.map[0].first.text);
  std::set<std::string> written;
  if (value.kind == YNode::Kind::Map && !mapIsShorthand) {
    for (const auto &kv : value.map) {
      const ParamSpec *ps = def.findParam(kv.first.text);
      // A parameter's old names (ParamSpec::oldNames) still work, with a
      // note.
      if (!ps) {
        const ParamSpec *renamed = nullptr;
        for (const ParamSpec &p : def.params)
          if (std::find(p.oldNames.begin(), p.oldNames.end(), kv.first.text) !=
              p.oldNames.end())
            renamed = &p;
        if (renamed && !value.map.empty()) {
          ps = renamed;
          if (ps)
            diags.warning(kv.first.loc,
                          "'" + kv.first.text + "' is the old name of '" +
                              ps->name + "' (still accepted)",
                          "every source names its input files `" + ps->name +
                              "`");
        }
      }
      if (!ps) {
        diags.error(kv.first.loc,
                    "'" + def.name + "' has no parameter '" + kv.first.text +
                        "'" + didYouMean(kv.first.text, names),
                    names.empty() ? "'" + def.name + "' takes no parameters"
                                  : "parameters of '" + def.name +
                                        "': " + quoteList(names, 20));
        ok = false;
        continue;
      }
      written.insert(ps->name);
      Value v;
      if (convertParam(*ps, kv.second, input, def.name, v))
        params.set(ps->name, std::move(v));
      else
        ok = false;
    }
  } else if (value.kind != YNode::Kind::Null) {
    if (!shortSpec) {
      diags.error(value.loc,
                  "'" + def.name + "' takes a mapping of parameters, but got " +
                      value.kindName(),
                  def.example.empty() ? "" : "for example: " + def.example);
      return false;
    }
    written.insert(shortSpec->name);
    Value v;
    if (convertParam(*shortSpec, value, input, def.name, v))
      params.set(shortSpec->name, std::move(v));
    else
      ok = false;
  }
  for (const auto &p : def.params) {
    if (written.count(p.name))
      continue;
    if (p.required) {
      diags.error(opLoc,
                  "'" + def.name + "' is missing required parameter '" +
                      p.name + "'",
                  def.example.empty() ? "" : "for example: " + def.example);
      ok = false;
    } else if (p.defaultValue) {
      Value d = *p.defaultValue;
      params.set(p.name, std::move(d));
    }
  }
  return ok;
}

/// An op is written as a single-key mapping `op: params`, or a bare `op`.
bool SpecChecker::checkOpEntry(const YNode &entry, const char *what,
                               std::string &opName, SourceLoc &opLoc,
                               const YNode *&value) {
  static const YNode nullNode;
  if (entry.kind == YNode::Kind::Scalar) {
    opName = entry.text;
    opLoc = entry.loc;
    value = &nullNode;
    return true;
  }
  if (entry.kind != YNode::Kind::Map || entry.map.empty()) {
    diags.error(entry.loc,
                std::string("each ") + what +
                    " must be a mapping `op: {parameters}`, but "
                    "it is " +
                    entry.kindName(),
                std::string("for example: ") +
                    (std::string(what) == "source"
                         ? "source: {csv: {files: data/*.csv, columns: [...]}}"
                         : "- batch: {size: 128}"));
    return false;
  }
  if (entry.map.size() > 1) {
    diags.error(entry.map[1].first.loc,
                std::string("a ") + what + " names exactly one op, but '" +
                    entry.map[1].first.text + "' follows '" +
                    entry.map[0].first.text + "' in the same " + what,
                std::string("put each op in its own list item (`- op: ...`), "
                            "and its parameters in a mapping under it"));
    return false;
  }
  opName = entry.map[0].first.text;
  opLoc = entry.map[0].first.loc;
  value = &entry.map[0].second;
  return true;
}

bool SpecChecker::runTypeRule(Step &step, const RecordType &input) {
  StepTypeContext ctx(*this, input, step.params, step.loc);
  RecordType out;
  if (step.def->typeRule)
    out = step.def->typeRule(ctx);
  else
    out = input;
  if (ctx.failed())
    return false;
  step.outputType = std::move(out);
  return true;
}

void SpecChecker::parseSource(const YNode &n, Spec &spec) {
  std::string kind;
  SourceLoc loc;
  const YNode *value;
  typesUncertain = true;
  if (!checkOpEntry(n, "source", kind, loc, value))
    return;
  spec.source.op = kind;
  spec.source.name = kind;
  spec.source.loc = loc;
  const OpDef *def = Registry::instance().find(kind);
  if (!def || def->kind != OpKind::Source) {
    std::vector<std::string> sources =
        Registry::instance().names(OpKind::Source);
    std::string msg =
        "unknown source kind '" + kind + "'" + didYouMean(kind, sources);
    if (def)
      msg = "'" + kind + "' is a step, not a source";
    diags.error(loc, msg, "sources: " + quoteList(sources, 20));
    return;
  }
  spec.source.def = def;
  RecordType empty;
  if (!validateParams(*def, *value, loc, &empty, spec.source.params))
    return;
  if (!runTypeRule(spec.source, empty))
    return;
  typesUncertain = false;
}

void SpecChecker::parseSteps(const YNode &n, Spec &spec) {
  if (n.kind == YNode::Kind::Null)
    return;
  if (n.kind != YNode::Kind::Seq) {
    diags.error(n.loc,
                std::string("'steps' must be a list of ops, but it is ") +
                    n.kindName(),
                "write each step as a list item: `- decode_image: {field: "
                "data}`");
    return;
  }
  std::map<std::string, int> seen;
  std::vector<std::string> stepOps;
  for (const OpDef *d : Registry::instance().all())
    if (d->kind != OpKind::Source)
      stepOps.push_back(d->name);
  RecordType current = spec.source.outputType;
  for (const YNode &entry : n.items) {
    Step step;
    const YNode *value;
    if (!checkOpEntry(entry, "step", step.op, step.loc, value))
      continue;
    const OpDef *def = Registry::instance().find(step.op);
    if (def && def->internal) {
      diags.error(step.loc,
                  "'" + step.op +
                      "' is internal to the compiler (a graph pass creates "
                      "it by fusing steps); it cannot be written in a spec",
                  "write the steps it fuses instead: " + def->summary);
      typesUncertain = true;
      continue;
    }
    if (!def || def->kind == OpKind::Source) {
      std::string msg =
          "unknown op '" + step.op + "'" + didYouMean(step.op, stepOps);
      if (def)
        msg = "'" + step.op +
              "' is a source; it belongs under 'source:', "
              "not in 'steps'";
      diags.error(step.loc, msg,
                  def ? "" : "run `sluice ops` for the list of ops");
      // The record type after an unknown op is anyone's guess.
      typesUncertain = true;
      continue;
    }
    step.def = def;
    int count = ++seen[step.op];
    step.name = count == 1 ? step.op : step.op + "." + std::to_string(count);
    const RecordType *input = typesUncertain ? nullptr : &current;
    if (!validateParams(*def, *value, step.loc, input, step.params)) {
      // Bad parameters make the output type unknowable for ops that change
      // the record; record ops that only reorder keep it.
      if (def->kind == OpKind::Element)
        typesUncertain = true;
      spec.steps.push_back(std::move(step));
      continue;
    }
    if (!typesUncertain) {
      if (runTypeRule(step, current))
        current = step.outputType;
      else
        typesUncertain = true;
    }
    spec.steps.push_back(std::move(step));
  }
}

bool SpecChecker::getInt(const YNode &n, const std::string &what, int64_t &out,
                         int64_t min) {
  if (n.kind != YNode::Kind::Scalar || n.quoted || !parseInt(n.text, out)) {
    diags.error(n.loc, what + " must be an integer, got " +
                           (n.kind == YNode::Kind::Scalar ? "'" + n.text + "'"
                                                          : n.kindName()));
    return false;
  }
  if (out < min) {
    diags.error(n.loc, what + " must be at least " + std::to_string(min) +
                           ", got " + n.text);
    return false;
  }
  return true;
}

/// A step whose output type is static and cannot fit in budget.memory (or
/// the default budget) could not process one record: a spec error at the
/// step, found before anything runs. Reported once, at the first such step.
void SpecChecker::checkStaticSizes(const Spec &spec) {
  int64_t limit = spec.budget.memoryBytes > 0 ? spec.budget.memoryBytes
                                              : defaultMemoryBudget();
  // A prefetch no budget could hold whatever the records (the runtime
  // makes the same check before it allocates the queue's slots).
  int64_t most = std::max<int64_t>(1, limit / kMinBufferedRecordBytes);
  for (const auto &[name, sched] : spec.schedule)
    if (sched.prefetch && *sched.prefetch > most)
      diags.error(
          sched.loc,
          "the prefetch of '" + name + "' (" + std::to_string(*sched.prefetch) +
              " records) cannot fit in budget.memory even at " +
              std::to_string(kMinBufferedRecordBytes) + " bytes a record",
          "lower it to <= " + std::to_string(most) +
              " (a few records ride out a slow moment) or raise "
              "budget.memory");
  const Step *steps[1] = {&spec.source};
  std::vector<const Step *> all(steps, steps + 1);
  for (const Step &st : spec.steps)
    all.push_back(&st);
  for (const Step *st : all) {
    if (!st->def)
      continue;
    // A step that groups records (batch, padded_batch) makes at least one
    // row, even when its leading dim is `?`.
    std::string why = recordTypeTooLarge(
        st->outputType, limit, st->def->traits.count == Cardinality::Groups);
    if (why.empty())
      continue;
    diags.error(st->loc, "the output of '" + st->name + "': " + why,
                spec.budget.memoryBytes > 0
                    ? "make the step's output smaller or raise budget.memory"
                    : "no budget.memory is given, so the default applies (" +
                          std::to_string(
                              static_cast<int>(kDefaultMemoryFraction * 100)) +
                          "% of the host's memory); make the step's output "
                          "smaller");
    return;
  }
}

void SpecChecker::parseBudget(const YNode &n, Spec &spec) {
  if (n.kind != YNode::Kind::Map) {
    diags.error(n.loc,
                std::string("'budget' must be a mapping, but it is ") +
                    n.kindName(),
                "for example: budget: {cores: all, memory: 4GiB}");
    return;
  }
  for (const auto &kv : n.map) {
    const std::string &k = kv.first.text;
    const YNode &v = kv.second;
    if (k == "cores") {
      spec.budget.coresLoc = v.loc;
      if (v.kind == YNode::Kind::Scalar && v.text == "all")
        spec.budget.cores = 0;
      else
        getInt(v, "'budget.cores'", spec.budget.cores, 1);
    } else if (k == "memory") {
      spec.budget.memoryLoc = v.loc;
      auto bytes =
          v.kind == YNode::Kind::Scalar ? parseByteSize(v.text) : std::nullopt;
      if (!bytes || *bytes <= 0) {
        diags.error(
            v.loc,
            "'budget.memory': " +
                (v.kind == YNode::Kind::Scalar
                     ? "'" + v.text + "' is not a valid size"
                     : std::string("expected a size, got ") + v.kindName()),
            "write a positive size with a unit: 512MiB, 4GiB, 64GB "
            "(KiB/MiB/GiB are powers of 1024, KB/MB/GB of 1000)");
      } else {
        spec.budget.memoryBytes = *bytes;
      }
    } else {
      diags.error(kv.first.loc,
                  "unknown budget key '" + k + "'" +
                      didYouMean(k, {"cores", "memory"}),
                  "budget keys: cores, memory");
    }
  }
}

void SpecChecker::parseDistributed(const YNode &n, Spec &spec) {
  const char *example = "for example: distributed: {rank: 0, world_size: 4} "
                        "(either may be left to the environment: RANK, "
                        "WORLD_SIZE, JOB_COMPLETION_INDEX)";
  if (n.kind != YNode::Kind::Map) {
    diags.error(n.loc,
                std::string("'distributed' must be a mapping, but it is ") +
                    n.kindName(),
                example);
    return;
  }
  Distributed &d = spec.distributed;
  for (const auto &kv : n.map) {
    const std::string &k = kv.first.text;
    const YNode &v = kv.second;
    int64_t x;
    if (k == "rank") {
      d.rankLoc = v.loc;
      if (getInt(v, "'distributed.rank'", x, 0))
        d.rank = x;
    } else if (k == "world_size") {
      d.worldSizeLoc = v.loc;
      if (getInt(v, "'distributed.world_size'", x, 1))
        d.worldSize = x;
    } else {
      diags.error(kv.first.loc,
                  "unknown distributed key '" + k + "'" +
                      didYouMean(k, {"rank", "world_size"}),
                  "distributed keys: rank, world_size");
    }
  }
  if (d.rank && d.worldSize && *d.rank >= *d.worldSize)
    diags.error(d.rankLoc,
                "'distributed.rank' is " + std::to_string(*d.rank) +
                    ", out of range for world_size " +
                    std::to_string(*d.worldSize),
                "ranks count from 0: rank must be below world_size");
}

void SpecChecker::parseSchedule(const YNode &n, Spec &spec) {
  if (n.kind == YNode::Kind::Scalar) {
    spec.scheduleAutoWritten = n.text == "auto";
    if (n.text != "auto")
      diags.error(n.loc,
                  "'schedule' must be 'auto' or a mapping of steps to "
                  "settings, got '" +
                      n.text + "'",
                  "for example: schedule: {decode_image: {parallelism: 4}, "
                  "default: {prefetch: 2}}");
    return;
  }
  if (n.kind != YNode::Kind::Map) {
    diags.error(n.loc, std::string("'schedule' must be 'auto' or a mapping, "
                                   "but it is ") +
                           n.kindName());
    return;
  }
  spec.scheduleAuto = false;
  std::vector<std::string> stepNames{"default", spec.source.name};
  for (const auto &s : spec.steps)
    stepNames.push_back(s.name);
  for (const auto &kv : n.map) {
    const std::string &name = kv.first.text;
    if (std::find(stepNames.begin(), stepNames.end(), name) ==
        stepNames.end()) {
      diags.error(kv.first.loc,
                  "schedule names no step '" + name + "'" +
                      didYouMean(name, stepNames),
                  "steps are named by their op, with .2, .3 for repeats "
                  "(`sluice check` lists them): " +
                      quoteList(stepNames, 20));
      continue;
    }
    StepSchedule sched;
    sched.loc = kv.first.loc;
    const YNode &v = kv.second;
    if (v.kind != YNode::Kind::Map) {
      diags.error(v.loc, "the schedule of '" + name +
                             "' must be a mapping of parallelism, prefetch, "
                             "cache");
      continue;
    }
    for (const auto &skv : v.map) {
      const std::string &k = skv.first.text;
      int64_t i;
      if (k == "parallelism") {
        if (getInt(skv.second, "'parallelism'", i, 1))
          sched.parallelism = i;
      } else if (k == "prefetch") {
        if (getInt(skv.second, "'prefetch'", i, 0))
          sched.prefetch = i;
      } else if (k == "cache") {
        const YNode &c = skv.second;
        if (c.kind == YNode::Kind::Scalar &&
            (c.text == "memory" || c.text == "disk" || c.text == "none"))
          sched.cache = c.text;
        else
          diags.error(c.loc,
                      "'cache' must be memory, disk or none" +
                          (c.kind == YNode::Kind::Scalar
                               ? didYouMean(c.text, {"memory", "disk", "none"})
                               : std::string()));
      } else {
        diags.error(skv.first.loc,
                    "unknown schedule setting '" + k + "'" +
                        didYouMean(k, {"parallelism", "prefetch", "cache"}),
                    "settings: parallelism, prefetch, cache");
      }
    }
    spec.schedule[name] = sched;
  }
}

/// Whether `step` draws new random numbers (or a new order) in every epoch:
/// a cache after it would replay the first epoch's. A shuffle told not to
/// reshuffle gives every epoch the same order, which a cache keeps exactly.
bool randomEachEpoch(const Step &step) {
  if (!step.def || !step.def->stochastic)
    return false;
  const OpTraits &t = step.def->traits;
  return !(t.sameEachEpoch && t.sameEachEpoch(step.params));
}

/// The rule the autotuner keeps (autotune's cacheOptions): nothing is cached
/// after a random step, by a `cache` step or a schedule's `cache: memory` /
/// `cache: disk` (inline, a schedule file, or `default`). Every later epoch
/// would replay the first epoch's draws and order: silently wrong data, so
/// it is refused with the place to cache instead.
void SpecChecker::checkCachePlacement(const Spec &spec) {
  const Step *firstRandom = nullptr;
  for (const Step &s : spec.steps)
    if (randomEachEpoch(s)) {
      firstRandom = &s;
      break;
    }
  // A source with `shuffle: true` reads in a new order every epoch: no cache
  // may follow it at all.
  const Value &sourceShuffle = spec.source.params["shuffle"];
  if (sourceShuffle.isBool() && sourceShuffle.asBool()) {
    std::string why = "the source '" + spec.source.name + "' (spec line " +
                      std::to_string(spec.source.loc.line) +
                      ") reads in a new random order every epoch (`shuffle: "
                      "true`), so a cache would replay the first epoch's "
                      "order in every later epoch";
    std::string instead = "drop the source's `shuffle: true` and shuffle "
                          "after the cache (a `shuffle` step)";
    for (const Step &s : spec.steps)
      if (s.def && s.def->traits.materializes)
        diags.error(s.loc, "cannot cache here: " + why, instead);
    for (const auto &[name, k] : spec.schedule)
      if (k.cache && (*k.cache == "memory" || *k.cache == "disk"))
        diags.error(k.loc, "cannot cache after '" + name + "': " + why,
                    instead);
    return;
  }
  if (!firstRandom)
    return;
  // The last step before the first random one: where a cache may go.
  const Step *lastFixed = &spec.source;
  for (const Step &s : spec.steps) {
    if (&s == firstRandom)
      break;
    lastFixed = &s;
  }
  auto lineOf = [](const Step &s) { return std::to_string(s.loc.line); };
  std::string why = "'" + firstRandom->name + "' (spec line " +
                    lineOf(*firstRandom) +
                    ") is random, so a cache after it would record the first "
                    "epoch's random draws and order and replay them in every "
                    "later epoch";
  std::string instead =
      "cache after '" + lastFixed->name + "' (spec line " + lineOf(*lastFixed) +
      "), the last step before the first random one: `" + lastFixed->name +
      ": {cache: memory}` in the schedule, or leave the "
      "choice to `schedule: auto`";
  bool after = false; // at or after the first random step
  for (const Step &s : spec.steps) {
    if (&s == firstRandom)
      after = true;
    if (after && s.def && s.def->traits.materializes)
      diags.error(s.loc, "cannot cache here: " + why,
                  "move the `cache` step before '" + firstRandom->name +
                      "' (right after '" + lastFixed->name + "')");
  }
  auto caches = [](const StepSchedule &k) {
    return k.cache && (*k.cache == "memory" || *k.cache == "disk");
  };
  after = false;
  for (const Step &s : spec.steps) {
    if (&s == firstRandom)
      after = true;
    auto it = spec.schedule.find(s.name);
    if (after && it != spec.schedule.end() && caches(it->second))
      diags.error(it->second.loc, "cannot cache after '" + s.name + "': " + why,
                  instead);
  }
  auto def = spec.schedule.find("default");
  if (def != spec.schedule.end() && caches(def->second)) {
    // `default` caches after every step that does not say `cache: none`.
    after = false;
    for (const Step &s : spec.steps) {
      if (&s == firstRandom)
        after = true;
      auto it = spec.schedule.find(s.name);
      if (after && (it == spec.schedule.end() || !it->second.cache)) {
        diags.error(def->second.loc,
                    "'default' cannot set a cache: it would cache after '" +
                        s.name + "', and " + why,
                    instead + " (and drop the cache from 'default')");
        break;
      }
    }
  }
}

/// Reads YAML text into a located tree, refusing what is not a small,
/// single-document UTF-8 text. Reports through `diags`.
bool loadTree(DiagnosticEngine &diags, YNode &top) {
  const std::string &text = diags.sourceText();
  if (text.size() > kMaxSpecBytes) {
    diags.error({},
                "the spec is " + std::to_string(text.size()) +
                    " bytes; specs larger than " +
                    std::to_string(kMaxSpecBytes >> 20) + " MiB are refused",
                "is this the right file? a pipeline spec is a short YAML "
                "document");
    return false;
  }
  // YAML is Unicode text. yaml-cpp 0.7 can loop for minutes on some invalid
  // UTF-8 (found by tools/fuzz), so bytes are checked before it sees them.
  if (std::string why; size_t bad = findNonText(text, why)) {
    size_t pos = bad - 1;
    int line = 1 + static_cast<int>(
                       std::count(text.begin(), text.begin() + pos, '\n'));
    size_t ls = pos == 0 ? std::string::npos : text.rfind('\n', pos - 1);
    int col =
        static_cast<int>(pos - (ls == std::string::npos ? 0 : ls + 1)) + 1;
    diags.error({line, col},
                "the spec contains " + why +
                    ": this is binary data, not YAML text",
                "a spec must be UTF-8 text without control characters");
    return false;
  }
  TreeBuilder builder(diags);
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    // A document with content ends the loop after at most two rounds; the
    // bound also stops yaml-cpp's endless empty documents on stray ','.
    for (int round = 0; round < 3 && !builder.failed; ++round)
      if (!parser.HandleNextDocument(builder))
        break;
  } catch (const YAML::Exception &e) {
    diags.error(locOf(e.mark), "YAML syntax error: " + e.msg);
    return false;
  } catch (const std::exception &e) {
    diags.error({}, std::string("cannot read the spec as YAML: ") + e.what());
    return false;
  }
  if (builder.failed)
    return false;
  if (builder.docs.size() > 1) {
    // Real extra documents follow a '---' marker; otherwise yaml-cpp split
    // the text at a stray flow indicator such as a top-level ','.
    const YNode &extra = builder.docs[1];
    bool marker = text.find("\n---") != std::string::npos ||
                  text.find("\n...") != std::string::npos;
    if (marker)
      diags.error(extra.loc,
                  "the spec holds more than one YAML document; "
                  "exactly one pipeline per file",
                  "remove the extra '---' separated documents");
    else
      diags.error(extra.loc, "YAML syntax error: unexpected text at the top "
                             "level (a stray ',', ']' or '}'?)");
    return false;
  }
  top = builder.docs.empty() ? YNode() : std::move(builder.docs[0]);
  return true;
}

std::unique_ptr<Spec> SpecChecker::run() {
  auto spec = std::make_unique<Spec>();
  spec->file = diags.fileName();
  spec->text = diags.sourceText();
  spec->loc = {1, 1};
  YNode top;
  if (!loadTree(diags, top))
    return nullptr;
  if (top.kind == YNode::Kind::Null) {
    diags.error({1, 1}, "the spec is empty",
                "a spec is a mapping with at least 'pipeline', 'source' and "
                "'steps'; see examples/");
    return nullptr;
  }
  if (top.kind != YNode::Kind::Map) {
    diags.error(top.loc, std::string("the spec must be a mapping with keys "
                                     "pipeline, source, steps, ..., but it "
                                     "is ") +
                             top.kindName());
    return nullptr;
  }
  static const std::vector<std::string> kKeys = {
      "pipeline", "seed",   "source",   "steps",
      "epochs",   "budget", "schedule", "distributed"};
  for (const auto &kv : top.map) {
    if (std::find(kKeys.begin(), kKeys.end(), kv.first.text) == kKeys.end())
      diags.error(kv.first.loc,
                  "unknown top-level key '" + kv.first.text + "'" +
                      didYouMean(kv.first.text, kKeys),
                  "top-level keys: " + quoteList(kKeys));
  }
  if (const YNode *p = top.get("pipeline")) {
    if (p->kind != YNode::Kind::Scalar || p->text.empty())
      diags.error(p->loc, "'pipeline' must be a name");
    else
      spec->pipeline = p->text;
  } else {
    diags.error({1, 1}, "missing 'pipeline' name",
                "start the spec with `pipeline: my_pipeline`");
  }
  if (const YNode *s = top.get("seed")) {
    // Seeds use the whole unsigned 64-bit range, beyond what parseInt reads.
    uint64_t seed = 0;
    const std::string &t = s->text;
    auto r = std::from_chars(t.data(), t.data() + t.size(), seed);
    if (s->kind == YNode::Kind::Scalar && !s->quoted && !t.empty() &&
        r.ec == std::errc() && r.ptr == t.data() + t.size()) {
      spec->seed = seed;
    } else if (s->kind == YNode::Kind::Scalar &&
               r.ec == std::errc::result_out_of_range) {
      diags.error(s->loc, "'seed' must be below 2^64, got " + t);
    } else {
      int64_t signedSeed; // getInt reports negatives and junk
      if (getInt(*s, "'seed'", signedSeed, 0))
        spec->seed = static_cast<uint64_t>(signedSeed);
    }
  }
  if (const YNode *e = top.get("epochs")) {
    int64_t epochs;
    if (getInt(*e, "'epochs'", epochs, 1))
      spec->epochs = epochs;
  }
  if (const YNode *src = top.get("source"))
    parseSource(*src, *spec);
  else {
    diags.error({1, 1}, "missing 'source'",
                "for example: source: {image_folder: {root: data/train}}");
    typesUncertain = true;
  }
  if (const YNode *steps = top.get("steps"))
    parseSteps(*steps, *spec);
  if (const YNode *b = top.get("budget"))
    parseBudget(*b, *spec);
  if (const YNode *s = top.get("schedule"))
    parseSchedule(*s, *spec);
  if (!diags.hasErrors())
    checkCachePlacement(*spec);
  if (const YNode *d = top.get("distributed"))
    parseDistributed(*d, *spec);
  checkStaticSizes(*spec);
  if (diags.hasErrors())
    return nullptr;
  return spec;
}

} // namespace

std::unique_ptr<Spec> parseSpec(DiagnosticEngine &diags) {
  SpecChecker checker(diags);
  return checker.run();
}

bool parseScheduleFile(DiagnosticEngine &diags, const Spec &spec,
                       std::map<std::string, StepSchedule> &out) {
  YNode top;
  if (!loadTree(diags, top))
    return false;
  const YNode *sched = &top;
  if (top.kind == YNode::Kind::Map && top.get("schedule")) {
    for (const auto &kv : top.map) {
      const std::string &k = kv.first.text;
      if (k == "pipeline") {
        if (kv.second.text != spec.pipeline)
          diags.error(kv.second.loc,
                      "this schedule is for pipeline '" + kv.second.text +
                          "', but the spec is '" + spec.pipeline + "'",
                      "tune the spec again, or remove the 'pipeline' line to "
                      "apply the schedule anyway");
      } else if (k != "schedule") {
        diags.error(kv.first.loc,
                    "unknown key '" + k + "' in a schedule file" +
                        didYouMean(k, {"pipeline", "schedule"}),
                    "a schedule file holds `schedule:` (and optionally "
                    "`pipeline:`)");
      }
    }
    sched = top.get("schedule");
  }
  if (sched->kind == YNode::Kind::Null) {
    diags.error({1, 1}, "the schedule file is empty");
    return false;
  }
  Spec copy = spec;
  copy.schedule.clear();
  SpecChecker checker(diags);
  checker.parseSchedule(*sched, copy);
  if (diags.hasErrors())
    return false;
  checker.checkCachePlacement(copy);
  if (diags.hasErrors())
    return false;
  out = std::move(copy.schedule);
  return true;
}

bool readFile(const std::string &path, std::string &contents,
              std::string &error) {
  // Bounded while reading and never blocking (a device or a FIFO named as
  // the spec): the same limit loadTree applies to text given directly.
  if (Status s =
          readConfigFile(path, "a spec or schedule", kMaxSpecBytes, contents);
      !s) {
    error = s.message();
    return false;
  }
  return true;
}

std::string renderTypedSteps(const Spec &spec) {
  size_t width = spec.source.name.size() + 8;
  for (const auto &s : spec.steps)
    width = std::max(width, s.name.size());
  std::ostringstream os;
  os << "pipeline " << spec.pipeline << " (seed " << spec.seed << ", "
     << spec.epochs << (spec.epochs == 1 ? " epoch" : " epochs") << ")\n";
  auto line = [&](const std::string &name, const RecordType &t) {
    os << "  " << name << std::string(width + 2 - name.size(), ' ') << t.str()
       << '\n';
  };
  line("source: " + spec.source.name, spec.source.outputType);
  for (const auto &s : spec.steps)
    line(s.name, s.outputType);
  const Distributed &d = spec.distributed;
  if (d.rank || d.worldSize) {
    auto show = [](const std::optional<int64_t> &v, const char *env) {
      return v ? std::to_string(*v) : std::string("(") + env + ")";
    };
    os << "distributed: rank "
       << show(d.rank, "$RANK, else $JOB_COMPLETION_INDEX, else 0")
       << " of world size " << show(d.worldSize, "$WORLD_SIZE, else 1")
       << " (a Python call or --rank/--world-size overrides the spec)\n";
  }
  return os.str();
}

} // namespace sluice::dsl
