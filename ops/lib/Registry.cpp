//===- Registry.cpp - The op registry and its helpers ---------------------===//
//
// The table itself, "did you mean" matching, byte sizes, and the Markdown
// reference page generated from the registry entries.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Registry.h"
#include "Internal.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace sluice {

std::string_view paramKindName(ParamKind k) {
  switch (k) {
  case ParamKind::Bool:
    return "bool";
  case ParamKind::Int:
    return "int";
  case ParamKind::Float:
    return "float";
  case ParamKind::String:
    return "string";
  case ParamKind::Enum:
    return "enum";
  case ParamKind::Size:
    return "byte size";
  case ParamKind::Expr:
    return "expression";
  case ParamKind::Field:
    return "field";
  case ParamKind::FieldList:
    return "list of fields";
  case ParamKind::DType:
    return "dtype";
  case ParamKind::IntList:
    return "list of ints";
  case ParamKind::FloatList:
    return "list of floats";
  case ParamKind::StringList:
    return "list of strings";
  case ParamKind::Struct:
    return "mapping";
  case ParamKind::StructList:
    return "list of mappings";
  case ParamKind::FieldMap:
    return "field mapping";
  }
  return "?";
}

ParamSpec param(std::string name, ParamKind kind) {
  ParamSpec p;
  p.name = std::move(name);
  p.kind = kind;
  return p;
}

ParamSpec enumParam(std::string name, std::vector<std::string> choices) {
  ParamSpec p = param(std::move(name), ParamKind::Enum);
  p.choices = std::move(choices);
  return p;
}

ParamSpec structParam(std::string name, std::vector<ParamSpec> members,
                      bool isList) {
  ParamSpec p = param(std::move(name),
                      isList ? ParamKind::StructList : ParamKind::Struct);
  p.members = std::move(members);
  return p;
}

TypeContext::~TypeContext() = default;

KernelCall::Repairs::~Repairs() = default;

std::string KernelSite::resolvePath(const std::string &path) const {
  if (path.empty() || path[0] == '/' || baseDir.empty())
    return path;
  return baseDir + "/" + path;
}

const FieldType &TypeContext::fieldType(std::string_view paramName) const {
  // The front end has checked that the field exists; the fallback only keeps
  // a misuse from crashing.
  static const FieldType kMissing(ElemType::Bytes);
  const Field *f = input().find(param(paramName).asString());
  return f ? f->type : kMissing;
}

const ParamSpec *OpDef::findParam(std::string_view name) const {
  for (const ParamSpec &p : params)
    if (p.name == name)
      return &p;
  return nullptr;
}

Registry &Registry::instance() {
  static Registry registry;
  return registry;
}

void Registry::add(OpDef def) {
  if (find(def.name)) {
    // Two entries with one name is a build mistake, not a user error.
    std::fprintf(stderr, "sluice: op '%s' registered twice\n",
                 def.name.c_str());
    std::abort();
  }
  if (def.stochastic && def.traits.random == RandomKey::None)
    def.traits.random = def.traits.reorders ? RandomKey::StreamOrder
                                            : RandomKey::SourcePosition;
  ops_.push_back(std::move(def));
}

const OpDef *Registry::find(std::string_view name) const {
  for (const OpDef &op : ops_)
    if (op.name == name)
      return &op;
  return nullptr;
}

const OpTraits *opTraits(std::string_view name) {
  const OpDef *def = Registry::instance().find(name);
  return def ? &def->traits : nullptr;
}

std::vector<const OpDef *> Registry::all() const {
  std::vector<const OpDef *> v;
  for (const OpDef &op : ops_)
    if (!op.internal)
      v.push_back(&op);
  std::sort(v.begin(), v.end(),
            [](const OpDef *a, const OpDef *b) { return a->name < b->name; });
  return v;
}

std::vector<const OpDef *> Registry::all(OpKind kind) const {
  std::vector<const OpDef *> v = all();
  v.erase(std::remove_if(v.begin(), v.end(),
                         [&](const OpDef *op) { return op->kind != kind; }),
          v.end());
  return v;
}

std::vector<std::string> Registry::names(std::optional<OpKind> kind) const {
  std::vector<std::string> v;
  for (const OpDef *op : kind ? all(*kind) : all())
    v.push_back(op->name);
  return v;
}

//===----------------------------------------------------------------------===//
// Did you mean
//===----------------------------------------------------------------------===//

namespace {
// Optimal string alignment distance: Levenshtein plus adjacent swaps, the
// most common typo ("decode_imgae").
size_t editDistance(const std::string &a, const std::string &b) {
  size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i)
    d[i][0] = i;
  for (size_t j = 0; j <= m; ++j)
    d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] =
          std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char &c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}
} // namespace

std::string closestMatch(std::string_view word,
                         const std::vector<std::string> &candidates) {
  std::string w = lower(word);
  size_t threshold = std::max<size_t>(2, w.size() / 3);
  size_t best = threshold + 1;
  std::string bestName;
  for (const std::string &c : candidates) {
    std::string lc = lower(c);
    size_t d = editDistance(w, lc);
    // Replacing every character is no match at all ("ab" vs "xy").
    if (d >= std::max(w.size(), lc.size()) && d != 0)
      continue;
    if (d < best) {
      best = d;
      bestName = c;
    }
  }
  return bestName;
}

//===----------------------------------------------------------------------===//
// Byte sizes
//===----------------------------------------------------------------------===//

// Units: B; KB/MB/GB/TB are powers of 1000; KiB/MiB/GiB/TiB powers of 1024.
// A bare K/M/G/T (any case, as in `64k`) is binary, as in memory flags of
// docker, java and ulimit, because budgets are about RAM. Units are matched
// case-insensitively. Fractions are allowed when the result is a whole number
// of bytes ("1.5KiB" = 1536, "0.5B" is rejected).
std::optional<int64_t> parseByteSize(std::string_view text) {
  size_t i = 0, n = text.size();
  auto isSpace = [](char c) { return c == ' ' || c == '\t'; };
  while (i < n && isSpace(text[i]))
    ++i;
  while (n > i && isSpace(text[n - 1]))
    --n;
  size_t intBegin = i;
  while (i < n && std::isdigit(static_cast<unsigned char>(text[i])))
    ++i;
  std::string_view intDigits = text.substr(intBegin, i - intBegin);
  std::string_view fracDigits;
  if (i < n && text[i] == '.') {
    size_t fracBegin = ++i;
    while (i < n && std::isdigit(static_cast<unsigned char>(text[i])))
      ++i;
    fracDigits = text.substr(fracBegin, i - fracBegin);
    if (fracDigits.empty())
      return std::nullopt;
  }
  if (intDigits.empty() || intDigits.size() > 19 || fracDigits.size() > 18)
    return std::nullopt;
  while (i < n && isSpace(text[i]))
    ++i;
  std::string unit = lower(text.substr(i, n - i));

  struct Unit {
    const char *name;
    __int128 multiplier;
  };
  constexpr __int128 K = 1000, Ki = 1024;
  static const Unit kUnits[] = {
      {"", 1},
      {"b", 1},
      {"kb", K},
      {"mb", K * K},
      {"gb", K * K * K},
      {"tb", K * K * K * K},
      {"kib", Ki},
      {"mib", Ki * Ki},
      {"gib", Ki * Ki * Ki},
      {"tib", Ki * Ki * Ki * Ki},
      {"k", Ki},
      {"m", Ki * Ki},
      {"g", Ki * Ki * Ki},
      {"t", Ki * Ki * Ki * Ki},
  };
  const Unit *u = nullptr;
  for (const Unit &cand : kUnits)
    if (unit == cand.name)
      u = &cand;
  if (!u)
    return std::nullopt;

  __int128 whole = 0;
  for (char c : intDigits)
    whole = whole * 10 + (c - '0');
  __int128 frac = 0, scale = 1;
  for (char c : fracDigits) {
    frac = frac * 10 + (c - '0');
    scale *= 10;
  }
  __int128 fracBytes = frac * u->multiplier;
  if (fracBytes % scale != 0)
    return std::nullopt; // not a whole number of bytes
  __int128 total = whole * u->multiplier + fracBytes / scale;
  if (total > std::numeric_limits<int64_t>::max())
    return std::nullopt;
  return static_cast<int64_t>(total);
}

std::string formatByteSize(int64_t bytes) {
  if (bytes <= 0)
    return std::to_string(bytes) + "B";
  static const char *const kUnits[] = {"TiB", "GiB", "MiB", "KiB"};
  int64_t multiplier = int64_t(1) << 40;
  for (const char *unit : kUnits) {
    if (bytes % multiplier == 0)
      return std::to_string(bytes / multiplier) + unit;
    multiplier >>= 10;
  }
  return std::to_string(bytes) + "B";
}

//===----------------------------------------------------------------------===//
// Markdown reference
//===----------------------------------------------------------------------===//

namespace {
std::string cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out;
}

std::string num(double d) {
  if (d == static_cast<double>(static_cast<int64_t>(d)))
    return std::to_string(static_cast<int64_t>(d));
  return detail::formatDouble(d);
}

bool isList(ParamKind k) {
  return k == ParamKind::IntList || k == ParamKind::FloatList ||
         k == ParamKind::StringList || k == ParamKind::FieldList ||
         k == ParamKind::StructList;
}

std::string constraints(const ParamSpec &p) {
  std::vector<std::string> parts;
  std::string range;
  bool list = isList(p.kind);
  if (p.min && p.max) {
    range = std::string(p.minExclusive ? "(" : "[") + num(*p.min) + ", " +
            num(*p.max) + (p.maxExclusive ? ")" : "]");
    range = "in " + range;
  } else if (p.min) {
    range = std::string(p.minExclusive ? "> " : "≥ ") + num(*p.min);
  } else if (p.max) {
    range = std::string(p.maxExclusive ? "< " : "≤ ") + num(*p.max);
  }
  if (!range.empty())
    parts.push_back(list ? "each " + range : range);
  if (list) {
    if (p.minLen == p.maxLen)
      parts.push_back(std::to_string(p.minLen) +
                      (p.minLen == 1 ? " value" : " values"));
    else if (p.maxLen == std::numeric_limits<size_t>::max()) {
      if (p.minLen > 0)
        parts.push_back("at least " + std::to_string(p.minLen));
    } else {
      parts.push_back(std::to_string(p.minLen) + " to " +
                      std::to_string(p.maxLen) + " values");
    }
    if (p.scalarOk)
      parts.push_back(p.broadcastTo > 1
                          ? "a single value is repeated " +
                                std::to_string(p.broadcastTo) + " times"
                          : "a single value is accepted");
  }
  if (!p.choices.empty()) {
    std::string s = "one of ";
    for (size_t i = 0; i < p.choices.size(); ++i)
      s += (i ? ", `" : "`") + p.choices[i] + "`";
    parts.push_back(s);
  }
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i)
    out += (i ? "; " : "") + parts[i];
  return out;
}

void paramRows(std::ostream &os, const ParamSpec &p,
               const std::string &prefix) {
  std::string def = p.required       ? "required"
                    : p.defaultValue ? "`" + p.defaultValue->str() + "`"
                                     : "optional";
  os << "| `" << prefix << p.name << "` | " << paramKindName(p.kind) << " | "
     << cell(def) << " | " << cell(constraints(p)) << " | " << cell(p.doc)
     << " |\n";
  std::string sub =
      prefix + p.name + (p.kind == ParamKind::StructList ? "[]." : ".");
  for (const ParamSpec &m : p.members)
    paramRows(os, m, sub);
}

/// The traits in words, for docs/ops.md.
std::string traitsText(const OpTraits &t) {
  std::string out = t.perRecord ? "per record" : "on the stream";
  switch (t.count) {
  case Cardinality::Source:
    break;
  case Cardinality::OneToOne:
    out += t.dataErrors ? "; one record out for each record in, unless a "
                          "data error skips it (`on_error: skip`)"
                        : "; one record out for each record in";
    break;
  case Cardinality::Fewer:
    out += "; drops records";
    break;
  case Cardinality::More:
    out += "; gives more records than it gets";
    break;
  case Cardinality::Groups:
    out += "; groups records";
    break;
  case Cardinality::Same:
    out += "; passes every record on";
    break;
  }
  if (t.reorders)
    out += "; reorders records";
  if (t.materializes)
    out += "; keeps records to replay them";
  if (t.random == RandomKey::SourcePosition)
    out += "; random draws keyed by the record's source position";
  else if (t.random == RandomKey::StreamOrder)
    out += "; random draws follow the order records arrive in";
  return out;
}

const char *fuseText(FuseKind f) {
  switch (f) {
  case FuseKind::None:
    return "a library call (not fused)";
  case FuseKind::ElementWise:
    return "element-wise: fused with neighbouring element-wise and "
           "index-remap steps into one compiled kernel";
  case FuseKind::IndexRemap:
    return "an index remap: fused with neighbouring element-wise and "
           "index-remap steps into one compiled kernel";
  }
  return "";
}

void renderOp(std::ostream &os, const OpDef &op) {
  os << "### `" << op.name << "`\n\n" << op.summary << "\n\n";
  if (!op.doc.empty())
    os << op.doc << "\n\n";
  if (!op.example.empty())
    os << "```yaml\n"
       << op.example << (op.example.back() == '\n' ? "" : "\n") << "```\n\n";
  if (op.params.empty()) {
    os << "No parameters.\n\n";
  } else {
    os << "| parameter | type | default | constraints | description |\n"
       << "|---|---|---|---|---|\n";
    for (const ParamSpec &p : op.params)
      paramRows(os, p, "");
    os << "\n";
  }
  if (const ParamSpec *p = op.findParam(op.shorthand)) {
    if (p->kind == ParamKind::FieldMap)
      os << "Shorthand: `" << op.name << ": {old: new}` is short for `"
         << op.name << ": {" << p->name << ": {old: new}}`.\n\n";
    else
      os << "Shorthand: a value that is not a mapping binds `" << p->name
         << "` (`" << op.name << ": ...`).\n\n";
  }
  if (!op.typeDoc.empty())
    os << "**Type:** " << op.typeDoc << "\n\n";
  if (op.kind == OpKind::Element) {
    os << "**Compiled as:** " << fuseText(op.fuse) << ".";
    if (op.stochastic)
      os << " Random: draws from a generator seeded by (seed, epoch, record "
            "index), so results do not depend on parallelism.";
    os << "\n\n";
  } else if (op.stochastic) {
    os << "**Random:** seeded by (seed, epoch), so the order does not depend "
          "on parallelism.\n\n";
  }
  if (op.kind != OpKind::Source)
    os << "**Traits** (what the graph passes ask): " << traitsText(op.traits)
       << ".\n\n";
  os << "**Cost hints** (before profiling): " << num(op.cost.nsPerElement)
     << " ns per record";
  if (op.cost.nsPerByte > 0)
    os << " + " << num(op.cost.nsPerByte) << " ns per input byte";
  if (op.cost.outputBytesRatio != 1)
    os << "; output ≈ " << num(op.cost.outputBytesRatio) << "× input bytes";
  os << ".\n\n";
}
} // namespace

std::string renderOpsMarkdown() {
  std::ostringstream os;
  const Registry &reg = Registry::instance();
  struct Group {
    OpKind kind;
    const char *title;
    const char *intro;
  };
  static const Group kGroups[] = {
      {OpKind::Source, "Sources",
       "A pipeline has exactly one `source:`. Relative paths are relative to "
       "the spec file. Every source takes `on_error: fail | skip`: with "
       "`skip`, unreadable records are counted and reported instead of "
       "stopping the run."},
      {OpKind::Element, "Element ops",
       "One record in, one record out; they run in parallel. Most take "
       "`field` (the input field) and `as` (write the result to a new field "
       "instead of replacing the input)."},
      {OpKind::Record, "Record ops",
       "Ops on the stream of records: selection, ordering, batching, "
       "caching."},
  };

  os << "# sluice ops\n\n"
     << "<!-- Generated by `sluice ops` from the op registry "
        "(ops/lib/*Ops.cpp); do not edit. -->\n\n"
     << "Every source and step a pipeline spec can use. Types are written "
        "`elem[dims]`: `u8[224,224,3]`, `i64` (a scalar), `f32[?,13]` "
        "(`?` = a size that varies between records). `sluice check SPEC` "
        "prints the record type after every step.\n\n";
  os << "Parameter types: `byte size` accepts `512MiB`, `4GiB`, `64KB` "
        "(KB/MB/GB are powers of 1000, KiB/MiB/GiB and a bare k/M/G powers of "
        "1024); `expression` is described under [map](#map); `dtype` is one "
        "of ";
  const auto &dtypes = allElemTypeNames();
  for (size_t i = 0; i < dtypes.size(); ++i)
    os << (i ? ", `" : "`") << dtypes[i] << "`";
  os << ".\n\n";

  for (const Group &g : kGroups) {
    os << "- " << g.title << ":";
    bool first = true;
    for (const OpDef *op : reg.all(g.kind)) {
      os << (first ? " " : ", ") << "[" << op->name << "](#" << op->name << ")";
      first = false;
    }
    os << "\n";
  }
  os << "\n";

  for (const Group &g : kGroups) {
    os << "## " << g.title << "\n\n" << g.intro << "\n\n";
    for (const OpDef *op : reg.all(g.kind))
      renderOp(os, *op);
  }
  return os.str();
}

} // namespace sluice
