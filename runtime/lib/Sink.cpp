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

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

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

/// The header and the UTF-32 code units of a string tensor as numpy
/// unicode ('<U<n>').
std::string unicodeNpy(const Tensor &t, std::vector<uint32_t> &data) {
  std::vector<std::u32string> values;
  size_t width = 1;
  for (const std::string &s : t.stringValues()) {
    values.push_back(decodeUtf8(s));
    width = std::max(width, values.back().size());
  }
  data.assign(values.size() * width, 0);
  for (size_t i = 0; i < values.size(); ++i)
    for (size_t k = 0; k < values[i].size(); ++k)
      data[i * width + k] = static_cast<uint32_t>(values[i][k]);
  return npyHeader("<U" + std::to_string(width), t.shape());
}

class NullSink : public Sink {
public:
  Status open(const std::string &, const RecordType &) override {
    return Status::ok();
  }
  Status write(const Batch &) override { return Status::ok(); }
  Status close(const RunOutcome &) override { return Status::ok(); }
  std::string summary() const override { return ""; }
};

/// Creates `dir` and its missing parents (mkdir -p).
Status makeDirs(const std::string &dir) {
  std::string path;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    path = dir.substr(0, pos);
    if (path.empty())
      continue;
    struct stat sb;
    if (::stat(path.c_str(), &sb) == 0) {
      if (!S_ISDIR(sb.st_mode))
        return Status::error("npy sink: " + path +
                             " exists and is not a directory");
      continue;
    }
    if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST)
      return Status::error("npy sink: cannot create directory " + path + ": " +
                           std::strerror(errno));
  }
  return Status::ok();
}

/// Whether `name` is something the npy sink writes: index.json,
/// NNNNNN.<field>.npy / .bin / .lengths.npy, or one of those + ".tmp".
bool isSinkFile(std::string name) {
  if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0)
    name.resize(name.size() - 4);
  if (name == "index.json")
    return true;
  size_t digits = 0;
  while (digits < name.size() &&
         std::isdigit(static_cast<unsigned char>(name[digits])))
    ++digits;
  if (digits < 6 || digits >= name.size() || name[digits] != '.')
    return false;
  auto endsWith = [&](const char *suffix) {
    size_t n = std::strlen(suffix);
    return name.size() > digits + 1 + n &&
           name.compare(name.size() - n, n, suffix) == 0;
  };
  return endsWith(".npy") || endsWith(".bin");
}

class NpySink : public Sink {
public:
  NpySink(std::string dir, SinkOptions opts)
      : dir_(std::move(dir)), opts_(opts) {
    while (dir_.size() > 1 && dir_.back() == '/')
      dir_.pop_back();
  }

  ~NpySink() override { removeTemps(); }

  Status open(const std::string &pipeline, const RecordType &type) override {
    if (Status s = makeDirs(dir_); !s)
      return s;
    if (Status s = clearOrRefuse(); !s)
      return s;
    type_ = type;
    index_ = {{"format", "sluice-npy"}, {"version", 1}, {"pipeline", pipeline}};
    Json fields = Json::array();
    for (const Field &f : type.fields())
      fields.push_back(
          {{"name", f.name},
           {"dtype", std::string(elemTypeName(f.type.elem))},
           {"shape", f.type.shape},
           {"storage",
            f.type.elem == ElemType::Bytes
                ? "bin+lengths"
                : (f.type.elem == ElemType::String ? "npy-unicode" : "npy")}});
    index_["fields"] = std::move(fields);
    outputs_ = Json::array();
    return Status::ok();
  }

  Status write(const Batch &b) override {
    char num[32];
    std::snprintf(num, sizeof(num), "%06lld", static_cast<long long>(count_));
    Json entry = {{"index", count_}, {"epoch", b.epoch()}};
    Json files = Json::object();
    // Every file of the output under a temporary name first; renamed into
    // place only when all of them are written.
    std::vector<std::string> names;
    Status s;
    int64_t bytes = 0;
    for (size_t i = 0; s && i < b.numFields() && i < type_.size(); ++i) {
      const std::string &name = type_.fields()[i].name;
      const Tensor &t = b.field(i);
      std::string base = std::string(num) + "." + name;
      Json fj = Json::object();
      auto put = [&](const std::string &file, const std::string &head,
                     const void *data, size_t size) {
        names.push_back(file);
        temps_.push_back(dir_ + "/" + file + ".tmp");
        return writeFile(temps_.back(), head, data, size);
      };
      if (t.isNumeric()) {
        fj["file"] = base + ".npy";
        std::string descr = npyDescr(t.elem());
        s = descr.empty() ? Status::error("cannot write a " + t.type().str() +
                                          " tensor as .npy")
                          : put(base + ".npy", npyHeader(descr, t.shape()),
                                t.raw(), t.nbytes());
        bytes += static_cast<int64_t>(t.nbytes());
      } else if (t.elem() == ElemType::String) {
        fj["file"] = base + ".npy";
        std::vector<uint32_t> data;
        std::string head = unicodeNpy(t, data);
        s = put(base + ".npy", head, data.data(),
                data.size() * sizeof(uint32_t));
        bytes += static_cast<int64_t>(t.memoryBytes());
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
        s = put(base + ".bin", "", blob.data(), blob.size());
        if (s)
          s = put(base + ".lengths.npy",
                  npyHeader(npyDescr(ElemType::I64), lengths.shape()),
                  lengths.raw(), lengths.nbytes());
        bytes += static_cast<int64_t>(blob.size());
      }
      fj["shape"] = t.shape();
      files[name] = std::move(fj);
    }
    for (size_t i = 0; s && i < names.size(); ++i) {
      std::string final = dir_ + "/" + names[i];
      if (::rename((final + ".tmp").c_str(), final.c_str()) != 0)
        s = Status::error("cannot rename " + final + ".tmp to " + final + ": " +
                          std::strerror(errno));
    }
    if (!s) {
      // None of this output stays: the index will not list it.
      for (const std::string &n : names) {
        ::unlink((dir_ + "/" + n).c_str());
        ::unlink((dir_ + "/" + n + ".tmp").c_str());
      }
      temps_.clear();
      return s.withContext("npy sink: output " + std::to_string(count_) + ": ");
    }
    temps_.clear();
    entry["fields"] = std::move(files);
    outputs_.push_back(std::move(entry));
    bytes_ += bytes;
    ++count_;
    return Status::ok();
  }

  Status close(const RunOutcome &outcome) override {
    removeTemps();
    outcome_ = outcome.statusName();
    index_["complete"] = outcome.status == RunOutcome::Status::Complete;
    index_["status"] = outcome.statusName();
    if (outcome.status != RunOutcome::Status::Complete)
      index_["reason"] = outcome.reason;
    index_["epochs_done"] = outcome.epochsDone;
    index_["count"] = count_;
    index_["outputs"] = outputs_;
    std::string text = prettyJson(index_) + "\n";
    std::string path = dir_ + "/index.json";
    Status s = writeFile(path + ".tmp", "", text.data(), text.size());
    if (s && ::rename((path + ".tmp").c_str(), path.c_str()) != 0)
      s = Status::error("cannot rename " + path + ".tmp to " + path + ": " +
                        std::strerror(errno));
    if (!s) {
      ::unlink((path + ".tmp").c_str());
      indexFailed_ = true;
      return s.withContext("npy sink: no index.json, so " + dir_ +
                           " is not a complete output: ");
    }
    return Status::ok();
  }

  std::string summary() const override {
    std::string s = "wrote " + std::to_string(count_) + " outputs (" +
                    formatBytes(bytes_) + ") to " + dir_;
    if (indexFailed_)
      return s + " (no index.json: incomplete)";
    return s + " (index: " + dir_ + "/index.json, status: " + outcome_ + ")";
  }

private:
  /// A non-empty folder is refused unless --overwrite; with it, cleared if
  /// it holds only what this sink writes (never someone's other files).
  Status clearOrRefuse() {
    DIR *d = ::opendir(dir_.c_str());
    if (!d)
      return Status::error("npy sink: cannot read directory " + dir_ + ": " +
                           std::strerror(errno));
    std::vector<std::string> entries, foreign;
    while (struct dirent *e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..")
        continue;
      entries.push_back(name);
      struct stat sb;
      std::string path = dir_ + "/" + name;
      if (::lstat(path.c_str(), &sb) != 0 || !S_ISREG(sb.st_mode) ||
          !isSinkFile(name))
        foreign.push_back(name);
    }
    ::closedir(d);
    if (entries.empty())
      return Status::ok();
    std::sort(entries.begin(), entries.end());
    std::sort(foreign.begin(), foreign.end());
    if (!opts_.overwrite)
      return Status::error(
          "npy sink: " + dir_ + " is not empty (" +
          std::to_string(entries.size()) + " entries, e.g. " + entries[0] +
          "); give --overwrite to clear it first, or choose an empty or new "
          "directory");
    if (!foreign.empty())
      return Status::error(
          "npy sink: --overwrite clears only folders that hold sluice npy "
          "output, and " +
          dir_ + " also holds " + foreign[0] +
          (foreign.size() > 1
               ? " (and " + std::to_string(foreign.size() - 1) + " more)"
               : "") +
          "; nothing was removed");
    // index.json first: a folder half-cleared is never mistaken for output.
    for (const std::string &name : {std::string("index.json")})
      if (std::find(entries.begin(), entries.end(), name) != entries.end() &&
          ::unlink((dir_ + "/" + name).c_str()) != 0)
        return Status::error("npy sink: cannot remove " + dir_ + "/" + name +
                             ": " + std::strerror(errno));
    for (const std::string &name : entries)
      if (name != "index.json" && ::unlink((dir_ + "/" + name).c_str()) != 0)
        return Status::error("npy sink: cannot remove " + dir_ + "/" + name +
                             ": " + std::strerror(errno));
    return Status::ok();
  }

  void removeTemps() {
    for (const std::string &t : temps_)
      ::unlink(t.c_str());
    temps_.clear();
  }

  std::string dir_;
  SinkOptions opts_;
  RecordType type_;
  Json index_, outputs_;
  /// Temporary files of the output being written.
  std::vector<std::string> temps_;
  std::string outcome_ = "complete";
  bool indexFailed_ = false;
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

const char *RunOutcome::statusName() const {
  switch (status) {
  case Status::Complete:
    return "complete";
  case Status::Failed:
    return "failed";
  case Status::Interrupted:
    return "interrupted";
  case Status::Stopped:
    return "stopped";
  }
  return "failed";
}

Expected<std::unique_ptr<Sink>> makeSink(const std::string &spec,
                                         const SinkOptions &opts) {
  if (spec.empty() || spec == "null")
    return std::unique_ptr<Sink>(new NullSink());
  if (spec.rfind("npy:", 0) == 0 && spec.size() > 4)
    return std::unique_ptr<Sink>(new NpySink(spec.substr(4), opts));
  return Status::error("unknown sink '" + spec + "'; use 'null' or 'npy:DIR'");
}

} // namespace sluice::runtime
