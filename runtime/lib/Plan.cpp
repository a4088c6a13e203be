//===- Plan.cpp - Plan locations and its JSON form ------------------------===//
//
// The JSON form is what a compiled executable embeds, so it must read back
// exactly: parameter Values are written with their kind (an int 3 and a
// float 3.0 stay distinct), their spec positions, and non-finite floats as
// strings; record types are written field by field, not as text.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/Plan.h"
#include "sluice/runtime/Json.h"

#include <cmath>
#include <limits>

namespace sluice::runtime {

std::string Plan::where(const PlanStage &s) const {
  // Plans built by hand (tests, bindings) may have no spec file.
  std::string file = specFile.empty() ? "<plan>" : specFile;
  if (!s.loc.valid())
    return file;
  return file + ":" + std::to_string(s.loc.line) + ":" +
         std::to_string(s.loc.col);
}

namespace {

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

Json locJson(SourceLoc loc) {
  Json j = Json::array();
  j.push(Json::number(static_cast<int64_t>(loc.line)));
  j.push(Json::number(static_cast<int64_t>(loc.col)));
  return j;
}

Json valueJson(const Value &v) {
  Json j = Json::object();
  switch (v.kind()) {
  case Value::Kind::Null:
    j.set("t", Json::string("null"));
    break;
  case Value::Kind::Bool:
    j.set("t", Json::string("bool"));
    j.set("v", Json::boolean(v.asBool()));
    break;
  case Value::Kind::Int:
    j.set("t", Json::string("int"));
    j.set("v", Json::number(v.asInt()));
    break;
  case Value::Kind::Float: {
    j.set("t", Json::string("float"));
    double d = v.asDouble();
    if (std::isnan(d))
      j.set("v", Json::string("nan"));
    else if (std::isinf(d))
      j.set("v", Json::string(d > 0 ? "inf" : "-inf"));
    else
      j.set("v", Json::number(d));
    break;
  }
  case Value::Kind::String:
    j.set("t", Json::string("str"));
    j.set("v", Json::string(v.asString()));
    break;
  case Value::Kind::List: {
    j.set("t", Json::string("list"));
    Json items = Json::array();
    for (const Value &item : v.items())
      items.push(valueJson(item));
    j.set("v", std::move(items));
    break;
  }
  case Value::Kind::Map: {
    j.set("t", Json::string("map"));
    Json entries = Json::array();
    for (const auto &[key, item] : v.entries()) {
      Json pair = Json::array();
      pair.push(Json::string(key));
      pair.push(valueJson(item));
      entries.push(std::move(pair));
    }
    j.set("v", std::move(entries));
    break;
  }
  }
  if (v.loc().line != 0 || v.loc().col != 0)
    j.set("loc", locJson(v.loc()));
  if (v.contentOffset() != 0)
    j.set("off", Json::number(static_cast<int64_t>(v.contentOffset())));
  return j;
}

Json recordTypeJson(const RecordType &t) {
  Json fields = Json::array();
  for (const Field &f : t.fields()) {
    Json j = Json::object();
    j.set("name", Json::string(f.name));
    j.set("elem", Json::string(std::string(elemTypeName(f.type.elem))));
    Json shape = Json::array();
    for (int64_t d : f.type.shape)
      shape.push(Json::number(d));
    j.set("shape", std::move(shape));
    fields.push(std::move(j));
  }
  return fields;
}

Json stageJson(const PlanStage &s) {
  Json j = Json::object();
  j.set("name", Json::string(s.name));
  j.set("op", Json::string(s.op));
  j.set("kind", Json::string(kindName(s.kind)));
  j.set("params", valueJson(s.params));
  j.set("inputType", recordTypeJson(s.inputType));
  j.set("outputType", recordTypeJson(s.outputType));
  j.set("loc", locJson(s.loc));
  j.set("parallelism", Json::number(s.parallelism));
  j.set("prefetch", Json::number(s.prefetch));
  j.set("cache", Json::string(s.cache));
  if (!s.fused.empty()) {
    Json steps = Json::array();
    for (const PlanStage &f : s.fused)
      steps.push(stageJson(f));
    j.set("fused", std::move(steps));
  }
  return j;
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
    if (!obj.isObject()) {
      fail(path, "expected an object");
      return nullptr;
    }
    const Json *m = obj.get(key);
    if (!m)
      fail(path, std::string("missing member '") + key + "'");
    return m;
  }

  bool getString(const Json &obj, const char *key, const std::string &path,
                 std::string &out) {
    const Json *m = member(obj, key, path);
    if (!m)
      return false;
    if (!m->isString())
      return fail(path + "." + key, "expected a string");
    out = m->text();
    return true;
  }

  bool getInt(const Json &obj, const char *key, const std::string &path,
              int64_t &out) {
    const Json *m = member(obj, key, path);
    if (!m)
      return false;
    if (!m->getInt(out))
      return fail(path + "." + key, "expected an integer");
    return true;
  }

  bool loc(const Json &j, const std::string &path, SourceLoc &out) {
    if (!j.isArray() || j.items().size() != 2)
      return fail(path, "expected [line, col]");
    int64_t l, c;
    if (!j.items()[0].getInt(l) || !j.items()[1].getInt(c) ||
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
    if (const Json *l = j.get("loc"))
      if (!loc(*l, path + ".loc", where))
        return false;
    const Json *v = j.get("v");
    if (t != "null" && !v)
      return fail(path, "missing member 'v'");
    std::string vp = path + ".v";
    if (t == "null") {
      out = Value::null(where);
    } else if (t == "bool") {
      if (!v->isBool())
        return fail(vp, "expected true or false");
      out = Value::boolean(v->asBool(), where);
    } else if (t == "int") {
      int64_t i;
      if (!v->getInt(i))
        return fail(vp, "expected a 64-bit integer");
      out = Value::integer(i, where);
    } else if (t == "float") {
      double d;
      if (v->isString()) {
        const std::string &s = v->text();
        if (s == "nan")
          d = std::numeric_limits<double>::quiet_NaN();
        else if (s == "inf")
          d = std::numeric_limits<double>::infinity();
        else if (s == "-inf")
          d = -std::numeric_limits<double>::infinity();
        else
          return fail(vp, "expected a number, \"nan\", \"inf\" or \"-inf\"");
      } else if (!v->getDouble(d)) {
        return fail(vp, "expected a number");
      }
      out = Value::real(d, where);
    } else if (t == "str") {
      if (!v->isString())
        return fail(vp, "expected a string");
      out = Value::string(v->text(), where);
    } else if (t == "list") {
      if (!v->isArray())
        return fail(vp, "expected an array");
      std::vector<Value> items;
      for (size_t i = 0; i < v->items().size(); ++i) {
        Value item;
        if (!value(v->items()[i], vp + "[" + std::to_string(i) + "]", item,
                   depth + 1))
          return false;
        items.push_back(std::move(item));
      }
      out = Value::list(std::move(items), where);
    } else if (t == "map") {
      if (!v->isArray())
        return fail(vp, "expected an array of [key, value] pairs");
      out = Value::map(where);
      for (size_t i = 0; i < v->items().size(); ++i) {
        const Json &pair = v->items()[i];
        std::string pp = vp + "[" + std::to_string(i) + "]";
        if (!pair.isArray() || pair.items().size() != 2 ||
            !pair.items()[0].isString())
          return fail(pp, "expected a [key, value] pair");
        Value item;
        if (!value(pair.items()[1], pp + "[1]", item, depth + 1))
          return false;
        out.set(pair.items()[0].text(), std::move(item));
      }
    } else {
      return fail(path + ".t", "unknown value kind '" + t + "'");
    }
    if (const Json *off = j.get("off")) {
      int64_t o;
      if (!off->getInt(o) || o < 0 || o > std::numeric_limits<int>::max())
        return fail(path + ".off", "expected a small non-negative integer");
      out.setContentOffset(static_cast<int>(o));
    }
    return true;
  }

  bool recordType(const Json &j, const std::string &path, RecordType &out) {
    if (!j.isArray())
      return fail(path, "expected an array of fields");
    std::vector<Field> fields;
    for (size_t i = 0; i < j.items().size(); ++i) {
      const Json &f = j.items()[i];
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
      if (!shape->isArray())
        return fail(fp + ".shape", "expected an array of dims");
      for (const Json &d : shape->items()) {
        int64_t dim;
        if (!d.getInt(dim) || (dim < 0 && dim != kDynamic))
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

  bool stage(const Json &j, const std::string &path, PlanStage &out) {
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
    if (!(value(*params, path + ".params", out.params, 0) &&
          recordType(*in, path + ".inputType", out.inputType) &&
          recordType(*outT, path + ".outputType", out.outputType) &&
          loc(*l, path + ".loc", out.loc) &&
          getInt(j, "parallelism", path, out.parallelism) &&
          getInt(j, "prefetch", path, out.prefetch) &&
          getString(j, "cache", path, out.cache)))
      return false;
    // The steps of a fused stage (optional).
    if (const Json *fused = j.get("fused")) {
      if (!fused->isArray())
        return fail(path + ".fused", "expected an array");
      for (size_t i = 0; i < fused->items().size(); ++i) {
        PlanStage f;
        if (!stage(fused->items()[i],
                   path + ".fused[" + std::to_string(i) + "]", f))
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
  Json j = Json::object();
  j.set("format", Json::string(kFormat));
  j.set("version", Json::number(kVersion));
  j.set("name", Json::string(name));
  j.set("specFile", Json::string(specFile));
  j.set("baseDir", Json::string(baseDir));
  j.set("seed", Json::number(seed));
  j.set("epochs", Json::number(epochs));
  j.set("cores", Json::number(cores));
  j.set("memoryBytes", Json::number(memoryBytes));
  j.set("source", stageJson(source));
  Json list = Json::array();
  for (const PlanStage &s : stages)
    list.push(stageJson(s));
  j.set("stages", std::move(list));
  return j.dump(1) + "\n";
}

Expected<Plan> Plan::deserialize(const std::string &text) {
  Expected<Json> parsed = Json::parse(text);
  if (!parsed)
    return Status::error("invalid plan: " + parsed.status().message());
  const Json &j = *parsed;
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
  if (!seed->getUint(p.seed)) {
    r.fail("plan.seed", "expected a non-negative 64-bit integer");
    return r.status();
  }
  const Json *source = r.member(j, "source", "plan");
  const Json *stages = r.member(j, "stages", "plan");
  if (!r.getString(j, "name", "plan", p.name) ||
      !r.getString(j, "specFile", "plan", p.specFile) ||
      !r.getString(j, "baseDir", "plan", p.baseDir) ||
      !r.getInt(j, "epochs", "plan", p.epochs) ||
      !r.getInt(j, "cores", "plan", p.cores) ||
      !r.getInt(j, "memoryBytes", "plan", p.memoryBytes) || !source ||
      !stages || !r.stage(*source, "plan.source", p.source))
    return r.status();
  if (!stages->isArray()) {
    r.fail("plan.stages", "expected an array");
    return r.status();
  }
  for (size_t i = 0; i < stages->items().size(); ++i) {
    PlanStage s;
    if (!r.stage(stages->items()[i], "plan.stages[" + std::to_string(i) + "]",
                 s))
      return r.status();
    p.stages.push_back(std::move(s));
  }
  return p;
}

std::string PlanStage::reportedOp() const {
  size_t plus = name.find('+');
  if (plus == std::string::npos)
    return op;
  // The first step's name: its op, or op.N for a later occurrence.
  std::string first = name.substr(0, plus);
  size_t dot = first.rfind('.');
  if (dot != std::string::npos && dot + 1 < first.size() &&
      first.find_first_not_of("0123456789", dot + 1) == std::string::npos)
    first.resize(dot);
  return first;
}

} // namespace sluice::runtime
