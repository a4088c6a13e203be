//===- main.cpp - The sluice command-line driver
//---------------------------===//
//
// Parses the command line with CLI11 and dispatches to the subcommands
// registered in kCommands (each in its own function, see Driver.h). Usage
// errors print "sluice: error: ..." (with a "did you mean" for misspelt
// commands and options) and exit 2; `sluice CMD --help` / `-h` describe every
// flag. Exit codes: 0 ok, 1 pipeline/data error, 2 usage or spec error.
//
//===----------------------------------------------------------------------===//
#include "Driver.h"

#include "sluice/ops/Registry.h"
#include "sluice/runtime/Memory.h"

#include <iostream>
#include <map>
#include <string>
#include <vector>

using namespace sluice;
using namespace sluice::tool;

namespace {

/// Every subcommand, in the order `sluice --help` lists them. A new command
/// adds its registration function here (and its own file).
const CommandRegistration kCommands[] = {
    addCheckCommand, addExplainCommand, addOpsCommand,  addRunCommand,
    addBenchCommand, addCompileCommand, addTuneCommand, addServeCommand,
};

/// Commands DESIGN.md promises that are not built yet: a clear message
/// instead of "unknown command". Remove an entry when its command lands.
const std::map<std::string, std::string> kNotYet = {};

/// CLI11's help layout with sluice's lowercase usage line and the exit codes.
class HelpFormatter : public CLI::Formatter {
public:
  HelpFormatter() {
    label("Positionals", "arguments");
    column_width(26);
  }
  /// The description follows the usage line (see make_usage).
  std::string make_description(const CLI::App *) const override { return ""; }
  std::string make_usage(const CLI::App *app, std::string) const override {
    std::string desc = app->get_description().empty()
                           ? ""
                           : "\n" + app->get_description() + "\n";
    if (!app->get_parent())
      return "usage: sluice <command> [options]\n" + desc;
    // "usage: sluice run SPEC [options]": a SPEC is required (one), other
    // positionals are optional lists.
    std::string usage = "usage: sluice " + app->get_name();
    for (const CLI::Option *o : app->get_options())
      if (o->get_positional())
        usage +=
            o->get_name() == "SPEC" ? " SPEC" : " [" + o->get_name() + "...]";
    return usage + " [options]\n" + desc;
  }
};

const char *kCommandFooter =
    "exit codes: 0 ok, 1 pipeline or data error, 2 usage or spec error";
const char *kRootFooter =
    "'sluice CMD --help' describes a command's options.\n"
    "exit codes: 0 ok, 1 pipeline or data error, 2 usage or spec error";

} // namespace

int main(int argc, char **argv) {
  if (int rc = serveElsewhere(argc, argv); rc >= 0)
    return rc;
  runtime::configureProcessAllocator(); // before any thread: Memory.h
  CLI::App root("sluice: a declarative input-pipeline compiler for ML "
                "training",
                "sluice");
  root.formatter(std::make_shared<HelpFormatter>());
  root.footer(kRootFooter);
  root.option_defaults()->group("options")->disable_flag_override();
  root.set_help_flag("-h,--help", "print this help and exit");
  std::map<std::string, CommandAction> actions;
  std::vector<std::string> names;
  for (CommandRegistration reg : kCommands) {
    CommandAction action = reg(root);
    CLI::App *cmd = root.get_subcommands({}).back();
    cmd->allow_extras();
    cmd->group("commands");
    cmd->footer(kCommandFooter);
    cmd->set_help_flag("-h,--help", "print this help and exit");
    actions[cmd->get_name()] = std::move(action);
    names.push_back(cmd->get_name());
  }

  if (argc < 2)
    return usageError("missing command");
  std::string first = argv[1];
  if (first == "-h" || first == "--help" || first == "help") {
    // `sluice help CMD` is `sluice CMD --help`.
    if (first == "help" && argc > 2 && actions.count(argv[2])) {
      std::cout << root.get_subcommand(argv[2])->help();
      return kExitOk;
    }
    std::cout << root.help();
    return kExitOk;
  }
  if (first == "--version" || first == "version") {
    std::cout << "sluice " SLUICE_VERSION "\n";
    return kExitOk;
  }
  if (!actions.count(first)) {
    if (auto it = kNotYet.find(first); it != kNotYet.end()) {
      std::string works;
      for (size_t i = 0; i < names.size(); ++i)
        works += (i ? (i + 1 == names.size() ? " and '" : ", '") : "'") +
                 names[i] + "'";
      std::cerr << "sluice: error: '" << first
                << "' is not available yet (it arrives with the " << it->second
                << " work); " << works << " work\n";
      return kExitUsage;
    }
    if (first.rfind("-", 0) == 0)
      return usageError("unknown option '" + first +
                        "' before the command; options follow the command");
    std::string m = closestMatch(first, names);
    return usageError("unknown command '" + first + "'" +
                      (m.empty() ? "" : "; did you mean '" + m + "'?"));
  }

  CLI::App *cmd = root.get_subcommand(first);
  try {
    root.parse(argc, argv);
  } catch (const CLI::CallForHelp &) {
    std::cout << cmd->help();
    return kExitOk;
  } catch (const CLI::CallForAllHelp &) {
    std::cout << root.help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::ParseError &e) {
    return reportParseError(e, first);
  }
  if (int rc = rejectExtras(*cmd, first); rc >= 0)
    return rc;
  runtime::endProcess(actions[first]()); // flushes; skips static teardown
}
