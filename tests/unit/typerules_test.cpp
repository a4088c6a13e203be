//===- typerules_test.cpp - The type rule of every op ---------------------===//
//
// Each case runs one op's type rule on an input record type and parameters
// written in YAML flow style, through a fake TypeContext that fills defaults
// the way the front end does and records errors with the column they point
// at. The expected result is the output record type, or an error message
// substring plus the text the error points at.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Registry.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <zlib.h>

using namespace sluice;

namespace {

//===----------------------------------------------------------------------===//
// A little YAML flow parser: {a: 1, b: [x, "y"]}. Every node records its
// column (the text is one line) so errors can be checked for position.
//===----------------------------------------------------------------------===//

class FlowParser {
public:
  explicit FlowParser(std::string text) : s_(std::move(text)) {}

  Value parse() {
    Value v = value(false);
    skipWs();
    EXPECT_EQ(i_, s_.size()) << "trailing text in test params: " << s_;
    return v;
  }

private:
  void skipWs() {
    while (i_ < s_.size() && s_[i_] == ' ')
      ++i_;
  }
  SourceLoc here() const { return SourceLoc{1, static_cast<int>(i_) + 1}; }

  Value value(bool isKey) {
    skipWs();
    SourceLoc loc = here();
    if (i_ >= s_.size())
      return Value::null(loc);
    char c = s_[i_];
    if (c == '{') {
      ++i_;
      Value m = Value::map(loc);
      skipWs();
      if (s_[i_] == '}') {
        ++i_;
        return m;
      }
      while (true) {
        Value key = value(true);
        skipWs();
        EXPECT_EQ(s_[i_], ':') << s_;
        ++i_;
        Value v = value(false);
        m.set(key.asString(), v);
        skipWs();
        if (s_[i_] == ',') {
          ++i_;
          continue;
        }
        EXPECT_EQ(s_[i_], '}') << s_;
        ++i_;
        return m;
      }
    }
    if (c == '[') {
      ++i_;
      std::vector<Value> items;
      skipWs();
      if (s_[i_] == ']') {
        ++i_;
        return Value::list(items, loc);
      }
      while (true) {
        items.push_back(value(false));
        skipWs();
        if (s_[i_] == ',') {
          ++i_;
          continue;
        }
        EXPECT_EQ(s_[i_], ']') << s_;
        ++i_;
        return Value::list(items, loc);
      }
    }
    if (c == '"' || c == '\'') {
      ++i_;
      std::string out;
      while (i_ < s_.size() && s_[i_] != c) {
        if (c == '"' && s_[i_] == '\\' && i_ + 1 < s_.size()) {
          char e = s_[++i_];
          out += e == 't' ? '\t' : e == 'n' ? '\n' : e;
        } else {
          out += s_[i_];
        }
        ++i_;
      }
      ++i_;
      Value v = Value::string(out, loc);
      v.setContentOffset(1);
      return v;
    }
    size_t start = i_;
    while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != ']' && s_[i_] != '}' &&
           !(isKey && s_[i_] == ':'))
      ++i_;
    std::string t = s_.substr(start, i_ - start);
    while (!t.empty() && t.back() == ' ')
      t.pop_back();
    if (isKey)
      return Value::string(t, loc);
    if (t == "true" || t == "false")
      return Value::boolean(t == "true", loc);
    if (t == "null")
      return Value::null(loc);
    char *end = nullptr;
    long long n = std::strtoll(t.c_str(), &end, 10);
    if (!t.empty() && *end == '\0')
      return Value::integer(n, loc);
    double d = std::strtod(t.c_str(), &end);
    if (!t.empty() && *end == '\0')
      return Value::real(d, loc);
    return Value::string(t, loc);
  }

  std::string s_;
  size_t i_ = 0;
};

/// "image: u8[?,?,3], label: i64" -> RecordType.
RecordType parseRecord(const std::string &text) {
  std::vector<Field> fields;
  size_t i = 0;
  while (i < text.size()) {
    size_t colon = text.find(':', i);
    std::string name = text.substr(i, colon - i);
    size_t j = colon + 2;
    size_t end = j;
    while (end < text.size() && text[end] != ',' && text[end] != '[')
      ++end;
    FieldType t(*parseElemType(text.substr(j, end - j)));
    if (end < text.size() && text[end] == '[') {
      size_t close = text.find(']', end);
      std::string dims = text.substr(end + 1, close - end - 1);
      size_t p = 0;
      while (p <= dims.size()) {
        size_t q = dims.find(',', p);
        if (q == std::string::npos)
          q = dims.size();
        std::string d = dims.substr(p, q - p);
        t.shape.push_back(d == "?" ? kDynamic : std::stoll(d));
        p = q + 1;
      }
      end = close + 1;
    }
    fields.push_back(Field{name, t});
    i = end + 2; // ", "
  }
  return RecordType(fields);
}

//===----------------------------------------------------------------------===//
// The front end's defaulting, and a context that records errors.
//===----------------------------------------------------------------------===//

void applyDefaults(const std::vector<ParamSpec> &specs, Value &map);

void normalizeValue(const ParamSpec &spec, Value &v) {
  switch (spec.kind) {
  case ParamKind::Float:
    if (v.isInt())
      v = Value::real(v.asDouble(), v.loc());
    break;
  case ParamKind::IntList:
  case ParamKind::FloatList:
  case ParamKind::StringList:
  case ParamKind::FieldList:
    if (!v.isList() && spec.scalarOk)
      v = Value::list(
          std::vector<Value>(std::max<size_t>(1, spec.broadcastTo), v),
          v.loc());
    if (spec.kind == ParamKind::FloatList)
      for (Value &item : v.items())
        if (item.isInt())
          item = Value::real(item.asDouble(), item.loc());
    break;
  case ParamKind::StructList:
    for (Value &item : v.items())
      applyDefaults(spec.members, item);
    break;
  case ParamKind::Struct:
    applyDefaults(spec.members, v);
    break;
  default:
    break;
  }
}

void applyDefaults(const std::vector<ParamSpec> &specs, Value &map) {
  for (const ParamSpec &spec : specs) {
    Value *v = map.get(spec.name);
    if (!v) {
      if (spec.defaultValue)
        map.set(spec.name, *spec.defaultValue);
      continue;
    }
    normalizeValue(spec, *v);
  }
}

struct RecordedError {
  std::string text; ///< message, then "\nhint: " + hint when there is one
  int col;          ///< 1-based column in the params text; 0 = the op
};

class FakeContext : public TypeContext {
public:
  FakeContext(RecordType input, Value params, std::string baseDir)
      : input_(std::move(input)), params_(std::move(params)),
        baseDir_(std::move(baseDir)) {}

  const RecordType &input() const override { return input_; }
  const Value &params() const override { return params_; }
  void error(const Value &at, std::string message, std::string hint) override {
    record(at.loc().col, message, hint);
  }
  void errorAtOp(std::string message, std::string hint) override {
    record(0, message, hint);
  }
  void errorInString(const Value &at, size_t offset, std::string message,
                     std::string hint) override {
    record(at.loc().col + at.contentOffset() + static_cast<int>(offset),
           message, hint);
  }
  bool failed() const override { return !errors_.empty(); }
  std::string resolvePath(const std::string &path) const override {
    return !path.empty() && path[0] == '/' ? path : baseDir_ + "/" + path;
  }
  const std::vector<RecordedError> &errors() const { return errors_; }

private:
  void record(int col, const std::string &message, const std::string &hint) {
    EXPECT_FALSE(message.empty());
    errors_.push_back({message + (hint.empty() ? "" : "\nhint: " + hint), col});
  }
  RecordType input_;
  Value params_;
  std::string baseDir_;
  std::vector<RecordedError> errors_;
};

//===----------------------------------------------------------------------===//
// Data files for the sources that read headers at check time.
//===----------------------------------------------------------------------===//

void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string npyFile(int version, const std::string &descr, bool fortran,
                    const std::vector<int64_t> &shape, size_t elemSize) {
  std::string dict = "{'descr': '" + descr +
                     "', 'fortran_order': " + (fortran ? "True" : "False") +
                     ", 'shape': (";
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : "");
    if (i + 1 < shape.size())
      dict += ", ";
    n *= shape[i];
  }
  dict += "), }";
  size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64 != 0)
    dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(version);
  out += '\0';
  uint32_t len = static_cast<uint32_t>(dict.size());
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>((len >> 8) & 0xff);
  if (version >= 2) {
    out += static_cast<char>((len >> 16) & 0xff);
    out += static_cast<char>((len >> 24) & 0xff);
  }
  out += dict;
  out += std::string(static_cast<size_t>(n) * elemSize, '\0');
  return out;
}

std::string idxFile(unsigned char typeCode, const std::vector<uint32_t> &dims,
                    size_t elemSize) {
  std::string out = {'\0', '\0', static_cast<char>(typeCode),
                     static_cast<char>(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8)
      out += static_cast<char>((d >> s) & 0xff);
    n *= d;
  }
  out += std::string(n * elemSize, '\0');
  return out;
}

bool &dataDirMade() {
  static bool made = false;
  return made;
}

/// A temp dir with the data files, made once per test run.
const std::string &dataDir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/sluice_typerules_XXXXXX";
    std::string d = mkdtemp(tmpl);
    mkdir((d + "/parts").c_str(), 0755);
    writeFile(d + "/f32.idx", idxFile(0x0D, {5, 4, 3}, 4));
    writeFile(d + "/labels5.idx", idxFile(0x08, {5}, 1));
    writeFile(d + "/notidx.idx", "hello, world\n");
    writeFile(d + "/feat.npy", npyFile(1, "<f4", false, {10, 3, 4}, 4));
    writeFile(d + "/pix.npy", npyFile(2, "|u1", false, {7, 28, 28}, 1));
    writeFile(d + "/ids.npy", npyFile(1, "<i8", false, {100}, 8));
    writeFile(d + "/be.npy", npyFile(1, ">f4", false, {4, 2}, 4));
    writeFile(d + "/fortran.npy", npyFile(1, "<f8", true, {4, 2}, 8));
    writeFile(d + "/scalar.npy", npyFile(1, "<f8", false, {}, 8));
    writeFile(d + "/text.npy", npyFile(1, "<U10", false, {3}, 40));
    writeFile(d + "/parts/part_0.npy", npyFile(1, "<f2", false, {3, 5}, 2));
    writeFile(d + "/parts/part_1.npy", npyFile(1, "<f2", false, {2, 5}, 2));
    // gzip works for any IDX file, not only the Fashion-MNIST ones.
    gzFile gz = gzopen((d + "/f32.idx.gz").c_str(), "wb");
    std::string idx = idxFile(0x0D, {5, 4, 3}, 4);
    gzwrite(gz, idx.data(), static_cast<unsigned>(idx.size()));
    gzclose(gz);
    dataDirMade() = true;
    return d;
  }();
  return dir;
}

/// Removes the data dir after the last test (if a test made it).
class RemoveDataDir : public ::testing::Environment {
public:
  void TearDown() override {
    std::error_code ec;
    if (dataDirMade())
      std::filesystem::remove_all(dataDir(), ec);
  }
};
::testing::Environment *const kRemoveDataDir =
    ::testing::AddGlobalTestEnvironment(new RemoveDataDir);

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

struct RuleCase {
  const char *name; ///< test name
  const char *op;
  const char *input;   ///< record type; "" for sources
  const char *params;  ///< YAML flow; a non-mapping binds the shorthand
  const char *expect;  ///< output record type, or "error: <substring>"
  const char *at = ""; ///< for errors: the params text the error points at,
                       ///< "<op>" for the op itself; "" = not checked
};

struct RunResult {
  RecordType type;
  std::vector<RecordedError> errors;
};

RunResult runRule(const OpDef &op, const std::string &input,
                  const std::string &paramsText) {
  Value params = FlowParser(paramsText).parse();
  // A FieldMap shorthand is itself a mapping: `rename: {image: pixels}`.
  const ParamSpec *shorthand =
      op.shorthand.empty() ? nullptr : op.findParam(op.shorthand);
  bool mapShorthand = shorthand && shorthand->kind == ParamKind::FieldMap &&
                      params.isMap() && !params.has(op.shorthand);
  if (!params.isMap() || mapShorthand) {
    Value wrapped = Value::map(params.loc());
    EXPECT_FALSE(op.shorthand.empty()) << op.name << " has no shorthand";
    wrapped.set(op.shorthand, params);
    params = wrapped;
  }
  applyDefaults(op.params, params);
  FakeContext ctx(parseRecord(input), params, dataDir());
  RecordType out = op.typeRule(ctx);
  return {out, ctx.errors()};
}

std::string fmnist(const char *file) {
  return std::string(SLUICE_FASHION_MNIST_DIR) + "/" + file;
}

void PrintTo(const RuleCase &c, std::ostream *os) {
  *os << c.op << ": " << c.params;
}

class TypeRuleTest : public ::testing::TestWithParam<RuleCase> {};

TEST_P(TypeRuleTest, Rule) {
  const RuleCase &c = GetParam();
  const OpDef *op = Registry::instance().find(c.op);
  ASSERT_NE(op, nullptr) << c.op;
  // Fashion-MNIST paths are spelled FMNIST/... in the table.
  std::string params = c.params;
  for (size_t p; (p = params.find("FMNIST/")) != std::string::npos;)
    params.replace(p, 7, std::string(SLUICE_FASHION_MNIST_DIR) + "/");
  RunResult r = runRule(*op, c.input, params);
  std::string expect = c.expect;
  if (expect.rfind("error: ", 0) != 0) {
    for (const RecordedError &e : r.errors)
      ADD_FAILURE() << "unexpected error: " << e.text;
    EXPECT_EQ(r.type.str(), expect);
    return;
  }
  ASSERT_FALSE(r.errors.empty())
      << "expected an error, got type " << r.type.str();
  const RecordedError &e = r.errors.front();
  EXPECT_NE(e.text.find(expect.substr(7)), std::string::npos)
      << "error was: " << e.text;
  std::string at = c.at;
  if (at == "<op>") {
    EXPECT_EQ(e.col, 0) << "expected the error at the op";
  } else if (!at.empty()) {
    ASSERT_GT(e.col, 0) << "error reported at the op, not in the params";
    EXPECT_EQ(params.substr(e.col - 1, at.size()), at)
        << "error points at: " << params.substr(e.col - 1);
  }
}

const RuleCase kSourceCases[] = {
    {"ImageFolder", "image_folder", "", "{root: data/train}",
     "path: string, data: bytes, label: i64"},
    {"ImageFolderDot", "image_folder", "",
     "{root: data, extensions: [jpg, .png]}", "error: without the dot: 'png'",
     ".png"},
    {"Files", "files", "", "\"images/*.jpg\"", "path: string, data: bytes"},
    {"TextLines", "text_lines", "", "corpus/*.txt", "line: string"},
    {"CsvCriteo", "csv", "",
     "{files: \"day_*.tsv\", delimiter: \"\\t\", columns: [{name: label, "
     "type: i64}, {name: dense, type: f32, count: 13}, {name: cat, type: "
     "hex32, count: 26}]}",
     "label: i64, dense: f32[13], cat: i64[26]"},
    {"TsvDefaultsToTab", "tsv", "",
     "{files: \"*.tsv\", columns: [{name: label, type: i64}, {name: w, type: "
     "f64, count: 2}, {name: s, type: string}]}",
     "label: i64, w: f64[2], s: string"},
    {"CsvDuplicateColumn", "csv", "",
     "{files: a.csv, columns: [{name: a, type: i64}, {name: b, type: u8}, "
     "{name: a, type: f32}]}",
     "error: duplicate column name 'a'; column 1 already uses it",
     "a, type: f32}"},
    {"CsvLongDelimiter", "csv", "",
     "{files: a.csv, delimiter: ab, columns: [{name: a, type: i64}]}",
     "error: delimiter must be one character, got 'ab'", "ab"},
    {"CsvBackslashT", "csv", "",
     "{files: a.csv, delimiter: '\\t', columns: [{name: a, type: i64}]}",
     "error: two characters", "'\\t'"},
    {"CsvBadColumnName", "csv", "",
     "{files: a.csv, columns: [{name: my col, type: i64}]}",
     "error: 'my col' is not a valid field name", "my col"},
    {"Tfrecord", "tfrecord", "",
     "{files: \"*.tfrecord\", features: [{name: image/encoded, type: bytes, "
     "as: data}, {name: label, type: i64}, {name: ids, type: i64, shape: "
     "[-1]}, {name: emb, type: f32, shape: [4, 8]}]}",
     "data: bytes, label: i64, ids: i64[?], emb: f32[4,8]"},
    {"TfrecordKeyNeedsAs", "tfrecord", "",
     "{files: x, features: [{name: image/class/label, type: i64}]}",
     "error: feature key 'image/class/label' is not a valid field name\n"
     "hint: name the field with `as`, e.g. `{name: image/class/label, type: "
     "i64, as: image_class_label}`",
     "image/class/label"},
    {"TfrecordZeroDim", "tfrecord", "",
     "{files: x, features: [{name: a, type: f32, shape: [3, 0]}]}",
     "error: dims must be at least 1", "0]"},
    {"TfrecordDuplicate", "tfrecord", "",
     "{files: x, features: [{name: a, type: f32}, {name: b, type: i64, as: "
     "a}]}",
     "error: duplicate feature name 'a'", "a}"},
    {"IdxFashionMnist", "idx", "",
     "{images: FMNIST/train-images-idx3-ubyte.gz, labels: "
     "FMNIST/train-labels-idx1-ubyte.gz}",
     "image: u8[28,28], label: i64"},
    {"IdxTestSplitNoLabels", "idx", "",
     "{images: FMNIST/t10k-images-idx3-ubyte.gz}", "image: u8[28,28]"},
    {"IdxMissingFile", "idx", "", "{images: nope/train-images.gz}",
     "image: u8[?,?]"},
    {"IdxMissingBoth", "idx", "", "{images: nope/a.gz, labels: nope/b.gz}",
     "image: u8[?,?], label: i64"},
    {"IdxFloatRawAndGz", "idx", "", "{images: f32.idx.gz}", "image: f32[4,3]"},
    {"IdxFloatRaw", "idx", "", "{images: f32.idx, labels: labels5.idx}",
     "image: f32[4,3], label: i64"},
    {"IdxLabelsAsImages", "idx", "",
     "{images: FMNIST/train-labels-idx1-ubyte.gz}",
     "error: is a 1-D IDX file (a labels file?)", "/"},
    {"IdxCountMismatch", "idx", "",
     "{images: FMNIST/train-images-idx3-ubyte.gz, labels: "
     "FMNIST/t10k-labels-idx1-ubyte.gz}",
     "error: has 10000 labels but the images file has 60000 images"},
    {"IdxNotIdx", "idx", "", "{images: notidx.idx}",
     "error: 'notidx.idx': not an IDX file", "notidx.idx"},
    {"NpyV1", "npy", "", "{files: feat.npy}", "data: f32[3,4]"},
    {"NpyField", "npy", "", "{files: feat.npy, field: feats}",
     "feats: f32[3,4]"},
    {"NpyV2U8", "npy", "", "{files: \"pix*.npy\"}", "data: u8[28,28]"},
    {"Npy1D", "npy", "", "{files: ids.npy, field: id}", "id: i64"},
    {"NpyGlobFirstFile", "npy", "", "{files: parts/part_*.npy}",
     "data: f16[5]"},
    {"NpyMatchingOverrides", "npy", "",
     "{files: feat.npy, dtype: f32, shape: [3, -1]}", "data: f32[3,?]"},
    {"NpyFromDtypeShape", "npy", "",
     "{files: \"later/*.npy\", dtype: f32, shape: [13]}", "data: f32[13]"},
    {"NpyFromDtypeScalar", "npy", "", "{files: \"later/*.npy\", dtype: i64}",
     "data: i64"},
    {"NpyNeedsDtype", "npy", "", "{files: \"later/*.npy\"}",
     "error: cannot tell the type of the records", "\"later"},
    {"NpyDtypeMismatch", "npy", "", "{files: feat.npy, dtype: f64}",
     "error: dtype f64 does not match", "f64"},
    {"NpyShapeMismatch", "npy", "", "{files: feat.npy, shape: [4, 3]}",
     "error: shape [4, 3] does not match", "[4, 3]"},
    {"NpyBigEndian", "npy", "", "{files: be.npy}", "error: big-endian",
     "be.npy"},
    {"NpyFortran", "npy", "", "{files: fortran.npy}", "error: Fortran order"},
    {"NpyScalarArray", "npy", "", "{files: scalar.npy}",
     "error: holds a 0-d array"},
    {"NpyUnicode", "npy", "", "{files: text.npy}",
     "error: unsupported dtype '<U10'"},
    {"Webdataset", "webdataset", "",
     "{shards: \"train-*.tar\", fields: [{ext: jpg, name: data}, {ext: cls, "
     "name: label, type: i64}, {ext: seg.png}]}",
     "key: string, data: bytes, label: i64, seg_png: bytes"},
    {"WebdatasetKeyName", "webdataset", "",
     "{shards: x.tar, fields: [{ext: txt, name: key}]}",
     "error: field name 'key' is taken", "key}"},
    {"WebdatasetDuplicate", "webdataset", "",
     "{shards: x.tar, fields: [{ext: jpg}, {ext: png, name: jpg}]}",
     "error: duplicate field name 'jpg'", "jpg}"},
};

INSTANTIATE_TEST_SUITE_P(Sources, TypeRuleTest,
                         ::testing::ValuesIn(kSourceCases),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });

const char *const kFolder = "path: string, data: bytes, label: i64";
const char *const kDecoded = "image: u8[?,?,3], label: i64";
const char *const kImage = "image: u8[224,224,3], label: i64";
const char *const kCriteo = "label: i64, dense: f32[13], cat: i64[26]";

const RuleCase kElementCases[] = {
    {"DecodeImage", "decode_image", kFolder,
     "{field: data, as: image, channels: 3}",
     "path: string, data: bytes, label: i64, image: u8[?,?,3]"},
    {"DecodeImageGray", "decode_image", kFolder, "{field: data, channels: 1}",
     "path: string, data: u8[?,?,1], label: i64"},
    {"DecodeImageDefaultChannels", "decode_image", kFolder, "{field: data}",
     "path: string, data: u8[?,?,3], label: i64"},
    {"DecodeImageTwoChannels", "decode_image", kFolder,
     "{field: data, channels: 2}",
     "error: channels must be 1 (grayscale) or 3 (RGB), got 2", "2}"},
    {"DecodeImagePath", "decode_image", kFolder, "{field: path}",
     "error: decode_image needs encoded image bytes, but field 'path' is "
     "string",
     "path}"},
    {"DecodeImageTwice", "decode_image", kDecoded, "{field: image}",
     "error: already decoded"},
    {"DecodeImageBatched", "decode_image", "data: bytes[128]", "{field: data}",
     "error: decodes one image per record"},
    {"DecodeImageBadAs", "decode_image", kFolder, "{field: data, as: my image}",
     "error: 'my image' is not a valid field", "my image"},

    {"ResizeHW", "resize", kDecoded, "{field: image, size: [256, 320]}",
     "image: u8[256,320,3], label: i64"},
    {"ResizeShorterSide", "resize", kImage, "{field: image, size: 256}",
     "image: u8[?,?,3], label: i64"},
    {"ResizeGrayF32", "resize", "x: f32[28,28]", "{field: x, size: [14, 14]}",
     "x: f32[14,14]"},
    {"ResizeI64", "resize", "x: i64[28,28]", "{field: x, size: 14}",
     "error: resize needs a u8 or f32 image, but field 'x' is i64[28,28]\n"
     "hint: cast it first"},
    {"ResizeRank1", "resize", "x: f32[28]", "{field: x, size: 14}",
     "error: rank 2 (HxW) or 3 (HxWxC)", "x,"},
    {"ResizeBytes", "resize", kFolder, "{field: data, size: 14}",
     "error: decode it first"},

    {"CenterCrop", "center_crop", "image: u8[256,256,3]",
     "{field: image, size: 224}", "image: u8[224,224,3]"},
    {"CenterCropDynamic", "center_crop", kDecoded,
     "{field: image, size: [224, 200]}", "image: u8[224,200,3], label: i64"},
    {"CenterCropGrayAs", "center_crop", "x: u8[28,28]",
     "{field: x, size: 20, as: y}", "x: u8[28,28], y: u8[20,20]"},
    {"CenterCropTooLarge", "center_crop", "image: u8[200,300,3]",
     "{field: image, size: 224}",
     "error: crop 224x224 is larger than the image 200x300", "224}"},
    {"CenterCropTooWide", "center_crop", "image: u8[?,200,3]",
     "{field: image, size: [100, 224]}",
     "error: crop 100x224 is larger than the image ?x200"},

    {"RandomCrop", "random_crop", "image: u8[32,32,3]",
     "{field: image, size: 32, padding: 4}", "image: u8[32,32,3]"},
    {"RandomCropPaddedFits", "random_crop", "image: u8[32,32,3]",
     "{field: image, size: 40, padding: 4}", "image: u8[40,40,3]"},
    {"RandomCropTooLarge", "random_crop", "image: u8[32,32,3]",
     "{field: image, size: 41, padding: 4}",
     "error: crop 41x41 is larger than the padded image 40x40 (padding 4)"},

    // The example.
    {"RandomResizedCrop", "random_resized_crop", kDecoded,
     "{field: image, size: [224, 224], scale: [0.08, 1.0], ratio: [0.75, "
     "1.3333]}",
     "image: u8[224,224,3], label: i64"},
    {"RandomResizedCropDefaults", "random_resized_crop", "x: f32[?,?]",
     "{field: x, size: 64}", "x: f32[64,64]"},
    {"RandomResizedCropScaleOrder", "random_resized_crop", kDecoded,
     "{field: image, size: 224, scale: [0.9, 0.1]}",
     "error: scale must be in increasing order, but 0.1 follows 0.9", "0.1]"},
    {"RandomResizedCropRatioOrder", "random_resized_crop", kDecoded,
     "{field: image, size: 224, ratio: [2, 0.5]}",
     "error: ratio must be in increasing order"},
    {"RandomResizedCropU16", "random_resized_crop", "image: u16[?,?,3]",
     "{field: image, size: 224}", "error: needs a u8 or f32 image"},

    {"RandomFlip", "random_flip", kImage, "{field: image, axis: height}",
     kImage},
    {"RandomFlipScalar", "random_flip", kImage, "{field: label}",
     "error: random_flip needs an image of rank 2 or more, but field 'label' "
     "is i64"},

    {"Normalize", "normalize", kImage,
     "{field: image, mean: [123.675, 116.28, 103.53], std: [58.395, 57.12, "
     "57.375]}",
     "image: f32[224,224,3], label: i64"},
    {"NormalizeScalarMeanStd", "normalize", "x: f64[?,13]",
     "{field: x, mean: 0.5, std: 2, as: y}", "x: f64[?,13], y: f32[?,13]"},
    {"NormalizeDynamicChannels", "normalize", "x: u8[?,?,?]",
     "{field: x, mean: [1, 2], std: [3, 4]}", "x: f32[?,?,?]"},
    // The example.
    {"NormalizeBytes", "normalize", kFolder,
     "{field: data, mean: [0.5], std: [0.2]}",
     "error: normalize needs a numeric tensor, but field 'data' is bytes\n"
     "hint: decode it first, e.g. `- decode_image: {field: data, as: "
     "image}`",
     "data,"},
    {"NormalizeString", "normalize", kFolder, "{field: path, mean: 0, std: 1}",
     "error: `tokenize` or `hash_bucket`"},
    {"NormalizeChannelMismatch", "normalize", kImage,
     "{field: image, mean: [1, 2], std: 1}",
     "error: mean has 2 values, but the channel (last) dim of field 'image' "
     "(u8[224,224,3]) is 3",
     "[1, 2]"},
    {"NormalizeMeanStdMismatch", "normalize", "x: u8[?,?,?]",
     "{field: x, mean: [1, 2], std: [3, 4, 5]}",
     "error: std has 3 values but mean has 2", "[3, 4, 5]"},
    {"NormalizeScalarField", "normalize", "x: f32",
     "{field: x, mean: [1, 2], std: 1}", "error: is a scalar; give one number"},

    {"Cast", "cast", kImage, "{field: image, dtype: f16}",
     "image: f16[224,224,3], label: i64"},
    {"CastBool", "cast", "m: bool[4]", "{field: m, dtype: i32}", "m: i32[4]"},
    {"CastToString", "cast", kImage, "{field: image, dtype: string}",
     "error: dtype 'string' is not a numeric type", "string"},

    {"TransposeCHW", "transpose", kImage, "{field: image, to: CHW}",
     "image: u8[3,224,224], label: i64"},
    {"TransposeHWC", "transpose", "x: f32[3,8,9]", "{field: x, to: HWC}",
     "x: f32[8,9,3]"},
    {"TransposePerm", "transpose", "x: f32[2,?]", "{field: x, perm: [1, 0]}",
     "x: f32[?,2]"},
    {"TransposeBadPerm", "transpose", kImage, "{field: image, perm: [0, 0, 1]}",
     "error: perm must be a permutation of 0..2 (one entry per dim of "
     "u8[224,224,3]), got [0, 0, 1]",
     "[0, 0, 1]"},
    {"TransposePermTooShort", "transpose", kImage,
     "{field: image, perm: [1, 0]}", "error: perm must be a permutation"},
    {"TransposeNeither", "transpose", kImage, "{field: image}",
     "error: transpose needs `to` (CHW or HWC) or `perm`", "<op>"},
    {"TransposeBoth", "transpose", kImage,
     "{field: image, to: CHW, perm: [2, 0, 1]}",
     "error: either `to` or `perm`, not both", "[2, 0, 1]"},
    {"TransposeCHWRank2", "transpose", "x: u8[28,28]", "{field: x, to: CHW}",
     "error: transpose to CHW needs a rank-3 image"},

    {"PadImage", "pad", "x: u8[32,32,3]", "{field: x, padding: 4}",
     "x: u8[40,40,3]"},
    {"PadImageSides", "pad", "x: u8[32,32,3]",
     "{field: x, padding: [1, 2, 3, 4]}", "x: u8[35,39,3]"},
    {"PadVector", "pad", "x: f32[10]", "{field: x, padding: [2, 3], value: -1}",
     "x: f32[15]"},
    {"PadDynamic", "pad", "x: u8[?,32,3]", "{field: x, padding: 1}",
     "x: u8[?,34,3]"},
    {"PadVectorFourValues", "pad", "x: f32[10]",
     "{field: x, padding: [1, 2, 3, 4]}",
     "error: a rank-1 field takes [before, after] or one number, got 4 values",
     "[1, 2, 3, 4]"},
    {"PadImageTwoValues", "pad", "x: u8[32,32,3]",
     "{field: x, padding: [1, 2]}",
     "error: an image takes [top, bottom, left, right]"},
    {"PadValueDoesNotFit", "pad", "x: u8[32,32,3]",
     "{field: x, padding: 2, value: -1}",
     "error: value -1.0 does not fit field 'x' (u8[32,32,3])", "-1}"},
    {"PadScalar", "pad", "x: f32", "{field: x, padding: 2}",
     "error: pad needs a tensor of rank 1 or more"},

    {"FillMissing", "fill_missing", kCriteo, "{field: dense, value: 0}",
     kCriteo},
    {"FillMissingInteger", "fill_missing", kCriteo, "{field: label}",
     "error: integer fields have no missing values (empty integer cells are a "
     "data error)",
     "label}"},

    {"ClampMin", "clamp", kCriteo, "{field: dense, min: 0}", kCriteo},
    {"ClampNoBounds", "clamp", kCriteo, "{field: dense}",
     "error: clamp needs `min`, `max` or both", "<op>"},
    {"ClampInverted", "clamp", kCriteo, "{field: dense, min: 5, max: 1}",
     "error: max (1.0) is less than min (5.0)", "1}"},
    {"ClampBytes", "clamp", kFolder, "{field: data, max: 1}",
     "error: clamp needs a numeric tensor"},

    // The criteo example.
    {"MapCriteo", "map", kCriteo,
     "{field: dense, expr: \"log(max(x, 0) + 1)\"}", kCriteo},
    {"MapKeepsIntegerType", "map", "x: u8[4]", "{field: x, expr: \"x * 2\"}",
     "x: u8[4]"},
    {"MapDivision", "map", "x: i64[4]", "{field: x, expr: \"x / 2\"}",
     "x: f64[4]"},
    {"MapDivisionF32", "map", "x: f32[4]", "{field: x, expr: \"x / 2\"}",
     "x: f32[4]"},
    {"MapLiteralOutOfRange", "map", "x: u8[4]", "{field: x, expr: \"x + 300\"}",
     "error: the integer 300 does not fit in u8"},
    {"MapDtype", "map", "x: i64[4]",
     "{field: x, expr: \"x / 2\", dtype: f64, as: half}",
     "x: i64[4], half: f64[4]"},
    {"MapToBool", "map", "x: f32[3]", "{field: x, expr: \"x > 0\"}",
     "x: bool[3]"},
    {"MapUnknownName", "map", kCriteo, "{field: dense, expr: \"y + 1\"}",
     "error: unknown name 'y'; did you mean 'x'?", "y + 1"},
    {"MapOtherField", "map", kCriteo, "{field: dense, expr: \"x * label\"}",
     "error: unknown name 'label'; did you mean 'x'?\nhint: in map, `x` is "
     "one element of field 'dense'",
     "label\""},
    {"MapParseError", "map", kCriteo, "{field: dense, expr: \"log(x\"}",
     "error: expected ',' or ')' to close '(' at offset 3", "\"}"},
    {"MapUnknownFunction", "map", kCriteo,
     "{field: dense, expr: \"1 + lgo(x)\"}",
     "error: unknown function 'lgo'; did you mean 'log'?", "lgo(x)"},
    {"MapIndex", "map", kCriteo, "{field: dense, expr: \"x[0] + 1\"}",
     "error: 'x' is one element of field 'dense' and cannot be indexed", "[0]"},
    {"MapTypeError", "map", kCriteo, "{field: dense, expr: \"(x > 0) * 2\"}",
     "error: '*' needs numbers, but '(x > 0)' is a bool", "* 2"},
    {"MapBytes", "map", kFolder, "{field: data, expr: \"x + 1\"}",
     "error: map needs a numeric tensor, but field 'data' is bytes"},
    {"MapBadDtype", "map", "x: f32", "{field: x, expr: x, dtype: bytes}",
     "error: dtype 'bytes' is not a numeric type"},

    {"HashBucketCriteo", "hash_bucket", kCriteo,
     "{field: cat, buckets: 1000000}", kCriteo},
    {"HashBucketString", "hash_bucket", kFolder,
     "{field: path, buckets: 100, as: h}",
     "path: string, data: bytes, label: i64, h: i64"},
    {"HashBucketFloat", "hash_bucket", kCriteo, "{field: dense, buckets: 10}",
     "error: hash_bucket needs integers, strings or bytes, but field 'dense' "
     "is f32[13]\nhint: to bucket floats by value use `bucketize`",
     "dense,"},

    {"Bucketize", "bucketize", kCriteo,
     "{field: dense, boundaries: [0, 1, 10]}",
     "label: i64, dense: i32[13], cat: i64[26]"},
    {"BucketizeNotIncreasing", "bucketize", kCriteo,
     "{field: dense, boundaries: [0, 5, 5]}",
     "error: boundaries must be strictly increasing, but 5.0 follows 5.0",
     "5]"},

    {"OneHot", "one_hot", kImage, "{field: label, depth: 10}",
     "image: u8[224,224,3], label: f32[10]"},
    {"OneHotVectorDtype", "one_hot", "ids: i32[4]",
     "{field: ids, depth: 3, dtype: u8}", "ids: u8[4,3]"},
    {"OneHotFloat", "one_hot", kCriteo, "{field: dense, depth: 3}",
     "error: one_hot needs integer class ids, but field 'dense' is f32[13]"},

    {"Tokenize", "tokenize", "line: string",
     "{field: line, vocab: vocab.txt, as: tokens}",
     "line: string, tokens: i64[?]"},
    {"TokenizeBytesInPlace", "tokenize", "text: bytes",
     "{field: text, vocab: v.txt, lowercase: true}", "text: i64[?]"},
    {"TokenizeNumber", "tokenize", kCriteo, "{field: label, vocab: v.txt}",
     "error: tokenize needs text (a string or bytes field), but field "
     "'label' is i64"},
    {"TokenizeBatched", "tokenize", "line: string[4]",
     "{field: line, vocab: v.txt}",
     "error: tokenize works on one text per record"},

    {"TruncateDynamic", "truncate", "t: i64[?]", "{field: t, length: 128}",
     "t: i64[?]"},
    {"TruncateStaticLonger", "truncate", "t: i64[200,2]",
     "{field: t, length: 128}", "t: i64[128,2]"},
    {"TruncateStaticShorter", "truncate", "t: bytes[50]",
     "{field: t, length: 128}", "t: bytes[50]"},
    {"TruncateScalar", "truncate", kCriteo, "{field: label, length: 1}",
     "error: truncate needs a tensor of rank 1 or more"},
};

INSTANTIATE_TEST_SUITE_P(Elements, TypeRuleTest,
                         ::testing::ValuesIn(kElementCases),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });

const char *const kMixed = "path: string, image: u8[2], label: i64";

const RuleCase kRecordCases[] = {
    {"Select", "select", kMixed, "[image, label]", "image: u8[2], label: i64"},
    {"SelectReorders", "select", kMixed, "{fields: [label, path]}",
     "label: i64, path: string"},
    {"SelectTwice", "select", kMixed, "[image, label, image]",
     "error: field 'image' is selected twice", "image]"},
    {"SelectUnknown", "select", kMixed, "[imgae]",
     "error: no field 'imgae'; did you mean 'image'?"},

    {"Rename", "rename", kMixed, "{image: pixels}",
     "path: string, pixels: u8[2], label: i64"},
    {"RenameSwap", "rename", kMixed, "{image: label, label: image}",
     "path: string, label: u8[2], image: i64"},
    {"RenameClash", "rename", kMixed, "{image: label}",
     "error: cannot rename 'image' to 'label': a field named 'label' already "
     "exists",
     "label}"},
    {"RenameSameTarget", "rename", kMixed, "{image: x, label: x}",
     "error: both 'image' and 'label' are renamed to 'x'", "x}"},
    {"RenameBadName", "rename", kMixed, "{image: 2d}",
     "error: '2d' is not a valid field name"},

    {"FilterCriteo", "filter", kCriteo, "\"label >= 0\"", kCriteo},
    {"FilterIndexed", "filter", kCriteo,
     "{where: \"label >= 0 and dense[0] < 5 and cat[25] != 3\"}", kCriteo},
    {"FilterUnknownField", "filter", kCriteo, "{where: \"lable >= 0\"}",
     "error: unknown field 'lable'; did you mean 'label'?", "lable"},
    {"FilterOutOfRange", "filter", kCriteo, "{where: \"dense[13] > 0\"}",
     "error: index 13 is out of range for field 'dense' (f32[13])", "[13]"},
    {"FilterVectorUnindexed", "filter", kCriteo, "{where: \"dense > 0\"}",
     "error: field 'dense' is f32[13]; a condition needs one value of it, not "
     "all of them\nhint: index it, e.g. 'dense[0]'",
     "dense > 0"},
    {"FilterIndexScalar", "filter", kCriteo, "{where: \"label[0] > 0\"}",
     "error: only rank-1 fields can be indexed", "[0]"},
    {"FilterIndexDynamic", "filter", "t: i64[?]", "{where: \"t[0] > 0\"}",
     "error: its length varies"},
    {"FilterNotBool", "filter", kCriteo, "{where: \"label + 1\"}",
     "error: filter needs a condition (a bool), but 'label + 1' is i64"},
    {"FilterString", "filter", kFolder, "{where: \"path == 1\"}",
     "error: field 'path' is string; conditions compute on numbers", "path"},
    {"FilterParseError", "filter", kCriteo, "{where: \"label => 0\"}",
     "error: '=' is not an operator", "=> 0"},
    {"FilterTypeError", "filter", kCriteo,
     "{where: \"label > 0 and dense[1]\"}",
     "error: 'and' needs conditions (bools), but 'dense[1]' is f32", "and"},

    {"Shuffle", "shuffle", kCriteo, "4096", kCriteo},
    {"ShuffleMap", "shuffle", kCriteo,
     "{buffer: 10, reshuffle_each_epoch: false}", kCriteo},

    {"Batch", "batch", kImage, "{size: 128, drop_remainder: true}",
     "image: u8[128,224,224,3], label: i64[128]"},
    {"BatchRemainder", "batch", kCriteo, "4096",
     "label: i64[?], dense: f32[?,13], cat: i64[?,26]"},
    {"BatchBytes", "batch", kFolder, "{size: 128, drop_remainder: true}",
     "path: string[128], data: bytes[128], label: i64[128]"},
    // The example.
    {"BatchVaryingImage", "batch", kDecoded, "{size: 128}",
     "error: cannot batch field 'image' of type u8[?,?,3]: its shape varies "
     "between records\nhint: resize or crop it to a fixed size first "
     "(resize, center_crop, random_resized_crop), or use padded_batch",
     "<op>"},

    {"PaddedBatchLength", "padded_batch", "tokens: i64[?], label: i64",
     "{size: 32, length: 128, drop_remainder: true}",
     "tokens: i64[32,128], label: i64[32]"},
    {"PaddedBatchNoLength", "padded_batch", "tokens: i64[?], label: i64",
     "{size: 32}", "tokens: i64[?,?], label: i64[?]"},
    {"PaddedBatchImages", "padded_batch", kDecoded, "{size: 8, length: 64}",
     "image: u8[?,64,64,3], label: i64[?]"},
    {"PaddedBatchValueDoesNotFit", "padded_batch", "t: u8[?]",
     "{size: 2, pad_value: 300}",
     "error: pad_value 300.0 does not fit field 't' (u8[?])", "300}"},

    {"Unbatch", "unbatch", "label: i64[128], image: f32[128,3,4]", "{}",
     "label: i64, image: f32[3,4]"},
    {"UnbatchDynamic", "unbatch", "t: i64[?,?]", "{}", "t: i64[?]"},
    {"UnbatchScalar", "unbatch", "x: f32[8], label: i64", "{}",
     "error: cannot unbatch field 'label' of type i64", "<op>"},

    {"RepeatForever", "repeat", kCriteo, "{}", kCriteo},
    {"RepeatCount", "repeat", kCriteo, "3", kCriteo},
    {"Take", "take", kCriteo, "100", kCriteo},
    {"Skip", "skip", kCriteo, "{count: 0}", kCriteo},
    {"Shard", "shard", kCriteo, "{num_shards: 4, index: 3}", kCriteo},
    {"ShardIndexTooLarge", "shard", kCriteo, "{num_shards: 4, index: 4}",
     "error: index 4 is out of range for num_shards 4", "4}"},
    {"Interleave", "interleave", kCriteo, "{cycle_length: 8}", kCriteo},
    {"CacheMemory", "cache", kCriteo, "memory", kCriteo},
    {"CacheDisk", "cache", kCriteo, "{to: disk, path: cache_dir}", kCriteo},
    {"CachePathWithMemory", "cache", kCriteo, "{path: cache_dir}",
     "error: path is only used with `to: disk`", "cache_dir"},
    {"PrefetchAuto", "prefetch", kCriteo, "{}", kCriteo},
    {"Prefetch", "prefetch", kCriteo, "2", kCriteo},
};

INSTANTIATE_TEST_SUITE_P(Records, TypeRuleTest,
                         ::testing::ValuesIn(kRecordCases),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });

//===----------------------------------------------------------------------===//
// Whole pipelines: each step's output feeds the next rule.
//===----------------------------------------------------------------------===//

std::string
runChain(const std::string &input,
         const std::vector<std::pair<const char *, const char *>> &steps) {
  std::string type = input;
  for (const auto &[opName, params] : steps) {
    const OpDef *op = Registry::instance().find(opName);
    EXPECT_NE(op, nullptr) << opName;
    if (!op)
      return "";
    RunResult r = runRule(*op, type, params);
    for (const RecordedError &e : r.errors)
      ADD_FAILURE() << opName << ": " << e.text;
    type = r.type.str();
  }
  return type;
}

TEST(TypeRuleChain, TransposeNormalizeBatch) {
  EXPECT_EQ(runChain(kImage, {{"transpose", "{field: image, to: CHW}"},
                              {"normalize", "{field: image, mean: 0.5, std: "
                                            "0.25}"},
                              {"batch", "{size: 128, drop_remainder: true}"}}),
            "image: f32[128,3,224,224], label: i64[128]");
}

TEST(TypeRuleChain, ImagenetTrainFromDesign) {
  EXPECT_EQ(
      runChain("",
               {{"image_folder", "{root: data/train, extensions: [jpg, jpeg, "
                                 "png]}"},
                {"decode_image", "{field: data, as: image, channels: 3}"},
                {"random_resized_crop", "{field: image, size: [224, 224], "
                                        "scale: [0.08, 1.0], ratio: [0.75, "
                                        "1.3333]}"},
                {"random_flip", "{field: image, axis: width, p: 0.5}"},
                {"normalize", "{field: image, mean: [123.675, 116.28, "
                              "103.53], std: [58.395, 57.12, 57.375]}"},
                {"transpose", "{field: image, to: CHW}"},
                {"select", "[image, label]"},
                {"shuffle", "{buffer: 4096}"},
                {"batch", "{size: 128, drop_remainder: true}"}}),
      "image: f32[128,3,224,224], label: i64[128]");
}

TEST(TypeRuleChain, CriteoFromDesign) {
  EXPECT_EQ(
      runChain("",
               {{"csv", "{files: \"data/criteo/day_*.tsv\", delimiter: "
                        "\"\\t\", columns: [{name: label, type: i64}, {name: "
                        "dense, type: f32, count: 13}, {name: cat, type: "
                        "hex32, count: 26}]}"},
                {"filter", "{where: \"label >= 0\"}"},
                {"fill_missing", "{field: dense, value: 0}"},
                {"map", "{field: dense, expr: \"log(max(x, 0) + 1)\"}"},
                {"hash_bucket", "{field: cat, buckets: 1000000}"},
                {"batch", "{size: 4096}"}}),
      "label: i64[?], dense: f32[?,13], cat: i64[?,26]");
}

TEST(TypeRuleChain, FashionMnist) {
  std::string images = fmnist("train-images-idx3-ubyte.gz");
  std::string labels = fmnist("train-labels-idx1-ubyte.gz");
  std::string src = "{images: " + images + ", labels: " + labels + "}";
  EXPECT_EQ(runChain("", {{"idx", src.c_str()},
                          {"map", "{field: image, expr: \"x / 255.0\", "
                                  "dtype: f32}"},
                          {"one_hot", "{field: label, depth: 10}"},
                          {"batch", "{size: 64, drop_remainder: true}"}}),
            "image: f32[64,28,28], label: f32[64,10]");
}

} // namespace
