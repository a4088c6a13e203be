//===- Source.cpp - Source creation, error messages, type matching --------===//
//
// create() dispatches to the factory of each kind, then reconciles the
// reader's natural record type with the type the registry's type rule
// computed, so a disagreement between the two is caught before any record is
// read instead of surfacing as a wrong field downstream.
//
//===----------------------------------------------------------------------===//

#include "SourceImpl.h"

#include "sluice/ops/Registry.h"

#include <set>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <map>

namespace sluice::runtime {

using namespace detail;

std::optional<OnError> parseOnError(std::string_view text) {
  if (text == "fail")
    return OnError::Fail;
  if (text == "skip")
    return OnError::Skip;
  return std::nullopt;
}

std::string DataLocation::str() const {
  std::string s = file.empty() ? std::string("<unknown file>") : file;
  if (line >= 0)
    s += ":" + std::to_string(line);
  std::vector<std::string> parts;
  if (record >= 0)
    parts.push_back("record " + std::to_string(record));
  if (offset >= 0)
    parts.push_back("byte " + std::to_string(offset));
  if (!field.empty())
    parts.push_back("'" + field + "'");
  for (size_t i = 0; i < parts.size(); ++i)
    s += (i == 0 ? ": " : ", ") + parts[i];
  return s;
}

std::string DataError::message() const {
  std::string s = where.str() + ": " + reason;
  if (!detail.empty())
    s += ": " + detail;
  if (!recoverable)
    s += " (the rest of this file cannot be read)";
  return s;
}

ShardReader::~ShardReader() = default;
Source::~Source() = default;

std::optional<int64_t> Source::sizeHint() const { return std::nullopt; }

namespace {

const std::map<std::string, Factory> &factories() {
  static const std::map<std::string, Factory> table = {
      {"csv", createCsv},
      {"files", createFiles},
      {"idx", createIdx},
      {"image_folder", createImageFolder},
      {"npy", createNpy},
      {"text_lines", createTextLines},
      {"tfrecord", createTFRecord},
      {"tsv", createCsv},
      {"webdataset", createWebDataset},
  };
  return table;
}

bool dimsCompatible(const FieldType &have, const FieldType &want) {
  if (have.elem != want.elem || have.rank() != want.rank())
    return false;
  for (size_t i = 0; i < have.rank(); ++i)
    if (want.shape[i] != kDynamic && have.shape[i] != want.shape[i])
      return false;
  return true;
}

/// Maps the reader's natural fields onto `given`; an error explains the
/// first disagreement.
Status matchType(const std::string &kind, const RecordType &natural,
                 const RecordType &given, std::vector<int> &slots) {
  auto mismatch = [&](const std::string &what) {
    return Status::error(
        kind + ": the files produce records {" + natural.str() +
        "} but the pipeline was checked with {" + given.str() + "}: " + what);
  };
  slots.assign(natural.size(), 0);
  for (size_t k = 0; k < natural.size(); ++k) {
    const Field &f = natural.fields()[k];
    int at = given.indexOf(f.name);
    if (at < 0)
      return mismatch("field '" + f.name +
                      "' is missing from the checked type");
    const FieldType &want = given.fields()[static_cast<size_t>(at)].type;
    if (!dimsCompatible(f.type, want))
      return mismatch("field '" + f.name + "' is " + f.type.str() +
                      ", expected " + want.str());
    slots[k] = at;
  }
  if (given.size() != natural.size()) {
    for (const Field &f : given.fields())
      if (natural.indexOf(f.name) < 0)
        return mismatch("the files have no field '" + f.name + "'");
  }
  return Status::ok();
}

} // namespace

const std::vector<std::string> &Source::kinds() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto &kv : factories())
      v.push_back(kv.first);
    return v;
  }();
  return names;
}

namespace {
std::atomic<int64_t> &createCallCount() {
  static std::atomic<int64_t> n{0};
  return n;
}
} // namespace

int64_t Source::createCalls() {
  return createCallCount().load(std::memory_order_relaxed);
}

Expected<std::unique_ptr<Source>> Source::create(const std::string &kind,
                                                 const Value &params,
                                                 const RecordType &type,
                                                 const std::string &baseDir) {
  createCallCount().fetch_add(1, std::memory_order_relaxed);
  auto it = factories().find(kind);
  if (it == factories().end()) {
    std::string known;
    for (const std::string &k : kinds())
      known += (known.empty() ? "" : ", ") + k;
    return Status::error("unknown source '" + kind + "' (known: " + known +
                         ")");
  }
  OnError onError = OnError::Fail;
  if (const Value *v = params.get("on_error")) {
    std::optional<OnError> parsed;
    if (v->isString())
      parsed = parseOnError(v->asString());
    if (!parsed && !v->isNull())
      return Status::error(kind + ": on_error must be 'fail' or 'skip', got " +
                           v->str());
    if (parsed)
      onError = *parsed;
  }
  detail::ListingTotals before = detail::listingTotals();
  Expected<std::unique_ptr<Source>> made = it->second(kind, params, baseDir);
  if (!made)
    return made.status();
  std::unique_ptr<Source> src = made.take();
  src->kind_ = kind;
  detail::ListingTotals after = detail::listingTotals();
  src->listing_.requests =
      static_cast<int64_t>(after.requests - before.requests);
  src->listing_.keys = static_cast<int64_t>(after.keys - before.keys);
  src->listing_.seconds = after.seconds - before.seconds;
  // An empty file of a record format gives no records, which is almost
  // never meant (a failed download, a truncated copy): say so.
  if (const OpDef *def = Registry::instance().find(kind);
      def && def->traits.warnsOnEmptyFiles) {
    std::vector<std::string> empty;
    for (size_t i = 0; i < src->numShards(); ++i) {
      struct stat sb;
      std::string name = src->shardName(i);
      if (::stat(name.c_str(), &sb) == 0 && S_ISREG(sb.st_mode) &&
          sb.st_size == 0)
        empty.push_back(name);
    }
    if (!empty.empty())
      src->warnings_.push_back(
          (empty.size() == 1
               ? empty[0] + " is empty"
               : std::to_string(empty.size()) + " files are empty (" +
                     empty[0] + (empty.size() > 1 ? ", " + empty[1] : "") +
                     (empty.size() > 2 ? ", ..." : "") + ")") +
          " (0 bytes): no records from " + (empty.size() == 1 ? "it" : "them"));
  }
  src->onError_ = onError;
  if (type.empty()) {
    src->slots_.resize(src->type_.size());
    for (size_t k = 0; k < src->slots_.size(); ++k)
      src->slots_[k] = static_cast<int>(k);
  } else {
    Status s = matchType(kind, src->type_, type, src->slots_);
    if (!s)
      return s;
    src->type_ = type;
  }
  return src;
}

} // namespace sluice::runtime
