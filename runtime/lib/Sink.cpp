//===- Sink.cpp - The null and npy sinks ----------------------------------===//
//
// The npy writer emits format version 1.0 headers padded to a multiple of 64
// bytes (what numpy itself writes), little-endian descrs, C order.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/Sink.h"
#include "sluice/ops/FileFormats.h"
#include "sluice/runtime/Memory.h"

#include "sluice/runtime/JsonText.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>

namespace sluice::runtime {

Sink::~Sink() = default;

namespace {

using Json = nlohmann::ordered_json;

std::string npyHeader(const std::string &descr,
                      const std::vector<int64_t> &shape) {
  std::string dict =
      "{'descr': '" + descr + "', 'fortran_order': False, " + "'shape': (";
  for (size_t i = 0; i < shape.size(); ++i)
    dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : "") +
            (i + 1 < shape.size() ? ", " : "");
  dict += "), }";
  // magic(6) + version(2) + len(2) + dict + padding + '\n' = multiple of 64.
  size_t total = 10 + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict += '\n';
  std::string h = "\x93NUMPY";
  h += '\x01';
  h += '\x00';
  uint16_t len = static_cast<uint16_t>(dict.size());
  h += static_cast<char>(len & 0xFF);
  h += static_cast<char>(len >> 8);
  return h + dict;
}

Status writeFile(const std::string &path, const std::string &head,
                 const void *data, size_t size) {
  std::FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return Status::error("cannot create " + path + ": " + std::strerror(errno));
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size() &&
            (size == 0 || std::fwrite(data, 1, size, f) == size);
  ok = (std::fclose(f) == 0) && ok;
  if (!ok)
    return Status::error("cannot write " + path + ": " + std::strerror(errno));
  return Status::ok();
}

/// Decodes UTF-8 into code points; malformed sequences become U+FFFD.
std::u32string decodeUtf8(const std::string &s) {
  std::u32string out;
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    char32_t cp;
    size_t n;
    if (c < 0x80) {
      cp = c;
      n = 1;
    } else if ((c & 0xE0) == 0xC0) {
      cp = c & 0x1F;
      n = 2;
    } else if ((c & 0xF0) == 0xE0) {
      cp = c & 0x0F;
      n = 3;
    } else if ((c & 0xF8) == 0xF0) {
      cp = c & 0x07;
      n = 4;
    } else {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    bool ok = i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80)
        ok = false;
      else
        cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += n;
  }
  return out;
}

Status writeUnicodeNpy(const std::string &path, const Tensor &t) {
  std::vector<std::u32string> values;
  size_t width = 1;
  for (const std::string &s : t.stringValues()) {
    values.push_back(decodeUtf8(s));
    width = std::max(width, values.back().size());
  }
  std::vector<uint32_t> data(values.size() * width, 0);
  for (size_t i = 0; i < values.size(); ++i)
    for (size_t k = 0; k < values[i].size(); ++k)
      data[i * width + k] = static_cast<uint32_t>(values[i][k]);
  return writeFile(path, npyHeader("<U" + std::to_string(width), t.shape()),
                   data.data(), data.size() * sizeof(uint32_t));
}

class NullSink : public Sink {
public:
  Status open(const std::string &, const RecordType &) override {
    return Status::ok();
  }
  Status write(const Batch &) override { return Status::ok(); }
  Status close() override { return Status::ok(); }
  std::string summary() const override { return ""; }
};

class NpySink : public Sink {
public:
  explicit NpySink(std::string dir) : dir_(std::move(dir)) {}

  Status open(const std::string &pipeline, const RecordType &type) override {
    struct stat sb;
    if (::stat(dir_.c_str(), &sb) != 0) {
      if (::mkdir(dir_.c_str(), 0777) != 0)
        return Status::error("npy sink: cannot create directory " + dir_ +
                             ": " + std::strerror(errno));
    } else if (!S_ISDIR(sb.st_mode)) {
      return Status::error("npy sink: " + dir_ +
                           " exists and is not a "
                           "directory");
    }
    type_ = type;
    index_ = {{"format", "sluice-npy"}, {"version", 1}, {"pipeline", pipeline}};
    Json fields = Json::array();
    for (const Field &f : type.fields())
      fields.push_back(
          {{"name", f.name},
           {"dtype", std::string(elemTypeName(f.type.elem))},
           {"shape", f.type.shape},
           {"storage", f.type.elem == ElemType::Bytes
                           ? "bin+lengths"
                           : (f.type.elem == ElemType::String ? "npy-unicode"
                                                              : "npy")}});
    index_["fields"] = std::move(fields);
    outputs_ = Json::array();
    return Status::ok();
  }

  Status write(const Batch &b) override {
    char num[32];
    std::snprintf(num, sizeof(num), "%06lld", static_cast<long long>(count_));
    Json entry = {{"index", count_}, {"epoch", b.epoch()}};
    Json files = Json::object();
    for (size_t i = 0; i < b.numFields() && i < type_.size(); ++i) {
      const std::string &name = type_.fields()[i].name;
      const Tensor &t = b.field(i);
      std::string base = std::string(num) + "." + name;
      Json fj = Json::object();
      Status s;
      if (t.isNumeric()) {
        fj["file"] = base + ".npy";
        s = writeNpy(dir_ + "/" + base + ".npy", t);
        bytes_ += static_cast<int64_t>(t.nbytes());
      } else if (t.elem() == ElemType::String) {
        fj["file"] = base + ".npy";
        s = writeUnicodeNpy(dir_ + "/" + base + ".npy", t);
        bytes_ += static_cast<int64_t>(t.memoryBytes());
      } else {
        std::string blob;
        Tensor lengths = Tensor::empty(ElemType::I64, t.shape());
        int64_t *len = lengths.mutableData<int64_t>();
        const auto &vals = t.stringValues();
        for (size_t k = 0; k < vals.size(); ++k) {
          len[k] = static_cast<int64_t>(vals[k].size());
          blob += vals[k];
        }
        fj["file"] = base + ".bin";
        fj["lengths"] = base + ".lengths.npy";
        s = writeFile(dir_ + "/" + base + ".bin", "", blob.data(), blob.size());
        if (s)
          s = writeNpy(dir_ + "/" + base + ".lengths.npy", lengths);
        bytes_ += static_cast<int64_t>(blob.size());
      }
      if (!s)
        return s;
      fj["shape"] = t.shape();
      files[name] = std::move(fj);
    }
    entry["fields"] = std::move(files);
    outputs_.push_back(std::move(entry));
    ++count_;
    return Status::ok();
  }

  Status close() override {
    index_["count"] = count_;
    index_["outputs"] = outputs_;
    std::string text = prettyJson(index_) + "\n";
    return writeFile(dir_ + "/index.json", "", text.data(), text.size());
  }

  std::string summary() const override {
    return "wrote " + std::to_string(count_) + " outputs (" +
           formatBytes(bytes_) + ") to " + dir_ + " (index: " + dir_ +
           "/index.json)";
  }

private:
  std::string dir_;
  RecordType type_;
  Json index_, outputs_;
  int64_t count_ = 0;
  int64_t bytes_ = 0;
};

} // namespace

Status writeNpy(const std::string &path, const Tensor &t) {
  std::string descr = npyDescr(t.elem());
  if (descr.empty())
    return Status::error("cannot write a " + t.type().str() +
                         " tensor as .npy");
  return writeFile(path, npyHeader(descr, t.shape()), t.raw(), t.nbytes());
}

Expected<std::unique_ptr<Sink>> makeSink(const std::string &spec) {
  if (spec.empty() || spec == "null")
    return std::unique_ptr<Sink>(new NullSink());
  if (spec.rfind("npy:", 0) == 0 && spec.size() > 4)
    return std::unique_ptr<Sink>(new NpySink(spec.substr(4)));
  return Status::error("unknown sink '" + spec + "'; use 'null' or 'npy:DIR'");
}

} // namespace sluice::runtime
