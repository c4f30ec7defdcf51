// tarmac-sim: runs commands against the simulated libnvidia-ml.so.1 (docs/simulator.md).
#include <cstdio>
#include <string>

#include "commands.hpp"

namespace {

void usage(std::FILE* out) {
  std::fputs(
      "usage: tarmac-sim list\n"
      "       tarmac-sim [run] --scenario NAME|FILE [--speed X] [--driver current|old] [--state DIR]\n"
      "                  [--fault SPEC]... (-- CMD [ARGS...] | --hold)\n"
      "       tarmac-sim fault --state DIR (SPEC... | --clear)\n"
      "       tarmac-sim status --state DIR\n"
      "       tarmac-sim check NAME|FILE...\n"
      "\n"
      "run      start the scenario's processes and its shared clock, run CMD with the simulated\n"
      "         libnvidia-ml.so.1 (LD_LIBRARY_PATH, TARMAC_NVML_LIB, TARMAC_SIM_STATE set), stop\n"
      "         everything and exit with CMD's status; --hold keeps the simulation up until signalled\n"
      "list     the bundled scenarios\n"
      "fault    inject a fault into a running simulation, e.g.\n"
      "         'function=nvmlDeviceGetPowerUsage,gpu=1,return=NOT_SUPPORTED', 'gpu=2,lost',\n"
      "         'function=*,delay_ms=500,calls=3', 'gpu=0,xid=48'\n"
      "status   the simulated time and the live GPU processes of a running simulation\n"
      "check    validate scenario files\n",
      out);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tarmac::sim::launcher;
  Args args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    usage(args.empty() ? stderr : stdout);
    return args.empty() ? kExitUsage : 0;
  }
  const std::string command = args[0];
  const Args rest(args.begin() + 1, args.end());
  if (command == "run") return run_command(rest);
  if (command == "list") return list_command(rest);
  if (command == "fault") return fault_command(rest);
  if (command == "status") return status_command(rest);
  if (command == "check") return check_command(rest);
  // `tarmac sim --scenario X -- CMD` forwards its arguments here without the word "run".
  if (command.starts_with("--")) return run_command(args);
  std::fprintf(stderr, "tarmac-sim: unknown command '%s'\n", command.c_str());
  usage(stderr);
  return kExitUsage;
}
