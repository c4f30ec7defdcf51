// tarmac's main(): everything lives in the cli library so that it can be tested in-process.
#include "tarmac/cli/app.hpp"

int main(int argc, char** argv) { return tarmac::cli::run(argc, argv); }
