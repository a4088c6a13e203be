//===- Plan.cpp - Plan locations and its JSON form ------------------------===//
//
// The JSON form is what a compiled executable embeds, so it must read back
// exactly: parameter Values are written with their kind (an int 3 and a
// float 3.0 stay distinct), their spec positions, and non-finite floats as
// strings; record types are written field by field, not as text.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/Plan.h"
#include "sluice/runtime/JsonText.h"
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <tuple>

namespace sluice::runtime {

std::string Plan::where(const PlanStep &s) const { return where(s.loc); }

std::string Plan::where(SourceLoc loc) const {
  // Plans built by hand (tests, bindings) may have no spec file.
  std::string file = specFile.empty() ? "<plan>" : specFile;
  if (!loc.valid())
    return file;
  return file + ":" + std::to_string(loc.line) + ":" + std::to_string(loc.col);
}

namespace {

using Json = nlohmann::ordered_json;

constexpr const char *kFormat = "sluice-plan";
constexpr int64_t kVersion = 1;

const char *kindName(OpKind k) {
  switch (k) {
  case OpKind::Source:
    return "source";
  case OpKind::Element:
    return "element";
  case OpKind::Record:
    return "record";
  }
  return "element";
}

/// A string as JSON. Strings are UTF-8 (the spec is checked), but a Plan
/// built by hand or a path from the command line need not be: such bytes
/// are written as {"hex": "..."} so that they still read back exactly.
Json textJson(const std::string &s) {
  Json j = s;
  try {
    (void)j.dump();
    return j;
  } catch (const Json::type_error &) {
    static const char kHex[] = "0123456789abcdef";
    std::string hex;
    for (unsigned char c : s) {
      hex += kHex[c >> 4];
      hex += kHex[c & 15];
    }
    return Json{{"hex", hex}};
  }
}

Json locJson(SourceLoc loc) {
  return Json::array(
      {static_cast<int64_t>(loc.line), static_cast<int64_t>(loc.col)});
}

Json valueJson(const Value &v) {
  Json j = Json::object();
  switch (v.kind()) {
  case Value::Kind::Null:
    j["t"] = "null";
    break;
  case Value::Kind::Bool:
    j["t"] = "bool";
    j["v"] = v.asBool();
    break;
  case Value::Kind::Int:
    j["t"] = "int";
    j["v"] = v.asInt();
    break;
  case Value::Kind::Float: {
    j["t"] = "float";
    double d = v.asDouble();
    if (std::isnan(d))
      j["v"] = "nan";
    else if (std::isinf(d))
      j["v"] = d > 0 ? "inf" : "-inf";
    else
      j["v"] = d;
    break;
  }
  case Value::Kind::String:
    j["t"] = "str";
    j["v"] = textJson(v.asString());
    break;
  case Value::Kind::List: {
    j["t"] = "list";
    Json items = Json::array();
    for (const Value &item : v.items())
      items.push_back(valueJson(item));
    j["v"] = std::move(items);
    break;
  }
  case Value::Kind::Map: {
    j["t"] = "map";
    Json entries = Json::array();
    for (const auto &[key, item] : v.entries())
      entries.push_back(Json::array({textJson(key), valueJson(item)}));
    j["v"] = std::move(entries);
    break;
  }
  }
  if (v.loc().line != 0 || v.loc().col != 0)
    j["loc"] = locJson(v.loc());
  if (v.contentOffset() != 0)
    j["off"] = static_cast<int64_t>(v.contentOffset());
  return j;
}

Json recordTypeJson(const RecordType &t) {
  Json fields = Json::array();
  for (const Field &f : t.fields())
    fields.push_back({{"name", textJson(f.name)},
                      {"elem", std::string(elemTypeName(f.type.elem))},
                      {"shape", f.type.shape}});
  return fields;
}

Json stageJson(const PlanStep &s) {
  Json j = {{"name", textJson(s.name)},
            {"op", textJson(s.op)},
            {"kind", kindName(s.kind)},
            {"params", valueJson(s.params)},
            {"inputType", recordTypeJson(s.inputType)},
            {"outputType", recordTypeJson(s.outputType)},
            {"loc", locJson(s.loc)},
            // Unset knobs as plans always wrote them: 0, -1, "".
            {"parallelism", s.schedule.parallelism.value_or(0)},
            {"prefetch", s.schedule.prefetch.value_or(-1)},
            {"cache", textJson(s.schedule.cache.value_or(""))}};
  if (!s.fused.empty()) {
    Json steps = Json::array();
    for (const PlanStep &f : s.fused)
      steps.push_back(stageJson(f));
    j["fused"] = std::move(steps);
  }
  return j;
}

/// The number as a 64-bit signed integer; false for fractions, exponents
/// and values out of range.
bool jsonInt(const Json &j, int64_t &out) {
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return false;
    out = static_cast<int64_t>(u);
    return true;
  }
  if (!j.is_number_integer())
    return false;
  out = j.get<int64_t>();
  return true;
}

/// A string written by textJson().
bool jsonText(const Json &j, std::string &out) {
  if (j.is_string()) {
    out = j.get<std::string>();
    return true;
  }
  if (!j.is_object() || j.size() != 1 || !j.contains("hex") ||
      !j["hex"].is_string())
    return false;
  const std::string &hex = j["hex"].get_ref<const std::string &>();
  if (hex.size() % 2)
    return false;
  auto nibble = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
  };
  out.clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    out += static_cast<char>(hi * 16 + lo);
  }
  return true;
}

/// Reads JSON back into plan structures; the first problem wins and names
/// the path to the offending member ("stages[2].params.v[0]").
class Reader {
public:
  Status status() const {
    return error_.empty() ? Status::ok()
                          : Status::error("invalid plan: " + error_);
  }

  bool fail(const std::string &path, const std::string &what) {
    if (error_.empty())
      error_ = path + ": " + what;
    return false;
  }

  const Json *member(const Json &obj, const char *key,
                     const std::string &path) {
    if (!obj.is_object()) {
      fail(path, "expected an object");
      return nullptr;
    }
    auto it = obj.find(key);
    if (it == obj.end()) {
      fail(path, std::string("missing member '") + key + "'");
      return nullptr;
    }
    return &*it;
  }

  bool getString(const Json &obj, const char *key, const std::string &path,
                 std::string &out) {
    const Json *m = member(obj, key, path);
    if (!m)
      return false;
    if (!jsonText(*m, out))
      return fail(path + "." + key, "expected a string");
    return true;
  }

  bool getInt(const Json &obj, const char *key, const std::string &path,
              int64_t &out) {
    const Json *m = member(obj, key, path);
    if (!m)
      return false;
    if (!jsonInt(*m, out))
      return fail(path + "." + key, "expected an integer");
    return true;
  }

  bool loc(const Json &j, const std::string &path, SourceLoc &out) {
    if (!j.is_array() || j.size() != 2)
      return fail(path, "expected [line, col]");
    int64_t l, c;
    if (!jsonInt(j[0], l) || !jsonInt(j[1], c) ||
        l < std::numeric_limits<int>::min() ||
        l > std::numeric_limits<int>::max() ||
        c < std::numeric_limits<int>::min() ||
        c > std::numeric_limits<int>::max())
      return fail(path, "expected [line, col] integers");
    out.line = static_cast<int>(l);
    out.col = static_cast<int>(c);
    return true;
  }

  bool value(const Json &j, const std::string &path, Value &out, int depth) {
    if (depth > 256)
      return fail(path, "parameter values nested too deeply");
    std::string t;
    if (!getString(j, "t", path, t))
      return false;
    SourceLoc where;
    if (j.contains("loc"))
      if (!loc(j["loc"], path + ".loc", where))
        return false;
    const Json *v = j.contains("v") ? &j["v"] : nullptr;
    if (t != "null" && !v)
      return fail(path, "missing member 'v'");
    std::string vp = path + ".v";
    if (t == "null") {
      out = Value::null(where);
    } else if (t == "bool") {
      if (!v->is_boolean())
        return fail(vp, "expected true or false");
      out = Value::boolean(v->get<bool>(), where);
    } else if (t == "int") {
      int64_t i;
      if (!jsonInt(*v, i))
        return fail(vp, "expected a 64-bit integer");
      out = Value::integer(i, where);
    } else if (t == "float") {
      double d;
      if (v->is_string()) {
        const std::string &s = v->get_ref<const std::string &>();
        if (s == "nan")
          d = std::numeric_limits<double>::quiet_NaN();
        else if (s == "inf")
          d = std::numeric_limits<double>::infinity();
        else if (s == "-inf")
          d = -std::numeric_limits<double>::infinity();
        else
          return fail(vp, "expected a number, \"nan\", \"inf\" or \"-inf\"");
      } else if (!v->is_number()) {
        return fail(vp, "expected a number");
      } else {
        d = v->get<double>();
      }
      out = Value::real(d, where);
    } else if (t == "str") {
      std::string text;
      if (!jsonText(*v, text))
        return fail(vp, "expected a string");
      out = Value::string(std::move(text), where);
    } else if (t == "list") {
      if (!v->is_array())
        return fail(vp, "expected an array");
      std::vector<Value> items;
      for (size_t i = 0; i < v->size(); ++i) {
        Value item;
        if (!value((*v)[i], vp + "[" + std::to_string(i) + "]", item,
                   depth + 1))
          return false;
        items.push_back(std::move(item));
      }
      out = Value::list(std::move(items), where);
    } else if (t == "map") {
      if (!v->is_array())
        return fail(vp, "expected an array of [key, value] pairs");
      out = Value::map(where);
      for (size_t i = 0; i < v->size(); ++i) {
        const Json &pair = (*v)[i];
        std::string pp = vp + "[" + std::to_string(i) + "]";
        std::string key;
        if (!pair.is_array() || pair.size() != 2 || !jsonText(pair[0], key))
          return fail(pp, "expected a [key, value] pair");
        Value item;
        if (!value(pair[1], pp + "[1]", item, depth + 1))
          return false;
        out.set(key, std::move(item));
      }
    } else {
      return fail(path + ".t", "unknown value kind '" + t + "'");
    }
    if (j.contains("off")) {
      int64_t o;
      if (!jsonInt(j["off"], o) || o < 0 || o > std::numeric_limits<int>::max())
        return fail(path + ".off", "expected a small non-negative integer");
      out.setContentOffset(static_cast<int>(o));
    }
    return true;
  }

  bool recordType(const Json &j, const std::string &path, RecordType &out) {
    if (!j.is_array())
      return fail(path, "expected an array of fields");
    std::vector<Field> fields;
    for (size_t i = 0; i < j.size(); ++i) {
      const Json &f = j[i];
      std::string fp = path + "[" + std::to_string(i) + "]";
      Field field;
      std::string elem;
      if (!getString(f, "name", fp, field.name) ||
          !getString(f, "elem", fp, elem))
        return false;
      std::optional<ElemType> e = parseElemType(elem);
      if (!e)
        return fail(fp + ".elem", "unknown element type '" + elem + "'");
      field.type.elem = *e;
      const Json *shape = member(f, "shape", fp);
      if (!shape)
        return false;
      if (!shape->is_array())
        return fail(fp + ".shape", "expected an array of dims");
      for (const Json &d : *shape) {
        int64_t dim;
        if (!jsonInt(d, dim) || (dim < 0 && dim != kDynamic))
          return fail(fp + ".shape", "dims must be >= 0 or -1 (dynamic)");
        field.type.shape.push_back(dim);
      }
      for (const Field &prev : fields)
        if (prev.name == field.name)
          return fail(fp + ".name", "duplicate field '" + field.name + "'");
      fields.push_back(std::move(field));
    }
    out = RecordType(std::move(fields));
    return true;
  }

  bool stage(const Json &j, const std::string &path, PlanStep &out) {
    std::string kind;
    if (!getString(j, "name", path, out.name) ||
        !getString(j, "op", path, out.op) || !getString(j, "kind", path, kind))
      return false;
    if (kind == "source")
      out.kind = OpKind::Source;
    else if (kind == "element")
      out.kind = OpKind::Element;
    else if (kind == "record")
      out.kind = OpKind::Record;
    else
      return fail(path + ".kind", "expected source, element or record");
    const Json *params = member(j, "params", path);
    const Json *in = member(j, "inputType", path);
    const Json *outT = member(j, "outputType", path);
    const Json *l = member(j, "loc", path);
    if (!params || !in || !outT || !l)
      return false;
    int64_t parallelism = 0, prefetch = -1;
    std::string cache;
    if (!(value(*params, path + ".params", out.params, 0) &&
          recordType(*in, path + ".inputType", out.inputType) &&
          recordType(*outT, path + ".outputType", out.outputType) &&
          loc(*l, path + ".loc", out.loc) &&
          getInt(j, "parallelism", path, parallelism) &&
          getInt(j, "prefetch", path, prefetch) &&
          getString(j, "cache", path, cache)))
      return false;
    // 0 / -1 / "" (and "none") are unset knobs (stageJson).
    if (parallelism > 0)
      out.schedule.parallelism = parallelism;
    if (prefetch >= 0)
      out.schedule.prefetch = prefetch;
    if (!cache.empty() && cache != "none")
      out.schedule.cache = cache;
    // The steps of a fused stage (optional).
    if (j.contains("fused")) {
      const Json &fused = j["fused"];
      if (!fused.is_array())
        return fail(path + ".fused", "expected an array");
      for (size_t i = 0; i < fused.size(); ++i) {
        PlanStep f;
        if (!stage(fused[i], path + ".fused[" + std::to_string(i) + "]", f))
          return false;
        out.fused.push_back(std::move(f));
      }
    }
    return true;
  }

private:
  std::string error_;
};

} // namespace

std::string Plan::serialize() const {
  Json stageList = Json::array();
  for (const PlanStep &s : steps)
    stageList.push_back(stageJson(s));
  Json j = {{"format", kFormat},
            {"version", kVersion},
            {"name", textJson(name)},
            {"specFile", textJson(specFile)},
            {"baseDir", textJson(baseDir)},
            {"seed", seed},
            {"epochs", epochs},
            {"cores", cores},
            {"memoryBytes", memoryBytes},
            {"source", stageJson(source)},
            {"stages", std::move(stageList)}};
  // Written only when set, so plans without it keep their text (and their
  // fingerprint).
  if (scheduleAuto)
    j["scheduleAuto"] = true;
  // Written only when the spec sets them, so plans without `distributed:`
  // keep their text.
  if (rank)
    j["rank"] = {{"value", *rank}, {"loc", locJson(rankLoc)}};
  if (worldSize)
    j["worldSize"] = {{"value", *worldSize}, {"loc", locJson(worldSizeLoc)}};
  return prettyJson(j) + "\n";
}

Expected<Plan> Plan::deserialize(const std::string &text) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::parse_error &e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 13:
    // ..." without the bracketed id.
    std::string what = e.what();
    size_t close = what.find("] ");
    return Status::error(
        "invalid plan: JSON " +
        (close == std::string::npos ? what : what.substr(close + 2)));
  }
  Reader r;
  Plan p;
  std::string format;
  int64_t version = 0;
  if (!r.getString(j, "format", "plan", format))
    return r.status();
  if (format != kFormat)
    return Status::error("invalid plan: format is '" + format +
                         "', expected '" + kFormat + "'");
  if (!r.getInt(j, "version", "plan", version))
    return r.status();
  if (version != kVersion)
    return Status::error("invalid plan: version " + std::to_string(version) +
                         " is not supported (this build reads version " +
                         std::to_string(kVersion) + ")");
  const Json *seed = r.member(j, "seed", "plan");
  if (!seed)
    return r.status();
  if (seed->is_number_unsigned()) {
    p.seed = seed->get<uint64_t>();
  } else {
    r.fail("plan.seed", "expected a non-negative 64-bit integer");
    return r.status();
  }
  const Json *source = r.member(j, "source", "plan");
  const Json *stageList = r.member(j, "stages", "plan");
  if (!r.getString(j, "name", "plan", p.name) ||
      !r.getString(j, "specFile", "plan", p.specFile) ||
      !r.getString(j, "baseDir", "plan", p.baseDir) ||
      !r.getInt(j, "epochs", "plan", p.epochs) ||
      !r.getInt(j, "cores", "plan", p.cores) ||
      !r.getInt(j, "memoryBytes", "plan", p.memoryBytes) || !source ||
      !stageList || !r.stage(*source, "plan.source", p.source))
    return r.status();
  if (j.contains("scheduleAuto")) {
    if (!j["scheduleAuto"].is_boolean()) {
      r.fail("plan.scheduleAuto", "expected true or false");
      return r.status();
    }
    p.scheduleAuto = j["scheduleAuto"].get<bool>();
  }
  if (!stageList->is_array()) {
    r.fail("plan.stages", "expected an array");
    return r.status();
  }
  for (auto [key, value, where] :
       {std::tuple{"rank", &p.rank, &p.rankLoc},
        std::tuple{"worldSize", &p.worldSize, &p.worldSizeLoc}}) {
    if (!j.contains(key))
      continue;
    const std::string path = std::string("plan.") + key;
    const Json *l = r.member(j[key], "loc", path);
    int64_t v = 0;
    if (!r.getInt(j[key], "value", path, v) || !l ||
        !r.loc(*l, path + ".loc", *where))
      return r.status();
    *value = v;
  }
  for (size_t i = 0; i < stageList->size(); ++i) {
    PlanStep s;
    if (!r.stage((*stageList)[i], "plan.stages[" + std::to_string(i) + "]", s))
      return r.status();
    p.steps.push_back(std::move(s));
  }
  return p;
}

std::vector<std::string> stepNamesIn(const std::string &name) {
  std::vector<std::string> out;
  for (size_t start = 0;;) {
    size_t plus = name.find('+', start);
    out.push_back(name.substr(start, plus - start));
    if (plus == std::string::npos)
      return out;
    start = plus + 1;
  }
}

std::string opOfStepName(const std::string &step) {
  size_t dot = step.rfind('.');
  if (dot != std::string::npos && dot + 1 < step.size() &&
      step.find_first_not_of("0123456789", dot + 1) == std::string::npos)
    return step.substr(0, dot);
  return step;
}

std::string PlanStep::reportedOp() const {
  if (name.find('+') == std::string::npos)
    return op;
  // The first step's op.
  return opOfStepName(stepNamesIn(name).front());
}

} // namespace sluice::runtime
