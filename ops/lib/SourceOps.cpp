//===- SourceOps.cpp - Registry entries of the sources --------------------===//
//
// Sources produce the first record type of a pipeline. Most know it from
// their parameters alone; idx and npy read the header of their data file at
// check time so that `sluice check` shows static shapes (and fall back to
// the parameters when the data is not there yet).
//
//===----------------------------------------------------------------------===//
#include "Internal.h"
#include "OpHelpers.h"
#include "sluice/ops/FileFormats.h"

#include <glob.h>
#include <zlib.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>

namespace sluice {
namespace {

using namespace detail;

ParamSpec globParam(std::string name, std::string what) {
  return param(std::move(name), ParamKind::String)
      .req()
      .names(DataPath::Glob)
      .describe("Glob of the " + what +
                " to read (`*`, `?`, `[...]`), relative to the spec file. "
                "Files are read in sorted order.");
}

/// `shuffle` of the random-access sources (image_folder, files, idx, npy).
ParamSpec shuffleParam() {
  return param("shuffle", ParamKind::Bool)
      .def(Value::boolean(false))
      .describe("Read the records in a random order: each epoch one "
                "permutation of all records, derived from (seed, epoch). With "
                "several ranks it is one global order that the ranks share "
                "out, so a job resumed at another world size still reads "
                "every remaining record once. (idx and npy hold their records "
                "in memory, counted in budget.memory, to read them out of "
                "order.)");
}

/// Sorted matches of a glob written in the spec.
std::vector<std::string> globFiles(TypeContext &ctx,
                                   const std::string &pattern) {
  std::vector<std::string> out;
  glob_t g;
  std::memset(&g, 0, sizeof(g));
  if (::glob(ctx.resolvePath(pattern).c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i)
      out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  return out;
}

/// Reports duplicate output field names at the second occurrence.
class NameSet {
public:
  explicit NameSet(TypeContext &ctx, std::string what)
      : ctx_(ctx), what_(std::move(what)) {}
  bool add(const std::string &name, const Value &at, size_t index) {
    auto [it, inserted] = first_.emplace(name, index);
    if (inserted)
      return true;
    ctx_.error(at, "duplicate " + what_ + " name '" + name + "'; " + what_ +
                       " " + std::to_string(it->second + 1) +
                       " already uses it");
    return false;
  }

private:
  TypeContext &ctx_;
  std::string what_;
  std::map<std::string, size_t> first_;
};

//===----------------------------------------------------------------------===//
// image_folder, files, text_lines
//===----------------------------------------------------------------------===//

OpDef imageFolder() {
  OpDef op = source("image_folder");
  op.summary = "Images in one sub-directory per class, as in ImageNet.";
  op.doc = "Walks `root`, whose sub-directories are the classes, and emits "
           "one record per image file with the raw file contents. Labels are "
           "the indices of the class directories in sorted order, so the "
           "same tree always gives the same labels. Decode `data` with "
           "`decode_image`.";
  op.example = "source:\n  image_folder: {root: data/train, extensions: [jpg, "
               "jpeg, png]}";
  op.typeDoc = "`path: string, data: bytes, label: i64`.";
  op.params = {
      param("root", ParamKind::String)
          .req()
          .names(DataPath::File)
          .describe("Directory with one sub-directory per class."),
      param("extensions", ParamKind::StringList)
          .def(Value::list({Value::string("jpg"), Value::string("jpeg"),
                            Value::string("png")}))
          .length(1, std::numeric_limits<size_t>::max())
          .scalar()
          .describe("File extensions to read (case-insensitive, without the "
                    "dot)."),
      shuffleParam(),
      onErrorParam(),
      remoteParam(),
  };
  op.cost = {20000, 0.2, 1};
  op.typeRule = [](TypeContext &ctx) {
    const Value &exts = ctx.param("extensions");
    for (const Value &e : exts.items()) {
      const std::string &s = e.asString();
      if (s.empty())
        ctx.error(e, "empty extension");
      else if (s[0] == '.')
        ctx.error(e, "write extensions without the dot: '" + s.substr(1) + "'");
    }
    return RecordType({{"path", FieldType(ElemType::String)},
                       {"data", FieldType(ElemType::Bytes)},
                       {"label", FieldType(ElemType::I64)}});
  };
  return op;
}
static OpRegistration regImageFolder(imageFolder());

OpDef files() {
  OpDef op = source("files");
  op.summary = "Whole files matching a glob, as raw bytes.";
  op.doc = "One record per file, in sorted path order. Use it for images "
           "without class directories, or any per-file payload.";
  op.example = "source:\n  files: data/images/*.jpg";
  op.typeDoc = "`path: string, data: bytes`.";
  op.params = {globParam("files", "files").formerly("glob"), shuffleParam(),
               onErrorParam(), remoteParam()};
  op.shorthand = "files";
  op.cost = {20000, 0.2, 1};
  op.typeRule = [](TypeContext &) {
    return RecordType({{"path", FieldType(ElemType::String)},
                       {"data", FieldType(ElemType::Bytes)}});
  };
  return op;
}
static OpRegistration regFiles(files());

OpDef textLines() {
  OpDef op = source("text_lines");
  op.traits.warnsOnEmptyFiles = true;
  op.summary = "Lines of text files.";
  op.doc = "One record per line (without the line break) of every matching "
           "file, files in sorted order. Empty lines are records too.";
  op.example = "source:\n  text_lines: data/corpus/*.txt";
  op.typeDoc = "`line: string`.";
  op.params = {globParam("files", "text files"), encodingParam(),
               onErrorParam(), remoteParam()};
  op.shorthand = "files";
  op.cost = {100, 1, 1};
  op.typeRule = [](TypeContext &) {
    return RecordType({{"line", FieldType(ElemType::String)}});
  };
  return op;
}
static OpRegistration regTextLines(textLines());

//===----------------------------------------------------------------------===//
// csv, tsv
//===----------------------------------------------------------------------===//

OpDef delimited(std::string name, std::string delimiter) {
  bool tab = delimiter == "\t";
  OpDef op = source(name);
  op.traits.warnsOnEmptyFiles = true;
  op.traits.projection = Projection::ListFields;
  op.traits.projectionParam = "read";
  op.summary = tab ? "Tab-separated text files (the same as csv with a tab "
                     "delimiter)."
                   : "Delimited text files with typed columns.";
  op.doc =
      "Each line is a record. `columns` lists the columns in file order; a "
      "column with `count: N` reads N consecutive cells into one vector "
      "field (`dense: f32[13]`). An empty numeric cell is a missing value: "
      "NaN for float columns (see `fill_missing`), a data error for integer "
      "columns. `hex32` reads hexadecimal ids (Criteo's categorical "
      "features) into i64; an empty `hex32` cell reads as 0, the usual "
      "\"missing\" id for Criteo categoricals. Quoted cells (\"a,b\") follow "
      "RFC 4180.";
  // The csv example is DESIGN.md's Criteo source; tsv drops the delimiter.
  op.example = std::string("source:\n  ") + name +
               ":\n    files: data/criteo/day_*.tsv" +
               (tab ? "" : "\n    delimiter: \"\\t\"") +
               "\n    columns:\n"
               "      - {name: label, type: i64}\n"
               "      - {name: dense, type: f32, count: 13}\n"
               "      - {name: cat, type: hex32, count: 26}";
  op.typeDoc = "one field per column, in column order: `type` (hex32 gives "
               "i64), scalar when `count` is 1, else `type[count]`.";
  op.params = {
      globParam("files", "text files"),
      param("delimiter", ParamKind::String)
          .def(Value::string(delimiter))
          .describe("The one-character cell separator; write a tab as "
                    "\"\\t\" (double quotes)."),
      param("header", ParamKind::Bool)
          .def(Value::boolean(false))
          .describe("Skip the first line of every file."),
      structParam(
          "columns",
          {param("name", ParamKind::String)
               .req()
               .describe("Field name of the column."),
           enumParam("type", {"u8", "i8", "u16", "i16", "i32", "i64", "f32",
                              "f64", "bool", "string", "bytes", "hex32"})
               .req()
               .describe("Cell type; `bool` reads 0/1/true/false."),
           param("count", ParamKind::Int)
               .def(Value::integer(1))
               .atLeast(1)
               .describe("Consecutive cells read into one vector field.")},
          /*isList=*/true)
          .req()
          .length(1, std::numeric_limits<size_t>::max())
          .describe("The columns, in file order."),
      encodingParam(),
      param("read", ParamKind::StringList)
          .length(1, std::numeric_limits<size_t>::max())
          .describe("Produce only these columns (in file order); the cells "
                    "of the others are counted (a line must still have "
                    "every cell) but never converted, so a malformed value "
                    "in them is not an error. The compiler sets it to the "
                    "columns the pipeline reads (sluice-push-projections); "
                    "default: all."),
      onErrorParam(),
      remoteParam(),
  };
  op.cost = {1000, 5, 1};
  op.typeRule = [](TypeContext &ctx) {
    const Value &delim = ctx.param("delimiter");
    const std::string &d = delim.asString();
    if (d == "\\t") {
      ctx.error(delim, "delimiter '\\t' is two characters, a backslash and 't'",
                "write a tab in double quotes: delimiter: \"\\t\"");
    } else if (d.size() != 1) {
      ctx.error(delim, "delimiter must be one character, got '" + d + "'");
    } else if (d == "\"" || d == "\n" || d == "\r") {
      ctx.error(delim, "delimiter cannot be a quote or a line break");
    }
    RecordType out;
    NameSet names(ctx, "column");
    const auto &cols = ctx.param("columns").items();
    for (size_t i = 0; i < cols.size(); ++i) {
      const Value &col = cols[i];
      const Value &name = col["name"];
      if (!requireFieldName(ctx, name) || !names.add(name.asString(), name, i))
        continue;
      std::string type = col["type"].asString();
      std::optional<ElemType> elem =
          type == "hex32" ? ElemType::I64 : parseElemType(type);
      if (!elem) {
        ctx.error(col["type"], "unknown column type '" + type + "'");
        continue;
      }
      int64_t count = intOr(col["count"], 1);
      out.set(name.asString(),
              count == 1 ? FieldType(*elem) : FieldType(*elem, {count}));
    }
    const Value &read = ctx.param("read");
    if (read.isList()) {
      RecordType kept;
      for (const Value &r : read.items()) {
        const Field *f = r.isString() ? out.find(r.asString()) : nullptr;
        if (!f)
          ctx.error(r,
                    "'read' names '" + (r.isString() ? r.asString() : "") +
                        "', which is not a column",
                    "the columns are the `name`s under `columns`");
      }
      for (const Field &f : out.fields())
        for (const Value &r : read.items())
          if (r.isString() && r.asString() == f.name)
            kept.set(f.name, f.type);
      return kept;
    }
    return out;
  };
  return op;
}
static OpRegistration regCsv(delimited("csv", ","));
static OpRegistration regTsv(delimited("tsv", "\t"));

//===----------------------------------------------------------------------===//
// tfrecord
//===----------------------------------------------------------------------===//

OpDef tfrecord() {
  OpDef op = source("tfrecord");
  op.traits.warnsOnEmptyFiles = true;
  op.traits.projection = Projection::KeepEntries;
  op.traits.projectionParam = "features";
  op.summary = "TFRecord files of tf.train.Example protos.";
  op.doc = "Reads length-delimited records (both CRCs checked) and parses "
           "each as a tf.train.Example. Each entry of `features` selects one "
           "feature: `bytes`/`string` from a bytes_list, `i64` from an "
           "int64_list, `f32` from a float_list. `shape: []` expects exactly "
           "one value; `shape: [-1]` reads a variable-length list.";
  op.example = "source:\n  tfrecord:\n    files: data/train-*.tfrecord\n"
               "    features:\n"
               "      - {name: image/encoded, type: bytes, as: data}\n"
               "      - {name: image/class/label, type: i64, as: label}";
  op.typeDoc = "one field per feature, named `as` (or the key): "
               "`type[shape]`, -1 dims are `?`.";
  op.params = {
      globParam("files", "TFRecord files"),
      structParam(
          "features",
          {param("name", ParamKind::String)
               .req()
               .describe("Feature key in the Example."),
           enumParam("type", {"bytes", "string", "i64", "f32"})
               .req()
               .describe("Element type of the field."),
           param("shape", ParamKind::IntList)
               .def(Value::list({}))
               .atLeast(-1)
               .describe("Shape of the feature's values; -1 for a variable "
                         "length. [] is one value."),
           param("as", ParamKind::String)
               .describe("Field name; defaults to the feature key, which "
                         "must then be a valid field name.")},
          /*isList=*/true)
          .req()
          .length(1, std::numeric_limits<size_t>::max())
          .describe("The features to read."),
      onErrorParam(),
      remoteParam(),
  };
  op.cost = {1000, 1, 1};
  op.typeRule = [](TypeContext &ctx) {
    RecordType out;
    NameSet names(ctx, "feature");
    const auto &feats = ctx.param("features").items();
    for (size_t i = 0; i < feats.size(); ++i) {
      const Value &f = feats[i];
      const Value &key = f["name"];
      const Value &as = f["as"];
      std::string name;
      if (as.isString()) {
        if (!requireFieldName(ctx, as))
          continue;
        name = as.asString();
      } else {
        name = key.asString();
        if (!isIdentifier(name)) {
          std::string suggestion;
          for (char c : name)
            suggestion += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
          if (suggestion.empty() ||
              std::isdigit(static_cast<unsigned char>(suggestion[0])))
            suggestion = "f_" + suggestion;
          ctx.error(key, "feature key '" + name + "' is not a valid field name",
                    "name the field with `as`, e.g. `{name: " + name +
                        ", type: " + f["type"].asString() +
                        ", as: " + suggestion + "}`");
          continue;
        }
      }
      if (!names.add(name, as.isString() ? as : key, i))
        continue;
      std::vector<int64_t> shape;
      const Value &shapeV = f["shape"];
      bool ok = true;
      for (const Value &d : shapeV.items()) {
        if (d.asInt() == 0 || d.asInt() < -1) {
          ctx.error(d, "dims must be at least 1, or -1 for a variable length");
          ok = false;
        }
        shape.push_back(d.asInt() < 0 ? kDynamic : d.asInt());
      }
      if (!ok)
        continue;
      out.set(name, FieldType(*parseElemType(f["type"].asString()), shape));
    }
    return out;
  };
  return op;
}
static OpRegistration regTfrecord(tfrecord());

//===----------------------------------------------------------------------===//
// idx
//===----------------------------------------------------------------------===//

/// Reads the IDX header of `path`, plain or gzip (gzread passes plain files
/// through). nullopt + empty `error` when the file cannot be opened; nullopt
/// + `error` when it is not a valid IDX file.
std::optional<IdxHeader> readIdxHeader(const std::string &path,
                                       std::string &error,
                                       const Value *remote = nullptr) {
  error.clear();
  if (isRemoteName(path)) {
    // Over HTTP/S3 when the runtime gave a reader (its first chunk, inflated).
    if (!remoteHeadReader() || !remote)
      return std::nullopt;
    Expected<std::string> bytes =
        remoteHeadReader()("idx", path, *remote, kIdxMaxHeaderBytes);
    if (!bytes) {
      error = "cannot read the IDX header: " + bytes.status().message();
      return std::nullopt;
    }
    Expected<IdxHeader> h = parseIdxHeader(*bytes);
    if (!h) {
      error = h.status().message();
      return std::nullopt;
    }
    return h.take();
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f)
    return std::nullopt;
  std::string bytes(kIdxMaxHeaderBytes, '\0');
  int got = gzread(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  if (got < 0) {
    // A read error (a bad CRC at the end of a small .gz, corrupt deflate
    // data) is why there are no bytes: say so, not that the file is short.
    int code = 0;
    const char *msg = gzerror(f, &code);
    std::string why = msg && *msg ? msg : "read error";
    if (why.compare(0, path.size() + 2, path + ": ") == 0)
      why.erase(0, path.size() + 2); // zlib names the file; so does the caller
    error = "cannot read the IDX header: gzip: " + why;
    gzclose(f);
    return std::nullopt;
  }
  gzclose(f);
  bytes.resize(static_cast<size_t>(got));
  Expected<IdxHeader> h = parseIdxHeader(bytes);
  if (!h) {
    error = h.status().message();
    return std::nullopt;
  }
  return h.take();
}

OpDef idx() {
  OpDef op = source("idx");
  op.summary = "IDX files (MNIST, Fashion-MNIST), plain or gzipped.";
  op.doc = "Emits one record per image of the `images` file (an IDX file "
           "whose first dim counts the images) and, when `labels` is given, "
           "the matching entry of the 1-D labels file. The image shape is "
           "read from the IDX header at check time.";
  op.example = "source:\n  idx:\n    images: "
               "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz\n"
               "    labels: "
               "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";
  op.typeDoc = "`image: u8[rows,cols]` (the element type and shape from the "
               "IDX header; `u8[?,?]` if the file is not there at check "
               "time), plus `label: i64` with `labels`.";
  op.params = {
      param("images", ParamKind::String)
          .req()
          .names(DataPath::File)
          .describe("Path of the IDX images file (`.gz` is decompressed)."),
      param("labels", ParamKind::String)
          .names(DataPath::File)
          .describe("Path of the 1-D IDX labels file."),
      shuffleParam(),
      onErrorParam(),
      remoteParam(),
  };
  op.cost = {100, 0.1, 1};
  op.typeRule = [](TypeContext &ctx) {
    FieldType image(ElemType::U8, {kDynamic, kDynamic});
    const Value &imagesV = ctx.param("images");
    std::string error;
    const Value &remote = ctx.param("remote");
    auto where = [&](const std::string &p) {
      return isRemoteName(p) ? p : ctx.resolvePath(p);
    };
    std::optional<IdxHeader> images =
        readIdxHeader(where(imagesV.asString()), error, &remote);
    if (!error.empty()) {
      ctx.error(imagesV, "'" + imagesV.asString() + "': " + error);
    } else if (images && images->dims.size() < 2) {
      ctx.error(imagesV,
                "'" + imagesV.asString() +
                    "' is a 1-D IDX file (a labels file?); `images` needs a "
                    "file of images, e.g. train-images-idx3-ubyte.gz");
    } else if (images) {
      image =
          FieldType(images->elem, std::vector<int64_t>(images->dims.begin() + 1,
                                                       images->dims.end()));
    }
    RecordType out({{"image", image}});
    const Value &labelsV = ctx.param("labels");
    if (labelsV.isString()) {
      std::optional<IdxHeader> labels =
          readIdxHeader(where(labelsV.asString()), error, &remote);
      if (!error.empty()) {
        ctx.error(labelsV, "'" + labelsV.asString() + "': " + error);
      } else if (labels && labels->dims.size() != 1) {
        ctx.error(labelsV, "'" + labelsV.asString() + "' has " +
                               std::to_string(labels->dims.size()) +
                               " dims; a labels file has one");
      } else if (labels && isFloat(labels->elem)) {
        ctx.error(labelsV, "'" + labelsV.asString() +
                               "' holds floating-point values; labels must "
                               "be integers");
      } else if (labels && images && images->dims.size() >= 2 &&
                 labels->dims[0] != images->dims[0]) {
        ctx.error(labelsV, "'" + labelsV.asString() + "' has " +
                               std::to_string(labels->dims[0]) +
                               " labels but the images file has " +
                               std::to_string(images->dims[0]) + " images");
      }
      out.set("label", FieldType(ElemType::I64));
    }
    return out;
  };
  return op;
}
static OpRegistration regIdx(idx());

//===----------------------------------------------------------------------===//
// npy
//===----------------------------------------------------------------------===//

/// Reads the .npy header of `path`. nullopt + empty `error` when the file
/// cannot be opened; nullopt + `error` when it is not a valid .npy file.
std::optional<NpyHeader> readNpyHeader(const std::string &path,
                                       std::string &error,
                                       const Value *remote = nullptr) {
  error.clear();
  if (isRemoteName(path)) {
    if (!remoteHeadReader() || !remote)
      return std::nullopt;
    Expected<std::string> bytes =
        remoteHeadReader()("npy", path, *remote, kNpyPreambleBytes);
    if (bytes) {
      Expected<size_t> size = npyHeaderSize(*bytes);
      if (size && *size > bytes->size())
        bytes = remoteHeadReader()("npy", path, *remote, *size);
    }
    if (!bytes) {
      error = "cannot read the .npy header: " + bytes.status().message();
      return std::nullopt;
    }
    Expected<NpyHeader> h = parseNpyHeader(*bytes);
    if (!h) {
      error = h.status().message();
      return std::nullopt;
    }
    return h.take();
  }
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return std::nullopt;
  std::string bytes(kNpyPreambleBytes, '\0');
  bytes.resize(std::fread(bytes.data(), 1, bytes.size(), f));
  if (Expected<size_t> size = npyHeaderSize(bytes);
      size && *size > bytes.size()) {
    size_t have = bytes.size();
    bytes.resize(*size);
    bytes.resize(have + std::fread(bytes.data() + have, 1, *size - have, f));
  }
  std::fclose(f);
  Expected<NpyHeader> h = parseNpyHeader(bytes);
  if (!h) {
    error = h.status().message();
    return std::nullopt;
  }
  return h.take();
}

OpDef npy() {
  OpDef op = source("npy");
  op.summary = "NumPy .npy arrays, one record per slice along axis 0.";
  op.doc = "Each matching file (sorted) is an array `[n, ...]` that yields n "
           "records of shape `[...]`. The element type and shape come from "
           "the header of the first matching file; all files must agree. "
           "`dtype` and `shape` give the type when the files do not exist at "
           "check time, and must match the files when they do.";
  op.example = "source:\n  npy: {files: data/features_*.npy, field: features}";
  op.typeDoc = "`<field>: dtype[shape]`, where shape is the array's shape "
               "without its first dim.";
  op.params = {
      globParam("files", ".npy files"),
      param("field", ParamKind::String)
          .def(Value::string("data"))
          .describe("Name of the field the slices go to."),
      param("dtype", ParamKind::DType)
          .describe("Element type, when the files cannot be read at check "
                    "time."),
      param("shape", ParamKind::IntList)
          .atLeast(-1)
          .describe("Shape of one record (without the first dim), when the "
                    "files cannot be read at check time; -1 for a size that "
                    "varies between files."),
      shuffleParam(),
      onErrorParam(),
      remoteParam(),
  };
  op.cost = {100, 0.1, 1};
  op.typeRule = [](TypeContext &ctx) {
    const Value &fieldV = ctx.param("field");
    std::string field = stringOr(fieldV, "data");
    if (fieldV.isString() && !requireFieldName(ctx, fieldV))
      return RecordType();
    const Value &dtypeV = ctx.param("dtype");
    const Value &shapeV = ctx.param("shape");
    std::optional<ElemType> dtype;
    if (dtypeV.isString()) {
      dtype = parseElemType(dtypeV.asString());
      if (!dtype || !isNumeric(*dtype)) {
        ctx.error(dtypeV, "npy arrays hold numbers; dtype '" +
                              dtypeV.asString() + "' is not numeric");
        return RecordType();
      }
    }
    std::optional<std::vector<int64_t>> shape;
    if (shapeV.isList()) {
      shape.emplace();
      for (const Value &d : shapeV.items()) {
        if (d.asInt() == 0 || d.asInt() < -1) {
          ctx.error(d, "dims must be at least 1, or -1 for a size that varies");
          return RecordType();
        }
        shape->push_back(d.asInt() < 0 ? kDynamic : d.asInt());
      }
    }

    const Value &filesV = ctx.param("files");
    // One remote object named outright: its header over HTTP/S3 (a remote
    // pattern would need a listing; the parameters say the type then).
    std::vector<std::string> matches =
        isRemoteName(filesV.asString())
            ? (filesV.asString().find_first_of("*?[{") == std::string::npos
                   ? std::vector<std::string>{filesV.asString()}
                   : std::vector<std::string>{})
            : globFiles(ctx, filesV.asString());
    if (!matches.empty()) {
      std::string error;
      std::optional<NpyHeader> h =
          readNpyHeader(matches[0], error, &ctx.param("remote"));
      if (!error.empty()) {
        ctx.error(filesV, "'" + matches[0] + "': " + error);
        return RecordType();
      }
      if (h) {
        if (h->bigEndian) {
          ctx.error(filesV, "'" + matches[0] + "' has dtype '" + h->descr +
                                "', which is not supported (big-endian; "
                                "convert with "
                                "arr.astype(arr.dtype.newbyteorder('<')))");
          return RecordType();
        }
        if (h->fortranOrder) {
          ctx.error(filesV, "'" + matches[0] +
                                "' is stored in Fortran order, which is not "
                                "supported; save it with np.save(path, "
                                "np.ascontiguousarray(arr))");
          return RecordType();
        }
        if (h->shape.empty()) {
          ctx.error(filesV, "'" + matches[0] +
                                "' holds a 0-d array; npy needs an array "
                                "with a first dim to split into records");
          return RecordType();
        }
        FieldType t(h->elem,
                    std::vector<int64_t>(h->shape.begin() + 1, h->shape.end()));
        if (dtype && *dtype != t.elem)
          ctx.error(dtypeV,
                    "dtype " + dtypeV.asString() + " does not match '" +
                        matches[0] + "', which holds " +
                        std::string(elemTypeName(t.elem)),
                    "drop `dtype`: it is read from the file; use `cast` to "
                    "convert");
        if (shape) {
          bool same = shape->size() == t.shape.size();
          for (size_t i = 0; same && i < shape->size(); ++i)
            same = (*shape)[i] == kDynamic || (*shape)[i] == t.shape[i];
          if (!same)
            ctx.error(shapeV,
                      "shape " + shapeV.str() + " does not match '" +
                          matches[0] + "', whose records are " + t.str(),
                      "drop `shape`: it is read from the file");
          else
            t.shape = *shape; // a -1 override keeps the dim dynamic
        }
        return RecordType({{field, t}});
      }
    }
    if (!dtype) {
      ctx.error(filesV,
                "cannot tell the type of the records: no file matching '" +
                    filesV.asString() + "' can be read now",
                "give it with `dtype` (and `shape` unless each record is a "
                "scalar), e.g. `dtype: f32, shape: [13]`");
      return RecordType();
    }
    return RecordType(
        {{field, FieldType(*dtype, shape ? *shape : std::vector<int64_t>{})}});
  };
  return op;
}
static OpRegistration regNpy(npy());

//===----------------------------------------------------------------------===//
// webdataset
//===----------------------------------------------------------------------===//

std::string sanitizeName(const std::string &ext) {
  std::string s;
  for (char c : ext)
    s += std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0])))
    s = "_" + s;
  return s;
}

OpDef webdataset() {
  OpDef op = source("webdataset");
  op.traits.warnsOnEmptyFiles = true;
  op.summary = "WebDataset tar shards: files grouped into samples by key.";
  op.doc = "A sample is the group of consecutive tar members that share a "
           "key (the name up to the first dot): `0001.jpg`, `0001.cls` is "
           "sample `0001` with extensions `jpg` and `cls`. Each entry of "
           "`fields` picks one extension. `i64` parses the member's text as "
           "an integer (class labels in `.cls`).";
  op.example = "source:\n  webdataset:\n    files: data/shards/train-*.tar\n"
               "    fields:\n      - {ext: jpg, name: data}\n"
               "      - {ext: cls, name: label, type: i64}";
  op.typeDoc = "`key: string` followed by one field per entry of `fields`.";
  op.params = {
      globParam("files", "tar shards").formerly("shards"),
      structParam(
          "fields",
          {param("ext", ParamKind::String)
               .req()
               .describe("Extension of the member, e.g. `jpg`, `cls`, "
                         "`seg.png`."),
           param("name", ParamKind::String)
               .describe("Field name; defaults to the extension with other "
                         "characters than letters, digits and '_' replaced "
                         "by '_'."),
           enumParam("type", {"bytes", "string", "i64"})
               .def(Value::string("bytes"))
               .describe("How the member's contents are read.")},
          /*isList=*/true)
          .req()
          .length(1, std::numeric_limits<size_t>::max())
          .describe("The members of each sample to read."),
      onErrorParam(),
      remoteParam(),
  };
  op.cost = {5000, 0.3, 1};
  op.typeRule = [](TypeContext &ctx) {
    RecordType out({{"key", FieldType(ElemType::String)}});
    NameSet names(ctx, "field");
    const auto &fields = ctx.param("fields").items();
    for (size_t i = 0; i < fields.size(); ++i) {
      const Value &f = fields[i];
      const Value &ext = f["ext"];
      const Value &nameV = f["name"];
      if (ext.asString().empty() || ext.asString()[0] == '.') {
        ctx.error(ext, "write the extension without the leading dot, e.g. "
                       "'jpg'");
        continue;
      }
      std::string name;
      const Value *at = &ext;
      if (nameV.isString()) {
        if (!requireFieldName(ctx, nameV))
          continue;
        name = nameV.asString();
        at = &nameV;
      } else {
        name = sanitizeName(ext.asString());
      }
      if (name == "key") {
        ctx.error(*at, "field name 'key' is taken by the sample key",
                  "give the field another name with `name`");
        continue;
      }
      if (!names.add(name, *at, i))
        continue;
      out.set(name, FieldType(*parseElemType(stringOr(f["type"], "bytes"))));
    }
    return out;
  };
  return op;
}
static OpRegistration regWebdataset(webdataset());

} // namespace
} // namespace sluice
