// hcomm._torch_backend's one translation unit. torch's headers take ~40 s
// of parsing and ~50 s of code generation per unit at -O2 -g on this
// project's 2-core machines, so the backend's files are compiled together
// (3.3x less CPU than one unit each: 119 s against 392 s, torch 2.15).
// Each file still includes what it uses and compiles alone.
#include "backend.cpp"
#include "fault.cpp"
#include "ops.cpp"
#include "module.cpp"
