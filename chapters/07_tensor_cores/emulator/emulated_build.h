/// @file emulated_build.h
/// @brief Chapter 7: what the emulated build injects before any kernel header (which never includes
/// the emulator): the switch, the emulated PTX instructions, wmma and CUDA intrinsics.
#pragma once

#define FA_TC_EMULATE 1
#include "../../../common/tensor_core/emulator.h"
#include "../../../common/tensor_core/emulated_ptx.h"
#include "../../../common/tensor_core/emulated_wmma.h"
