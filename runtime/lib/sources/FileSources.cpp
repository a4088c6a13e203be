//===- FileSources.cpp - image_folder and files: one record per file ------===//
//
// Both sources make every file its own shard, so shard(i of N) spreads the
// classes of an image folder evenly over workers and interleave can mix
// them. The file list is kept compactly (one string arena) because an
// ImageNet-sized folder has over a million entries.
//
// image_folder layout: <root>/<class>/**/<file>.<ext>. Classes are the
// directories directly under root in bytewise-sorted order; the label is the
// class's index in that order (empty class directories keep their index, so
// labels do not shift when a split lacks a class). Files directly under
// root, hidden files and directories (a leading '.', e.g. macOS "._x.jpg"
// resource forks) and files with other extensions are ignored. Within a
// class, files are sorted by their path relative to the class directory.
//
// Over an s3:// root the tree is the listing of the prefix (ListObjectsV2):
// the first path component under root is the class (a key ending in '/'
// marks an empty class directory). Over remote objects both sources keep
// `remote.concurrency` GETs in flight ahead of the reader, in the order the
// stage names the shards it will open (prefetch), so the records are the
// same bytes in the same order as from local files.
//
//===----------------------------------------------------------------------===//

#include "SourceImpl.h"
#include "sluice/ops/Switches.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include <dirent.h>
#include <sys/stat.h>

namespace sluice::runtime::detail {

namespace fs = std::filesystem;

namespace {

/// A list of paths stored in one arena.
class PathList {
public:
  void add(std::string_view s, int32_t label) {
    offsets_.push_back(arena_.size());
    arena_.append(s);
    labels_.push_back(label);
  }
  size_t size() const { return labels_.size(); }
  std::string_view at(size_t i) const {
    size_t end = i + 1 < offsets_.size() ? offsets_[i + 1] : arena_.size();
    return std::string_view(arena_).substr(offsets_[i], end - offsets_[i]);
  }
  int32_t label(size_t i) const { return labels_[i]; }
  void shrink() {
    arena_.shrink_to_fit();
    offsets_.shrink_to_fit();
    labels_.shrink_to_fit();
  }

private:
  std::string arena_;
  std::vector<uint64_t> offsets_;
  std::vector<int32_t> labels_;
};

/// Reads one whole file as one record.
class WholeFileReader final : public ReaderBase {
public:
  WholeFileReader(std::string path, const std::vector<int> &slots,
                  std::string kind, std::optional<int64_t> label,
                  std::shared_ptr<const RemoteConfig> remote = nullptr,
                  std::shared_ptr<PendingFetch> pending = nullptr)
      : ReaderBase(std::move(path), slots), kind_(std::move(kind)),
        label_(label), remote_(std::move(remote)),
        pending_(std::move(pending)) {}

  ReadResult next(Record &out) override {
    if (done_)
      return ReadResult::end();
    done_ = true;
    std::string bytes, error;
    bool refused = false;
    if (!readWholeFile(file_, bytes, error, &refused, remote_,
                       std::move(pending_)))
      return fail(refused ? std::string(kRecordDoesNotFit)
                          : kind_ + ": cannot read file",
                  error, -1, true);
    bytes_ = bytes.size();
    startRecord(out);
    put(out, 0, Tensor::string(ElemType::String, file_));
    put(out, 1, Tensor::string(ElemType::Bytes, std::move(bytes)));
    if (label_)
      put(out, 2, Tensor::scalar<int64_t>(ElemType::I64, *label_));
    return ReadResult::record();
  }
  uint64_t bytesRead() const override { return bytes_; }

private:
  std::string kind_;
  std::optional<int64_t> label_;
  std::shared_ptr<const RemoteConfig> remote_;
  std::shared_ptr<PendingFetch> pending_;
  uint64_t bytes_ = 0;
};

/// An entry of an image folder found broken while listing (a directory
/// that could not be listed, a dangling symbolic link, an entry that cannot
/// be looked at): its reader reports the error once, so `on_error` decides
/// (fail with the path, or skip and count it) instead of the files silently
/// vanishing.
class BrokenEntryReader final : public ReaderBase {
public:
  BrokenEntryReader(std::string path, const std::vector<int> &slots,
                    std::string reason, std::string error)
      : ReaderBase(std::move(path), slots), reason_(std::move(reason)),
        error_(std::move(error)) {}
  ReadResult next(Record &) override {
    if (done_)
      return ReadResult::end();
    done_ = true;
    return fail(reason_, error_, -1, true);
  }
  uint64_t bytesRead() const override { return 0; }

private:
  std::string reason_, error_;
};

/// What a listed entry is when it cannot be looked at.
struct Broken {
  std::string reason; ///< the skip reason it is counted under
  std::string error;  ///< what is wrong with it
};

class ImageFolderSource final : public SourceBase {
public:
  std::string root;
  std::vector<std::string> classes;
  PathList files; // relative to root, class directory included
  /// Shards that are broken entries (directories which could not be
  /// listed, dangling links), and why.
  std::map<size_t, Broken> broken;

  size_t numShards() const override { return files.size(); }
  std::string shardName(size_t i) const override {
    return joinPath(root, std::string(files.at(i)));
  }
  std::optional<int64_t> sizeHint() const override {
    return static_cast<int64_t>(files.size());
  }
  std::unique_ptr<ShardReader> open(size_t i) const override {
    if (auto it = broken.find(i); it != broken.end())
      return std::make_unique<BrokenEntryReader>(
          shardName(i), slots(), it->second.reason, it->second.error);
    return std::make_unique<WholeFileReader>(
        shardName(i), slots(), "image_folder", files.label(i), remote(),
        remote() ? ahead_.take(i).fetch : nullptr);
  }
  bool oneRecordPerShard() const override { return true; }
  size_t prefetchDepth() const override {
    return remote() ? static_cast<size_t>(remote()->concurrency) : 0;
  }
  void prefetch(size_t i, bool nextPass) const override {
    if (remote() && i < files.size() && !broken.count(i))
      ahead_.startObject(remote(), i, shardName(i), nextPass);
  }
};

class FilesSource final : public SourceBase {
public:
  std::vector<std::string> paths;

  size_t numShards() const override { return paths.size(); }
  std::string shardName(size_t i) const override { return paths[i]; }
  std::optional<int64_t> sizeHint() const override {
    return static_cast<int64_t>(paths.size());
  }
  std::unique_ptr<ShardReader> open(size_t i) const override {
    return std::make_unique<WholeFileReader>(
        paths[i], slots(), "files", std::nullopt, remote(),
        remote() && isRemoteUrl(paths[i]) ? ahead_.take(i).fetch : nullptr);
  }
  bool oneRecordPerShard() const override { return true; }
  size_t prefetchDepth() const override {
    return remote() ? static_cast<size_t>(remote()->concurrency) : 0;
  }
  void prefetch(size_t i, bool nextPass) const override {
    if (remote() && i < paths.size() && isRemoteUrl(paths[i]))
      ahead_.startObject(remote(), i, paths[i], nextPass);
  }
};

std::string lower(std::string s) {
  for (char &c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool isHidden(const fs::path &p) {
  std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

/// "jpg, jpeg, png".
std::string extensionList(const std::vector<std::string> &exts) {
  std::string list;
  for (const std::string &e : exts)
    list += (list.empty() ? "" : ", ") + e;
  return list;
}

/// image_folder over an s3:// prefix: the classes and files come from the
/// listing instead of directories.
template <typename Wanted>
Expected<std::unique_ptr<Source>>
remoteImageFolder(const std::string &kind, const Value &params,
                  std::unique_ptr<ImageFolderSource> src,
                  const std::vector<std::string> &exts, Wanted wanted,
                  const std::string &base) {
  Expected<std::shared_ptr<const RemoteConfig>> cfg =
      remoteConfigFor(kind, params, base);
  if (!cfg)
    return cfg.status();
  src->setRemote(cfg.take());
  while (src->root.size() > 5 && src->root.back() == '/')
    src->root.pop_back();
  Expected<std::vector<std::string>> urls =
      listRemotePrefix(src->root, *src->remote());
  if (!urls)
    return Status::error(kind + ": root: " + urls.status().message());
  std::map<std::string, std::vector<std::string>> byClass;
  for (const std::string &url : *urls) {
    std::string rel = url.substr(src->root.size() + 1);
    size_t slash = rel.find('/');
    if (slash == std::string::npos || slash == 0)
      continue; // directly under root
    // Hidden files and directories (a component with a leading '.').
    bool hidden = false;
    for (size_t at = 0; at < rel.size();) {
      if (rel[at] == '.')
        hidden = true;
      size_t next = rel.find('/', at);
      if (next == std::string::npos)
        break;
      at = next + 1;
    }
    if (hidden)
      continue;
    std::vector<std::string> &files = byClass[rel.substr(0, slash)];
    if (rel.back() != '/' && wanted(fs::path(rel)))
      files.push_back(rel);
  }
  if (byClass.empty())
    return Status::error(kind + ": no class directories under '" + src->root +
                         "' (" + std::to_string(urls->size()) +
                         " objects listed; objects directly under root are "
                         "ignored: put the files of each class under their "
                         "own prefix)");
  for (auto &[cls, files] : byClass) {
    std::sort(files.begin(), files.end());
    for (const std::string &f : files)
      src->files.add(f, static_cast<int32_t>(src->classes.size()));
    src->classes.push_back(cls);
  }
  if (src->files.size() == 0)
    return Status::error(kind + ": no files with extension " +
                         extensionList(exts) + " in the " +
                         std::to_string(src->classes.size()) +
                         " class prefixes under '" + src->root + "'");
  src->files.shrink();
  src->setNaturalType(kind, RecordType({{"path", FieldType(ElemType::String)},
                                        {"data", FieldType(ElemType::Bytes)},
                                        {"label", FieldType(ElemType::I64)}}));
  return std::unique_ptr<Source>(std::move(src));
}

} // namespace

Expected<std::unique_ptr<Source>> createImageFolder(const std::string &kind,
                                                    const Value &params,
                                                    const std::string &base) {
  auto src = std::make_unique<ImageFolderSource>();
  std::string rootParam = stringParam(params, "root", "");
  if (rootParam.empty())
    return Status::error(kind + ": parameter 'root' (the directory holding "
                                "one sub-directory per class) is required");
  src->root = joinPath(base, rootParam);
  std::vector<std::string> exts;
  if (params["extensions"].isNull())
    exts = {"jpg", "jpeg", "png"};
  else
    for (std::string e : stringList(params["extensions"]))
      exts.push_back(lower(e[0] == '.' ? e.substr(1) : e));
  auto wanted = [&](const fs::path &p) {
    std::string ext = p.extension().string();
    if (ext.size() < 2)
      return false;
    ext = lower(ext.substr(1));
    return std::find(exts.begin(), exts.end(), ext) != exts.end();
  };
  if (Status st = checkSourceUrl(kind, "root", rootParam, false); !st)
    return st;
  if (isRemoteUrl(src->root))
    return remoteImageFolder(kind, params, std::move(src), exts, wanted, base);
  std::error_code ec;
  if (!fs::is_directory(src->root, ec))
    return Status::error(kind + ": root '" + src->root +
                         "' is not a directory");

  for (fs::directory_iterator it(src->root, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (!isHidden(it->path()) && it->is_directory(ec))
      src->classes.push_back(it->path().filename().string());
  }
  if (ec)
    return Status::error(kind + ": cannot list '" + src->root +
                         "': " + ec.message());
  std::sort(src->classes.begin(), src->classes.end());
  if (src->classes.empty())
    return Status::error(kind + ": no class directories under '" + src->root +
                         "' (files directly under root are ignored; put the "
                         "files of each class in their own directory)");

  // Each class directory is walked with opendir/readdir: a directory that
  // cannot be listed (permissions, I/O error) or an entry that cannot be
  // looked at (a dangling symbolic link, a link loop) becomes a shard that
  // reports the error when read, never a silent gap. The listing is sorted
  // afterwards, so nothing depends on the order readdir returns entries in.
  const char *kUnlistable = "image_folder: cannot list a class directory";
  const char *kUnreadable = "image_folder: cannot read file";
  struct Entry {
    std::string rel;
    Broken broken; // reason empty: a file to read
    bool operator<(const Entry &o) const { return rel < o.rel; }
  };
  std::vector<Entry> rel;
  // SLUICE_NO_DIRENT_TYPES=1: every entry is looked at with stat (one
  // system call per file: 2,000 pictures cost ~2-5 ms of start-up here).
  const bool direntTypes = !switchedOff("SLUICE_NO_DIRENT_TYPES");
  size_t unlistableDirs = 0;
  std::string firstUnlistable, firstUnlistableError;
  for (size_t c = 0; c < src->classes.size(); ++c) {
    rel.clear();
    std::vector<std::string> stack = {src->classes[c]};
    std::set<std::pair<dev_t, ino_t>> visited; // symlink loops end here
    while (!stack.empty()) {
      std::string relDir = stack.back();
      stack.pop_back();
      std::string full = joinPath(src->root, relDir);
      DIR *d = ::opendir(full.c_str());
      if (!d) {
        rel.push_back({relDir, {kUnlistable, std::strerror(errno)}});
        continue;
      }
      for (;;) {
        // errno is set before each readdir and read right after it: what
        // the stat calls below leave in it is never taken for a listing
        // error.
        errno = 0;
        struct dirent *e = ::readdir(d);
        if (!e) {
          if (errno != 0)
            rel.push_back({relDir, {kUnlistable, std::strerror(errno)}});
          break;
        }
        std::string name = e->d_name;
        if (name == "." || name == ".." || name[0] == '.')
          continue;
        std::string childRel = relDir + "/" + name;
        // A regular file (readdir's d_type says so on most file systems)
        // needs no stat: what stat would say of it is what d_type says.
        // Directories (their device and inode end symlink loops), links
        // and entries of unknown type are looked at with stat.
        if (direntTypes && e->d_type == DT_REG) {
          if (wanted(fs::path(name)))
            rel.push_back({childRel, {}});
          continue;
        }
        std::string childFull = joinPath(src->root, childRel);
        struct stat sb;
        // stat, not lstat: symlinked files and directories are followed.
        if (::stat(childFull.c_str(), &sb) != 0) {
          int err = errno;
          // An entry whose extension says it is some other kind of file is
          // not part of the data set, readable or not.
          std::string ext = fs::path(name).extension().string();
          if (ext.size() >= 2 && !wanted(fs::path(name)))
            continue;
          std::string why = std::strerror(err);
          struct stat lsb;
          if (::lstat(childFull.c_str(), &lsb) == 0 && S_ISLNK(lsb.st_mode)) {
            std::error_code lec;
            fs::path target = fs::read_symlink(childFull, lec);
            why = (err == ENOENT ? "dangling symbolic link" : "symbolic link") +
                  (lec ? std::string() : " to '" + target.string() + "'") +
                  ": " + why;
          }
          rel.push_back({childRel, {kUnreadable, why}});
          continue;
        }
        if (S_ISDIR(sb.st_mode)) {
          if (visited.insert({sb.st_dev, sb.st_ino}).second)
            stack.push_back(childRel);
        } else if (S_ISREG(sb.st_mode) && wanted(fs::path(name))) {
          rel.push_back({childRel, {}});
        }
      }
      ::closedir(d);
    }
    std::sort(rel.begin(), rel.end());
    for (const Entry &entry : rel) {
      if (!entry.broken.reason.empty()) {
        src->broken[src->files.size()] = entry.broken;
        if (entry.broken.reason == kUnlistable && unlistableDirs++ == 0) {
          firstUnlistable = entry.rel;
          firstUnlistableError = entry.broken.error;
        }
      }
      src->files.add(entry.rel, static_cast<int32_t>(c));
    }
  }
  if (unlistableDirs && src->files.size() == unlistableDirs)
    return Status::error(kind + ": cannot list " + firstUnlistable +
                         " under '" + src->root + "': " + firstUnlistableError +
                         (unlistableDirs > 1
                              ? " (and " + std::to_string(unlistableDirs - 1) +
                                    " more directories)"
                              : ""));
  if (src->files.size() == 0) {
    std::string list;
    for (const std::string &e : exts)
      list += (list.empty() ? "" : ", ") + e;
    return Status::error(kind + ": no files with extension " + list +
                         " in the " + std::to_string(src->classes.size()) +
                         " class directories under '" + src->root + "'");
  }
  src->files.shrink();
  src->setNaturalType(kind, RecordType({{"path", FieldType(ElemType::String)},
                                        {"data", FieldType(ElemType::Bytes)},
                                        {"label", FieldType(ElemType::I64)}}));
  return std::unique_ptr<Source>(std::move(src));
}

Expected<std::unique_ptr<Source>> createFiles(const std::string &kind,
                                              const Value &params,
                                              const std::string &base) {
  auto src = std::make_unique<FilesSource>();
  // The registry calls the pattern `glob`; `files` is accepted for symmetry
  // with the other sources.
  const char *name = params.has("glob") ? "glob" : "files";
  std::shared_ptr<const RemoteConfig> remote;
  Expected<std::vector<std::string>> paths =
      expandFiles(kind, params, name, base, &remote);
  if (!paths)
    return paths.status();
  src->setRemote(remote);
  src->paths = paths.take();
  src->setNaturalType(kind, RecordType({{"path", FieldType(ElemType::String)},
                                        {"data", FieldType(ElemType::Bytes)}}));
  return std::unique_ptr<Source>(std::move(src));
}

} // namespace sluice::runtime::detail
